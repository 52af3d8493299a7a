/**
 * `empo2 eval`: a checkpoint or model directory played on held-out variations, by an engine of this
 * process or through an OpenAI-compatible server, printed as the evaluation table.
 */
import type { Config } from '../../config/schema.ts';
import { remoteEngineFromDir, type RemoteEngineOptions } from '../../policy/remote/index.ts';
import { evaluateEngine } from '../../adapt/checkpoint-eval.ts';
import type { EvalResult } from '../../run/records.ts';

export async function evaluateModelDir(dir: string, cfg: Config, opts: { json?: string; trajectories?: string } = {}): Promise<EvalResult> {
  // Loaded here, not at the top, so `eval --remote` does not load TensorFlow.js or the training code.
  const { initBackend } = await import('../../policy/tfjs/backend.ts');
  const { createPlayingEngine } = await import('../../policy/engines.ts');
  await initBackend();
  const { engine, description } = await createPlayingEngine(cfg, dir);
  console.error(`empo2 eval | ${dir} | ${description}`);
  try {
    return await evaluateEngine(engine, cfg, { column: 'checkpoint', json: opts.json, modelDir: dir, trajectories: opts.trajectories });
  } finally {
    engine.dispose();
  }
}

/** `empo2 eval <model dir> --remote <url>`: every policy call answered by the server; the model directory only supplies tokenizer.json. */
export async function evaluateRemote(
  tokenizerDir: string,
  remote: Omit<RemoteEngineOptions, 'tokenizer' | 'endTokens'>,
  cfg: Config,
  opts: { json?: string; trajectories?: string } = {},
): Promise<void> {
  const engine = remoteEngineFromDir(tokenizerDir, remote);
  console.log(`evaluating "${await engine.model()}" served at ${engine.baseUrl}, tokenizer from ${tokenizerDir}`);
  try {
    await evaluateEngine(engine, cfg, { column: 'served model', json: opts.json, modelDir: tokenizerDir, trajectories: opts.trajectories });
  } finally {
    engine.dispose();
  }
}
