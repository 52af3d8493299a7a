/** `empo2 eval`: load a policy directory and print the held-out evaluation table. */
import type { Config } from '../config/schema.ts';
import { createEnv } from '../envs/index.ts';
import type { Env } from '../envs/types.ts';
import { initBackend } from '../policy/tfjs/backend.ts';
import { evaluate, formatEvalTable } from './evaluate.ts';
import { environmentCount } from './rollout.ts';
import { createEngine } from './trainer.ts';

export async function evaluateModelDir(dir: string, cfg: Config): Promise<void> {
  await initBackend();
  const { engine } = await createEngine({ ...cfg, model: { ...cfg.model, path: dir } }, 'fresh');
  const probe = await createEnv(cfg.env);
  const tasks = cfg.env.tasks ?? probe.tasks();
  const envs: Env[] = [probe];
  while (envs.length < environmentCount(cfg, tasks.length * cfg.env.eval_variations)) envs.push(await createEnv(cfg.env));
  const result = await evaluate(engine, envs, tasks, cfg, 0);
  console.log(formatEvalTable(result, null).replace(/iter 0/g, 'checkpoint'));
  await Promise.all(envs.map((e) => e.close()));
  engine.dispose();
}
