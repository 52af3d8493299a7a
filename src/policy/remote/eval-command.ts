/**
 * `empo2 eval <model dir> --remote <url>`: held-out evaluation with every policy call answered by
 * an OpenAI-compatible server; the model directory only supplies tokenizer.json.
 */
import type { Config } from '../../config/schema.ts';
import { evaluateEngine } from '../../trainer/eval-command.ts';
import { remoteEngineFromDir, type RemoteEngineOptions } from './index.ts';

export async function evaluateRemote(tokenizerDir: string, remote: Omit<RemoteEngineOptions, 'tokenizer' | 'endTokens'>, cfg: Config, opts: { json?: string; trajectories?: string } = {}): Promise<void> {
  const engine = remoteEngineFromDir(tokenizerDir, remote);
  console.log(`evaluating "${await engine.model()}" served at ${engine.baseUrl}, tokenizer from ${tokenizerDir}`);
  try {
    await evaluateEngine(engine, cfg, { column: 'served model', json: opts.json, modelDir: tokenizerDir, trajectories: opts.trajectories });
  } finally {
    engine.dispose();
  }
}
