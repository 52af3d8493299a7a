/**
 * `empo2 eval <model dir> --remote <url>`: held-out evaluation with every policy call answered by
 * an OpenAI-compatible server; the model directory only supplies tokenizer.json.
 */
import type { Config } from '../../config/schema.ts';
import { createEnv } from '../../envs/index.ts';
import type { Env } from '../../envs/types.ts';
import { evaluate, formatEvalTable } from '../../trainer/evaluate.ts';
import { remoteEngineFromDir, type RemoteEngineOptions } from './index.ts';

export async function evaluateRemote(tokenizerDir: string, remote: Omit<RemoteEngineOptions, 'tokenizer' | 'endTokens'>, cfg: Config): Promise<void> {
  const engine = remoteEngineFromDir(tokenizerDir, remote);
  console.log(`evaluating "${await engine.model()}" served at ${engine.baseUrl}, tokenizer from ${tokenizerDir}`);
  const probe = await createEnv(cfg.env);
  const tasks = cfg.env.tasks ?? probe.tasks();
  const envs: Env[] = [probe];
  while (envs.length < tasks.length * cfg.env.eval_variations) envs.push(await createEnv(cfg.env));
  try {
    const result = await evaluate(engine, envs, tasks, cfg, 0);
    console.log(formatEvalTable(result, null).replace(/iter 0/g, 'served model'));
  } finally {
    await Promise.all(envs.map((e) => e.close()));
    engine.dispose();
  }
}
