/**
 * Everything a training run holds from its start to its end, and how it is opened and closed: the
 * resume checks, the engines, the tip memory, the environments, the tip warm-up and rehearsal, the
 * metrics and trajectory files, Ctrl-C handling. ./trainer.ts opens one and runs its loop over it.
 */
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { stringify as toYaml } from 'yaml';
import { ConfigError, loadConfig } from '../config/load.ts';
import { RESUMABLE_OPTIONS, resolveAlgo, resumeConflicts, type Config, type ResolvedAlgo } from '../config/schema.ts';
import { createEnv, evalVariationsNote } from '../envs/index.ts';
import type { Env } from '../envs/types.ts';
import { initBackend } from '../policy/tfjs/backend.ts';
import { nativeMatMulStatus } from '../policy/tfjs/native-matmul.ts';
import { resolveModelPath } from '../policy/gguf/model-path.ts';
import type { PolicyEngine } from '../policy/types.ts';
import { TfjsEngine } from '../policy/tfjs/engine.ts';
import { writeTextAtomic } from '../util/atomic-write.ts';
import { Rng } from '../util/rng.ts';
import {
  latestCheckpoint,
  loadTrainerState,
  removeOwnTemporaryFiles,
  removeStaleTemporaryFiles,
  saveCheckpoint,
  type TrainerState,
} from './checkpoint.ts';
import { createRemoteRollouts, createTrainingEngine, type TrainingEngine } from './engines.ts';
import { evaluationEpisodes } from './evaluate-checkpoint.ts';
import { InterruptHandling, policyCalls } from './interrupt.ts';
import { bannerLines } from './iteration-log.ts';
import { MEMORY_FILE, MemoryRuntime } from './memory.ts';
import { MetricsLog } from './metrics-log.ts';
import { environmentCount, oracleOf } from './rollout.ts';
import { buildWarmupExamples, runTipWarmup, TipRehearsal, tipWarmupSettings } from './tip-warmup.ts';
import { RunLock } from './run-lock.ts';
import { openRunRecorders } from './trajectories.ts';
import { partialToResume, type PartialBatch } from './partial.ts';

export interface RunContext {
  cfg: Config;
  algo: ResolvedAlgo;
  log: (line: string) => void;
  /** The checkpoint the run continues from (null: a fresh run): a checkpoint, or an iteration saved part-way. */
  resumeFrom: string | null;
  /** The iteration saved part-way that the run goes on inside (./partial.ts); the trainer takes it once. */
  partial: PartialBatch | null;
  training: TrainingEngine;
  /** The training engine; every call lets the event loop turn, so Ctrl-C is seen within one call (./interrupt.ts). */
  engine: PolicyEngine;
  /** What samples the training rollouts: the training engine, or a server (rollout.remote). */
  rolloutEngine: PolicyEngine;
  remoteRollouts: { engine: PolicyEngine; sync: () => Promise<void> } | null;
  /** Tips and novelty (null where the algorithm uses neither). */
  memory: MemoryRuntime | null;
  rehearsal: TipRehearsal | null;
  /** Iteration, env steps, random state and elapsed time: what a checkpoint saves beside the weights. */
  state: TrainerState;
  /** The run's random stream: batches, modes and minibatch order (its state is saved in `state`). */
  rng: Rng;
  metrics: MetricsLog;
  recorders: ReturnType<typeof openRunRecorders>;
  envs: Env[];
  tasks: string[];
  trainVariations: Map<string, number[]>;
  /** The model directory a checkpoint of a LoRA run refers to (null: the default tiny model). */
  baseModelDir: string | null;
  interrupts: InterruptHandling | null;
  /** This process's hold on cfg.run_dir (./run-lock.ts), released by closeRun. */
  lock: RunLock;
}

/**
 * Opens a run in cfg.run_dir, fresh or (`resume`) from its latest checkpoint, and logs its banner.
 * `handleSignals` installs Ctrl-C handling (the CLI does; tests do not).
 */
export async function openRun(cfg: Config, resume: boolean, handleSignals: boolean, log: (line: string) => void): Promise<RunContext> {
  const backend = await initBackend();
  mkdirSync(cfg.run_dir, { recursive: true });
  const lock = RunLock.acquire(cfg.run_dir, log);
  try {
    return await openLockedRun(cfg, resume, handleSignals, log, backend, lock);
  } catch (e) {
    lock.release();
    throw e;
  }
}

async function openLockedRun(
  cfg: Config,
  resume: boolean,
  handleSignals: boolean,
  log: (line: string) => void,
  backend: string,
  lock: RunLock,
): Promise<RunContext> {
  const runDir = cfg.run_dir;
  // A long first iteration may have been saved part-way before any checkpoint was written.
  const checkpoint = latestCheckpoint(runDir);
  const checkpointIteration = checkpoint ? loadTrainerState(checkpoint).iteration : 0;
  if (!resume && (checkpoint || partialToResume(runDir, 0)))
    throw new Error(`${runDir} already holds a run; use --resume to continue it or choose another run_dir`);
  for (const path of removeStaleTemporaryFiles(runDir)) log(`removed ${path}, left by a process that stopped while writing it`);
  const partial = resume ? partialToResume(runDir, checkpointIteration) : null;
  const restoreFrom = partial?.dir ?? (resume ? checkpoint : null);
  if (resume && !restoreFrom) throw new Error(`--resume: no checkpoint in ${join(runDir, 'checkpoints')}`);
  if (restoreFrom) checkResumeConfig(cfg, runDir, loadTrainerState(restoreFrom).iteration, log);
  if (partial) {
    const p = partial.batch.progress;
    log(
      `resuming inside iteration ${partial.batch.iteration} from ${partial.dir}: rollouts done${p ? `, ${p.optimizerSteps} optimiser step${p.optimizerSteps === 1 ? '' : 's'} done` : ''}`,
    );
  }
  const training = await createTrainingEngine(cfg, restoreFrom ?? 'fresh');
  const baseModelDir = cfg.model.path ? await resolveModelPath(cfg.model.path) : null;
  const holder: { interrupts: InterruptHandling | null } = { interrupts: null };
  const engine = policyCalls(training.engine, () => holder.interrupts);
  const remoteRollouts = cfg.rollout.remote ? await createRemoteRollouts(cfg, engine) : null;
  const rolloutEngine: PolicyEngine = remoteRollouts ? policyCalls(remoteRollouts.engine, () => holder.interrupts) : engine;
  const algo = resolveAlgo(cfg);
  const memory = algo.memory || algo.intrinsic !== 'none' ? await MemoryRuntime.create(cfg, algo, engine, restoreFrom) : null;
  const state: TrainerState = training.state ?? { iteration: 0, envSteps: 0, rngState: new Rng(cfg.seed).getState(), elapsedSeconds: 0 };
  const rng = new Rng(0);
  rng.setState(state.rngState);
  // On resume, the settings a resume may change (checkResumeConfig) are the run's from now on.
  writeTextAtomic(join(runDir, 'config.yaml'), toYaml(cfg));
  const metricsPath = join(runDir, 'metrics.jsonl');
  const metrics = restoreFrom ? MetricsLog.resume(metricsPath, state.iteration, log) : MetricsLog.fresh(metricsPath, log);
  const recorders = openRunRecorders(cfg, restoreFrom ? state.iteration : null, log);

  const probe = await createEnv(cfg.env);
  if (memory && cfg.experimental.tip_source === 'oracle') oracleOf(probe); // fail before training, not at the first memory rollout
  const tasks = cfg.env.tasks ?? probe.tasks();
  const trainVariations = new Map(tasks.map((t) => [t, probe.variations(t, 'train').slice(0, cfg.env.train_variations ?? undefined)]));
  const batchSize = cfg.rollout.tasks_per_batch * cfg.rollout.group_size;
  const envs: Env[] = [probe];
  while (envs.length < environmentCount(cfg, Math.max(batchSize, evaluationEpisodes(probe, tasks, cfg))))
    envs.push(await createEnv(cfg.env));
  const evalNote = evalVariationsNote(probe, tasks, cfg.env.eval_split, cfg.env.eval_variations);
  if (evalNote) log(evalNote);

  if (!restoreFrom && cfg.experimental.tip_warmup_examples > 0) {
    const ws = tipWarmupSettings(cfg);
    const examples = await buildWarmupExamples(probe, tasks, engine.tokenizer, ws);
    log(
      `tip warm-up: ${examples.length} synthetic prompts from random-action episodes on the train split of ${tasks.join(', ')}, ${ws.epochs} epochs`,
    );
    const report = await runTipWarmup(engine, examples, ws, log);
    // RL starts with fresh AdamW moments, as it would from a pretrained checkpoint.
    if (training.engine instanceof TfjsEngine) training.engine.optimizer.importState(0, new Map());
    writeFileSync(join(runDir, 'tip-warmup.json'), JSON.stringify(report, null, 2) + '\n');
  }
  const rehearsal = cfg.experimental.tip_rehearsal > 0 ? await TipRehearsal.build(probe, tasks, engine.tokenizer, cfg) : null;

  const banner = bannerLines(cfg, algo, {
    runDir,
    backend,
    matMul: nativeMatMulStatus().reason,
    engine: training.description,
    vocabSize: engine.tokenizer.vocabSize,
    memory: memory ? { embedder: memory.embedder.name, reflector: memory.reflector.name, tips: memory.tips.size() } : null,
    rehearsalPool: rehearsal ? rehearsal.pool.length : null,
    tasks,
    resumeFrom: restoreFrom,
  });
  for (const line of banner) log(line);

  // A second Ctrl-C may land in the middle of a checkpoint write: its temporary folder goes too (one
  // the kernel ends, in a TensorFlow.js run, leaves it to removeStaleTemporaryFiles at the next start).
  if (handleSignals)
    holder.interrupts = new InterruptHandling(log, () => removeOwnTemporaryFiles(runDir), {
      holdsTheThread: training.engine instanceof TfjsEngine,
    });
  if (remoteRollouts) {
    await remoteRollouts.sync();
    log(
      `rollouts through ${cfg.rollout.remote!.base_url} (weights pushed after every update: ${cfg.rollout.remote!.sync === 'load_weights' ? 'yes' : 'no'})`,
    );
  }
  return {
    cfg,
    algo,
    log,
    resumeFrom: restoreFrom,
    partial: partial?.batch ?? null,
    training,
    engine,
    rolloutEngine,
    remoteRollouts,
    memory,
    rehearsal,
    state,
    rng,
    metrics,
    recorders,
    envs,
    tasks,
    trainVariations,
    baseModelDir,
    lock,
    get interrupts() {
      return holder.interrupts;
    },
  };
}

/** Whether a Ctrl-C asked the run to stop after the current iteration. */
export const stopRequested = (run: RunContext): boolean => run.interrupts?.stopRequested ?? false;

/** Saves the weights, optimiser, trainer state and memory of `run.state.iteration`; returns the checkpoint's folder. */
export function saveRunCheckpoint(run: RunContext): Promise<string> {
  const { cfg, memory } = run;
  return saveCheckpoint(
    cfg.run_dir,
    run.training.checkpointWriter,
    run.state,
    cfg.train.keep_checkpoints,
    memory ? { [MEMORY_FILE]: JSON.stringify(memory.toJSON()) } : {},
    run.baseModelDir,
  );
}

/**
 * Closes the environments (which may own processes: ScienceWorld simulators), the memory and the
 * engine, and gives up the run folder's lock. After an error, failures to close are ignored so that the error itself is what surfaces.
 */
export async function closeRun(run: RunContext, afterError = false): Promise<void> {
  const ignored = (p: Promise<void>) => (afterError ? p.catch(() => undefined) : p);
  try {
    await Promise.all(run.envs.map((env) => ignored(env.close())));
    run.memory?.dispose();
    await ignored(run.training.close());
  } finally {
    run.lock.release();
  }
}

/**
 * A resume continues the run as it was configured: options other than RESUMABLE_OPTIONS must equal
 * the run's config.yaml (the checkpoint's weights and optimiser would otherwise be silently kept
 * under a config that says something else), and the run cannot be shortened below its checkpoint.
 */
function checkResumeConfig(cfg: Config, runDir: string, checkpointIteration: number, log: (line: string) => void): void {
  if (cfg.train.iterations < checkpointIteration) {
    throw new ConfigError(
      `--resume: train.iterations is ${cfg.train.iterations}, but the run's latest checkpoint is at iteration ${checkpointIteration}; a run cannot be shortened (evaluate an earlier checkpoint instead)`,
    );
  }
  const savedPath = join(runDir, 'config.yaml');
  if (!existsSync(savedPath)) {
    log(`--resume: ${savedPath} is missing, so the options cannot be checked against the run's`);
    return;
  }
  const conflicts = resumeConflicts(loadConfig(savedPath), cfg);
  if (conflicts.length > 0) {
    throw new ConfigError(
      `--resume: these options differ from the run's (${savedPath}) and cannot change in the middle of a run:\n` +
        conflicts.map((c) => `  - ${c}`).join('\n') +
        `\nA resume may change only: ${RESUMABLE_OPTIONS.join(', ')}. Start a new run (another run_dir) to change the others.`,
    );
  }
}
