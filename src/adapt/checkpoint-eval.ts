/**
 * A held-out evaluation of one policy (a checkpoint, a model directory or a served model): the episodes
 * recorded, the table printed, and the record `empo2 eval --json` writes.
 */
import { existsSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { ConfigError } from '../config/load.ts';
import { resolveAlgo, type Config } from '../config/schema.ts';
import { evalVariationsNote } from '../envs/index.ts';
import type { PolicyEngine } from '../policy/types.ts';
import { MEMORY_FILE } from '../run/checkpoint.ts';
import { openEnvPool } from '../run/env-pool.ts';
import { recordEpisodes, TRAJECTORIES_DIR } from '../run/episode-log.ts';
import { timing } from '../run/iteration-log.ts';
import type { Episode, EvalResult } from '../run/records.ts';
import { loadTrainerState } from '../run/trainer-state.ts';
import { evaluate, evaluationEpisodes, formatEvalTable, type EvaluationChunks } from '../trainer/evaluate.ts';
import { MemoryRuntime } from '../trainer/memory-runtime.ts';
import { isActing, type ActingEngine } from '../trainer/rollout.ts';
import { TrajectoryWriter } from '../trajectory/writer.ts';
import { writeJsonAtomic } from '../util/atomic-write.ts';
import { EvalPartial, modelFingerprint, partialPathOf } from './eval-partial.ts';

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
  /** Episodes an environment or engine failure ended, not scored (absent in files written before they were counted). */
  failed?: number;
  /** Tips from the checkpoint's memory were shown (train.eval_with_memory); absent when they were not. */
  with_memory?: { tips: number };
  /** How actions were chosen when not by the policy alone (`retrospex`), and with what (`critic`); absent for the policy alone. */
  method?: string;
  critic?: object;
}

export interface EvalOutput {
  /** Replaces "iter 0" in the printed table's column names. */
  column: string;
  /** Where to write the EvalRecord, if anywhere. */
  json?: string;
  /** The directory the weights (or, for a served model, the tokenizer) came from. */
  modelDir: string;
  /** Where to record the episodes played (trajectory JSON lines), if anywhere. */
  trajectories?: string;
  /** Fields saying how actions were chosen, added to the EvalRecord (Retrospex: method and critic). */
  method?: Pick<EvalRecord, 'method' | 'critic'>;
  /** Go on from the chunks a stopped run of the same evaluation recorded (eval-partial.ts); needs `json` or `trajectories`. */
  resume?: boolean;
  /** What else decides the episodes besides the config and the model's files (the engine, a served model, the critic's content). */
  identity?: Record<string, unknown>;
}

/**
 * Where `empo2 eval` records a checkpoint's episodes by default: beside the run's own records, one
 * file per checkpoint (evaluations of different checkpoints may run at once). Null for a model
 * directory that is not part of a run: nothing is written into it unless --trajectories says where.
 */
export function defaultEvalTrajectories(modelDir: string): string | null {
  const checkpoints = dirname(modelDir);
  if (basename(checkpoints) !== 'checkpoints') return null;
  const runDir = dirname(checkpoints);
  if (!existsSync(join(runDir, 'config.yaml')) && !existsSync(join(runDir, 'metrics.jsonl'))) return null;
  return join(runDir, TRAJECTORIES_DIR, `eval-${basename(modelDir)}.jsonl`);
}

/** Evaluates `engine` on the config's held-out variations (at most env.max_instances environments open at once), prints and optionally saves the result. */
export async function evaluateEngine(engine: PolicyEngine, cfg: Config, output: EvalOutput): Promise<EvalResult> {
  const t0 = performance.now();
  const partial = openPartial(cfg, output);
  const acting = isActing(engine) ? engine : null;
  if (partial?.done.length && partial.engineState !== undefined) acting?.restoreActingState?.(partial.engineState);
  let tasks: string[] = [];
  const envs = await openEnvPool(cfg, (first) => {
    tasks = cfg.env.tasks ?? first.tasks();
    return evaluationEpisodes(first, tasks, cfg);
  });
  try {
    const evalNote = evalVariationsNote(envs[0], tasks, cfg.env.eval_split, cfg.env.eval_variations);
    if (evalNote) console.log(evalNote);
    const memory = cfg.train.eval_with_memory ? await checkpointMemory(cfg, engine, output.modelDir) : undefined;
    if (memory) console.log(`showing tips from ${join(output.modelDir, MEMORY_FILE)} (${memory.tips.size()} tips; read, not written)`);
    const writer = output.trajectories
      ? TrajectoryWriter.fresh(output.trajectories, { maxBytes: cfg.trajectories.max_megabytes * 2 ** 20, log: (l) => console.log(l) })
      : null;
    const at = {
      source: 'eval' as const,
      iteration: checkpointIteration(output.modelDir),
      envSteps: checkpointSteps(output.modelDir).train_env_steps ?? null,
      checkpoint: basename(output.modelDir),
    };
    const played = (episodes: readonly Episode[]) =>
      recordEpisodes(writer, episodes, at, { count: cfg.trajectories.eval_per_evaluation, mode: memory ? 'tips' : 'plain', slots: memory });
    const result = await evaluate(engine, envs, cfg, {
      tasks,
      iteration: 0,
      memory,
      progressLabel: 'eval',
      played,
      chunks: chunksOf(partial, acting),
    });
    result.summary.seconds += partial?.earlierSeconds ?? 0;
    if (writer)
      console.log(
        `episodes recorded in ${output.trajectories} (read them with: empo2 dashboard ${dashboardArgument(output.trajectories!)})`,
      );
    console.log(formatEvalTable(result, null).replace(/iter 0/g, output.column));
    console.log(timing(result.summary));
    // Too many failed episodes: no score, so nothing a comparison could read as one.
    if (result.invalid)
      throw new Error(
        `the evaluation is invalid, it gives no score: ${result.invalid}${output.json ? `; ${output.json} was not written` : ''}`,
      );
    if (output.json) {
      const record = evalRecordOf(result, cfg, { modelDir: output.modelDir, t0, memory });
      writeJsonAtomic(output.json, { ...record, seconds: record.seconds + (partial?.earlierSeconds ?? 0), ...output.method });
    }
    partial?.remove();
    return result;
  } finally {
    await Promise.all(envs.map((e) => e.close()));
  }
}

/**
 * The partial file of an evaluation whose outputs are named: its finished chunks on --resume, and the
 * keeper of each new one. What decides the episodes is its identity: the whole config, the model's files,
 * the method, and what the caller adds (the engine, a served model, the critic's content).
 */
function openPartial(cfg: Config, output: EvalOutput): EvalPartial | null {
  const path = partialPathOf(output);
  if (!path) {
    if (output.resume) throw new ConfigError('--resume needs --json or --trajectories: the finished chunks are kept beside them');
    return null;
  }
  const outputs = [output.json, output.trajectories].filter((p): p is string => p !== undefined);
  const identity = {
    config: JSON.parse(JSON.stringify(cfg)),
    model: modelFingerprint(output.modelDir, outputs),
    method: output.method ?? null,
    ...output.identity,
  };
  return EvalPartial.open(path, identity, { resume: output.resume === true, log: (l) => console.log(l) });
}

/** Hands evaluate() the recorded chunks, and records each new one with the time it took. */
function chunksOf(partial: EvalPartial | null, acting: ActingEngine | null): EvaluationChunks | undefined {
  if (!partial) return undefined;
  let since = performance.now();
  return {
    done: partial.done,
    played: (chunk) => {
      const now = performance.now();
      partial.record(chunk, (now - since) / 1000, acting?.actingState?.());
      since = now;
    },
  };
}

/** What `empo2 eval --json` writes of `result`. */
function evalRecordOf(result: EvalResult, cfg: Config, o: { modelDir: string; t0: number; memory: MemoryRuntime | undefined }): EvalRecord {
  return {
    checkpoint: basename(o.modelDir),
    ...checkpointSteps(o.modelDir),
    eval_split: cfg.env.eval_split,
    eval_variations: cfg.env.eval_variations,
    eval_temperature: cfg.rollout.eval_temperature,
    seed: cfg.seed,
    seconds: (performance.now() - o.t0) / 1000,
    per_task: result.perTask,
    episodes: result.summary.episodes,
    mean_score: result.summary.mean_score,
    success_rate: result.summary.success_rate,
    failed: result.summary.failed ?? 0,
    ...(o.memory ? { with_memory: { tips: o.memory.tips.size() } } : {}),
  };
}

/**
 * The memory saved with a checkpoint, for train.eval_with_memory. Loaded here rather than silently
 * skipped: a table said to be "with memory" must not have been made without it.
 */
async function checkpointMemory(cfg: Config, engine: PolicyEngine, dir: string): Promise<MemoryRuntime> {
  if (!existsSync(join(dir, MEMORY_FILE)))
    throw new ConfigError(`train.eval_with_memory is set, but ${dir} has no ${MEMORY_FILE} (only runs that keep a tip memory save one)`);
  const algo = resolveAlgo(cfg);
  if (!algo.memory)
    throw new ConfigError(
      `train.eval_with_memory is set, but algo ${cfg.algo.name} with p = ${cfg.algo.p} keeps no tip memory; pass the run's config or set algo.p > 0`,
    );
  // An evaluation writes no tips: no tip writer is made (an external one would need its key for nothing).
  const reader: Config = { ...cfg, memory: { ...cfg.memory, reflector: 'summary', reflector_model: null } };
  return MemoryRuntime.create(reader, algo, engine, { checkpoint: dir });
}

/** What to open in the dashboard to read a trajectory file: its run, when it sits in one's trajectories/ folder. */
function dashboardArgument(file: string): string {
  const folder = dirname(file);
  return basename(folder) === TRAJECTORIES_DIR ? dirname(folder) : file;
}

/** A checkpoint's iteration; null for a model directory that is not a checkpoint. */
function checkpointIteration(dir: string): number | null {
  try {
    return loadTrainerState(dir).iteration;
  } catch {
    return null;
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
