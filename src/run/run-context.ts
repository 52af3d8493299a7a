/**
 * A training run from its start to its end: how it is opened (the run folder's lock, the resume
 * checks, the engines, the memory the trainer keeps, the metrics and episode files, the environments),
 * started (Ctrl-C handling, the rollout server's first weights), checkpointed and closed. The trainer
 * (../trainer/setup.ts) opens one, adds its own parts where they belong, and runs its loop over it.
 */
import { existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { stringify as toYaml } from 'yaml';
import { ConfigError, loadConfig } from '../config/load.ts';
import { RESUMABLE_OPTIONS, resumeConflicts, type Config } from '../config/schema.ts';
import { environmentCorpus } from '../envs/index.ts';
import type { Env } from '../envs/types.ts';
import { createRemoteRollouts, createTrainingEngine, initBackend, resolveModelPath, type TrainingEngine } from '../policy/index.ts';
import type { PolicyEngine } from '../policy/types.ts';
import { writeTextAtomic } from '../util/atomic-write.ts';
import { Rng } from '../util/rng.ts';
import {
  latestCheckpoint,
  loadTrainerState,
  MEMORY_FILE,
  removeOwnTemporaryFiles,
  removeStaleTemporaryFiles,
  saveCheckpoint,
  type TrainerState,
} from './checkpoint.ts';
import { openEnvPool } from './env-pool.ts';
import { openRunRecorders, type RunRecorders } from './episode-log.ts';
import { InterruptHandling, policyCalls } from './interrupt.ts';
import { MetricsLog } from './metrics-log.ts';
import { partialToResume, savePartial, type PartialHeader } from './partial.ts';
import { checkRunFolder } from './run-folder.ts';
import { RunLock } from './run-lock.ts';

/** What the run does with the trainer's memory: saves it with every checkpoint, and closes it with the run. */
export interface RunMemory {
  toJSON(): object;
  dispose(): void;
}

/** What the trainer adds to a run as it opens, at the points where the opening needs it. */
export interface RunParts<M extends RunMemory> {
  /**
   * The memory the run keeps (null: none), restored from `restoreFrom` (null: a fresh run); opened
   * after the engines and before any file of the run is written.
   */
  memory(engine: PolicyEngine, restoreFrom: string | null): Promise<M | null>;
  /** How many environments the run plays at once, asked of the first before the others open (it may refuse it by throwing). */
  environments(first: Env, memory: M | null): number;
}

export interface RunContext<M extends RunMemory = RunMemory> {
  cfg: Config;
  log: (line: string) => void;
  /** The TensorFlow.js backend this process runs. */
  backend: string;
  /** The checkpoint the run continues from (null: a fresh run): a checkpoint, or an iteration saved part-way. */
  resumeFrom: string | null;
  /** The batch of the iteration saved part-way that the run goes on inside (./partial.ts); the trainer takes it once. */
  partial: PartialHeader | null;
  training: TrainingEngine;
  /** The training engine; every call lets the event loop turn, so Ctrl-C is seen within one call (./interrupt.ts). */
  engine: PolicyEngine;
  /** What samples the training rollouts: the training engine, or a server (rollout.remote). */
  rolloutEngine: PolicyEngine;
  remoteRollouts: { engine: PolicyEngine; sync: () => Promise<void>; description: string } | null;
  memory: M | null;
  /** Iteration, env steps, random state and elapsed time: what a checkpoint saves beside the weights. */
  state: TrainerState;
  /** The run's random stream: batches, modes and minibatch order (its state is saved in `state`). */
  rng: Rng;
  metrics: MetricsLog;
  recorders: RunRecorders;
  envs: Env[];
  /** The model directory a checkpoint of a LoRA run refers to (null: the default tiny model). */
  baseModelDir: string | null;
  /** Set by startRun where the run handles Ctrl-C. */
  interrupts: InterruptHandling | null;
  /** This process's hold on cfg.run_dir (./run-lock.ts), released by closeRun. */
  lock: RunLock;
}

/**
 * Opens a run in cfg.run_dir, fresh or (`resume`) from its latest checkpoint or part-way save, with the
 * trainer's `parts`. A folder that holds something else than a run is refused first (./run-folder.ts);
 * the run folder stays locked until closeRun, or until this fails.
 */
export async function openRun<M extends RunMemory>(
  cfg: Config,
  o: { resume: boolean; log: (line: string) => void },
  parts: RunParts<M>,
): Promise<RunContext<M>> {
  checkRunFolder(cfg.run_dir);
  const backend = await initBackend();
  mkdirSync(cfg.run_dir, { recursive: true });
  const lock = RunLock.acquire(cfg.run_dir, o.log);
  try {
    return await openLockedRun(cfg, { ...o, backend, lock }, parts);
  } catch (e) {
    lock.release();
    throw e;
  }
}

async function openLockedRun<M extends RunMemory>(
  requested: Config,
  o: { resume: boolean; log: (line: string) => void; backend: string; lock: RunLock },
  parts: RunParts<M>,
): Promise<RunContext<M>> {
  const { log } = o;
  const runDir = requested.run_dir;
  const { restoreFrom, partial, saved } = resumePoint(requested, o.resume, log);
  // The activation budget decides the micro-batches and so the float sums: a resume keeps the run's.
  let cfg = withActivationBudget(requested, saved?.model.torch.activation_mb ?? null);
  const training = await createTrainingEngine(cfg, restoreFrom ?? 'fresh', () => environmentCorpus(cfg.env));
  // What a CPU worker took from the memory free at its start goes into config.yaml, for the resume.
  cfg = withActivationBudget(cfg, training.activationMb);
  const baseModelDir = cfg.model.path ? await resolveModelPath(cfg.model.path) : null;
  const holder: { interrupts: InterruptHandling | null } = { interrupts: null };
  const engine = policyCalls(training.engine, () => holder.interrupts);
  const remoteRollouts = cfg.rollout.remote ? await createRemoteRollouts(cfg, engine, log) : null;
  const rolloutEngine: PolicyEngine = remoteRollouts ? policyCalls(remoteRollouts.engine, () => holder.interrupts) : engine;
  const memory = await parts.memory(engine, restoreFrom);
  const state: TrainerState = restoreFrom
    ? loadTrainerState(restoreFrom)
    : { iteration: 0, envSteps: 0, rngState: new Rng(cfg.seed).getState(), elapsedSeconds: 0 };
  const rng = new Rng(0);
  rng.setState(state.rngState);
  // On resume, the settings a resume may change (checkResumeConfig) are the run's from now on.
  writeTextAtomic(join(runDir, 'config.yaml'), toYaml(cfg));
  const metricsPath = join(runDir, 'metrics.jsonl');
  const metrics = restoreFrom ? MetricsLog.resume(metricsPath, state.iteration, log) : MetricsLog.fresh(metricsPath, log);
  const recorders = openRunRecorders(cfg, restoreFrom ? state.iteration : null, log);
  const envs = await openEnvPool(cfg, (first) => parts.environments(first, memory));
  return {
    cfg,
    log,
    backend: o.backend,
    resumeFrom: restoreFrom,
    partial,
    training,
    engine,
    rolloutEngine,
    remoteRollouts,
    memory,
    state,
    rng,
    metrics,
    recorders,
    envs,
    baseModelDir,
    lock: o.lock,
    get interrupts() {
      return holder.interrupts;
    },
    set interrupts(handling) {
      holder.interrupts = handling;
    },
  };
}

/** `cfg` with model.torch.activation_mb set to `mb` where it is null (unchanged where it is set or `mb` is null). */
function withActivationBudget(cfg: Config, mb: number | null): Config {
  if (cfg.model.torch.activation_mb !== null || mb === null) return cfg;
  return { ...cfg, model: { ...cfg.model, torch: { ...cfg.model.torch, activation_mb: mb } } };
}

/**
 * Where the run goes on from: nothing (a fresh run), its latest checkpoint, or an iteration saved
 * part-way after it; a fresh run is refused where a run already is, and a resume is checked against
 * the run's config.
 */
function resumePoint(cfg: Config, resume: boolean, log: (line: string) => void) {
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
  const saved = restoreFrom ? checkResumeConfig(cfg, runDir, loadTrainerState(restoreFrom).iteration, log) : null;
  if (partial) {
    const p = partial.batch.progress;
    log(
      `resuming inside iteration ${partial.batch.iteration} from ${partial.dir}: rollouts done${p ? `, ${p.optimizerSteps} optimiser step${p.optimizerSteps === 1 ? '' : 's'} done` : ''}`,
    );
  }
  return { restoreFrom, partial: partial?.batch ?? null, saved };
}

/**
 * Starts an opened run: Ctrl-C handling (`handleSignals`: the CLI's; tests leave it out), or stopping
 * on `signal` (a program's, through the library), and, with rollouts through a server, the server's first weights.
 * `agentProcesses`: the episodes are played by processes this one starts (`empo2 train --agent`).
 */
export async function startRun(
  run: RunContext,
  o: { handleSignals: boolean; signal?: AbortSignal; agentProcesses?: boolean },
): Promise<void> {
  const { cfg, log } = run;
  // A second Ctrl-C may land in the middle of a checkpoint write: its temporary folder goes too (one
  // the kernel ends, in a TensorFlow.js run, leaves it to removeStaleTemporaryFiles at the next start).
  // Agent processes must not outlive the run: their runs never leave it to the kernel (./interrupt.ts).
  if (o.handleSignals || o.signal)
    run.interrupts = new InterruptHandling(log, () => removeOwnTemporaryFiles(cfg.run_dir), {
      holdsTheThread: run.training.holdsTheThread && !o.agentProcesses,
      sigint: o.handleSignals,
      signal: o.signal,
    });
  if (run.remoteRollouts) {
    await run.remoteRollouts.sync();
    log(run.remoteRollouts.description);
  }
}

/** Whether a Ctrl-C asked the run to stop after the current iteration. */
export const stopRequested = (run: RunContext): boolean => run.interrupts?.stopRequested ?? false;

/** The memory's file in a checkpoint, where the run keeps one. */
const memoryFiles = (run: RunContext): Record<string, string> => (run.memory ? { [MEMORY_FILE]: JSON.stringify(run.memory.toJSON()) } : {});

/** Saves the weights, optimiser, trainer state and memory of `run.state.iteration`; returns the checkpoint's folder. */
export function saveRunCheckpoint(run: RunContext): Promise<string> {
  const { cfg } = run;
  const contents = { writer: run.training, state: run.state, extraFiles: memoryFiles(run), baseModelDir: run.baseModelDir };
  return saveCheckpoint(cfg.run_dir, contents, cfg.train.keep_checkpoints);
}

/** Saves iteration `batch.iteration` part-way over the state and memory before it (./partial.ts); returns the folder. */
export function saveRunPartWay(run: RunContext, batch: PartialHeader): Promise<string> {
  const contents = { writer: run.training, state: run.state, extraFiles: memoryFiles(run), baseModelDir: run.baseModelDir };
  return savePartial(run.cfg.run_dir, contents, batch);
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
 * A resume continues the run as it was configured: options other than RESUMABLE_OPTIONS must equal the
 * run's config.yaml (the checkpoint's weights and optimiser would otherwise be silently kept under a
 * config that says something else), and the run cannot be shortened below its checkpoint. Returns that
 * config.yaml (null where it is missing).
 */
function checkResumeConfig(cfg: Config, runDir: string, checkpointIteration: number, log: (line: string) => void): Config | null {
  if (cfg.train.iterations < checkpointIteration) {
    throw new ConfigError(
      `--resume: train.iterations is ${cfg.train.iterations}, but the run's latest checkpoint is at iteration ${checkpointIteration}; a run cannot be shortened (evaluate an earlier checkpoint instead)`,
    );
  }
  const savedPath = join(runDir, 'config.yaml');
  if (!existsSync(savedPath)) {
    log(`--resume: ${savedPath} is missing, so the options cannot be checked against the run's`);
    return null;
  }
  const saved = loadConfig(savedPath);
  const conflicts = resumeConflicts(saved, cfg);
  if (conflicts.length > 0) {
    throw new ConfigError(
      `--resume: these options differ from the run's (${savedPath}) and cannot change in the middle of a run:\n` +
        conflicts.map((c) => `  - ${c}`).join('\n') +
        `\nA resume may change only: ${RESUMABLE_OPTIONS.join(', ')}. Start a new run (another run_dir) to change the others.`,
    );
  }
  return saved;
}
