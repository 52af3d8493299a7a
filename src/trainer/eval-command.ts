/** `empo2 eval`: load a policy directory (or use a served one) and print the held-out evaluation table. */
import { basename } from 'node:path';
import type { Config } from '../config/schema.ts';
import { createEnv } from '../envs/index.ts';
import type { Env } from '../envs/types.ts';
import { writeJsonAtomic } from '../policy/tfjs/json-file.ts';
import type { PolicyEngine } from '../policy/types.ts';
import { loadTrainerState } from './trainer-state.ts';
import { evaluate, formatEvalTable, type EvalResult } from './evaluate.ts';
import { environmentCount } from './rollout.ts';

/** What `empo2 eval --json` writes: the result plus what was evaluated and how, so a reader can tell a stale file. */
export interface EvalRecord {
  /** Folder name of the checkpoint or model directory evaluated (e.g. iter-000016). */
  checkpoint: string;
  /** Training env steps at which that checkpoint was saved (absent for a model directory that is not a checkpoint). */
  train_env_steps?: number;
  eval_split: Config['env']['eval_split'];
  eval_variations: number;
  eval_temperature: number;
  seed: number;
  seconds: number;
  per_task: EvalResult['perTask'];
  episodes: number;
  mean_score: number;
  success_rate: number;
}

export interface EvalOutput {
  /** Replaces "iter 0" in the printed table's column names. */
  column: string;
  /** Where to write the EvalRecord, if anywhere. */
  json?: string;
  /** The directory the weights (or, for a served model, the tokenizer) came from. */
  modelDir: string;
}

/** Evaluates `engine` on the config's held-out variations (at most env.max_instances environments open at once), prints and optionally saves the result. */
export async function evaluateEngine(engine: PolicyEngine, cfg: Config, output: EvalOutput): Promise<EvalResult> {
  const t0 = performance.now();
  const probe = await createEnv(cfg.env);
  const tasks = cfg.env.tasks ?? probe.tasks();
  const envs: Env[] = [probe];
  try {
    while (envs.length < environmentCount(cfg, tasks.length * cfg.env.eval_variations)) envs.push(await createEnv(cfg.env));
    const result = await evaluate(engine, envs, tasks, cfg, 0);
    console.log(formatEvalTable(result, null).replace(/iter 0/g, output.column));
    if (output.json) {
      const record: EvalRecord = {
        checkpoint: basename(output.modelDir),
        ...checkpointSteps(output.modelDir),
        eval_split: cfg.env.eval_split,
        eval_variations: cfg.env.eval_variations,
        eval_temperature: cfg.rollout.eval_temperature,
        seed: cfg.seed,
        seconds: (performance.now() - t0) / 1000,
        per_task: result.perTask,
        episodes: result.summary.episodes,
        mean_score: result.summary.mean_score,
        success_rate: result.summary.success_rate,
      };
      writeJsonAtomic(output.json, record);
    }
    return result;
  } finally {
    await Promise.all(envs.map((e) => e.close()));
  }
}

/** A checkpoint's env steps; nothing for a model directory that is not a checkpoint. */
function checkpointSteps(dir: string): { train_env_steps?: number } {
  try {
    const steps: unknown = loadTrainerState(dir).envSteps;
    return typeof steps === 'number' ? { train_env_steps: steps } : {};
  } catch {
    // The weights evaluate fine without it; the record just cannot say where the checkpoint sits.
    return {};
  }
}

export async function evaluateModelDir(dir: string, cfg: Config, opts: { json?: string } = {}): Promise<EvalResult> {
  // Loaded here, not at the top, so `eval --remote` does not load TensorFlow.js or the training code.
  const { initBackend } = await import('../policy/tfjs/backend.ts');
  const { createEngine } = await import('./trainer.ts');
  await initBackend();
  const { engine } = await createEngine({ ...cfg, model: { ...cfg.model, path: dir } }, 'fresh');
  try {
    return await evaluateEngine(engine, cfg, { column: 'checkpoint', json: opts.json, modelDir: dir });
  } finally {
    engine.dispose();
  }
}
