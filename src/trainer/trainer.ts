/**
 * The training loop, top to bottom: open the run (./setup.ts), evaluate before training, then each
 * iteration (runIteration) draws modes → rolls out → adds the intrinsic reward → updates → writes tips →
 * logs → evaluates now and then → checkpoints, and after the last iteration the final evaluation goes
 * into eval.md. Ctrl-C stops at the next iteration boundary after saving (an iteration saved part-way,
 * at its next part-way save); a second Ctrl-C exits at once, and the last complete checkpoint stays
 * intact either way, since checkpoints are written atomically (../run/interrupt.ts).
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { drawMode, scheduledP, usesMemory, type Mode } from '../algo/modes.ts';
import type { Config, ResolvedAlgo } from '../config/schema.ts';
import { latestCheckpoint } from '../run/checkpoint.ts';
import { recordEpisodes } from '../run/episode-log.ts';
import { EvaluationInterrupted, RolloutsInterrupted } from '../run/interrupt.ts';
import { evalRecord, formatEvalLine, formatIterationLine, tipFollowRate, trainRecord } from '../run/iteration-log.ts';
import { externalUsage, type JudgeTally } from './judge-reward.ts';
import type { ExternalUsage } from '../external/usage.ts';
import type { TrainLine } from '../run/metrics-log.ts';
import { STEP_FILE, type PartialHeader } from '../run/partial.ts';
import { FailureStreak } from '../run/failure-streak.ts';
import { EpisodeProgress, watchUpdate } from '../run/progress.ts';
import {
  isFailed,
  type Episode,
  type EvalResult,
  type RolloutJob,
  type RolloutStats,
  type TrainPhase,
  type UpdateStats,
} from '../run/records.ts';
import { closeRun, saveRunCheckpoint, saveRunPartWay, stopRequested } from '../run/run-context.ts';
import { loadTrainerState } from '../run/trainer-state.ts';
import { formatDuration } from '../util/duration.ts';
import { turnEventLoop } from '../util/event-loop.ts';
import { evaluate, formatEvalTable } from './evaluate.ts';
import { environmentPlayer, rolloutSettings, type RolloutPlayer } from './rollout.ts';
import { openTraining, type Training } from './setup.ts';
import { prepareUpdate, runOptimiserSteps, updateSettings, type OptimiserProgress, type PreparedUpdate } from './update.ts';

export interface TrainOptions {
  resume: boolean;
  log?: (line: string) => void;
  /** Install SIGINT handling (the CLI does; tests and the library do not). */
  handleSignals?: boolean;
  /**
   * Aborting it stops the run as Ctrl-C does: after the current iteration's checkpoint, or during the first or the final
   * evaluation; with a player that stops at once (a user's agents), also during an iteration's rollouts.
   */
  signal?: AbortSignal;
  /**
   * The player's episodes are processes this one starts (`empo2 train --agent`): a second Ctrl-C then exits
   * through the hooks that kill them, even where a policy call holds the thread (../run/interrupt.ts).
   */
  agentProcesses?: boolean;
  /** Told each iteration's `train` line of metrics.jsonl, once it is written. */
  onIteration?: (line: TrainLine) => void;
  /** Told after each part-way save of an iteration (../run/partial.ts): its folder and where the update stood. */
  onPartialSave?: (dir: string, progress: OptimiserProgress | null) => void;
  /** Show the rollouts' progress in place when stderr is a terminal (the CLI does). */
  progress?: boolean;
  /**
   * Who plays the episodes of training and evaluation (default: the built-in rollout over the run's
   * environments); the gateway passes its own, where a user's agent plays each episode (../gateway/).
   */
  player?: RolloutPlayer;
  /** Told as the loop enters each phase: rollout, update, evaluation, checkpoint (the gateway's /health says it). */
  onPhase?: (p: TrainPhase) => void;
}

export interface TrainResult {
  runDir: string;
  iterations: number;
  initialEval: EvalResult | null;
  /** Null when the run was stopped before any evaluation finished. */
  finalEval: EvalResult | null;
  /** Stopped by Ctrl-C: after an iteration's checkpoint, during the first or the final evaluation, or (agents) during an iteration's rollouts. */
  interrupted: boolean;
  /** Iterations of this process in which every episode failed (environment or engine failures): nothing was learned in them. */
  failedIterations: number[];
}

/**
 * One iteration's batch: its rollouts, their modes and intrinsic rewards, and the prepared update, with
 * where the update stands. An iteration that runs long is saved part-way as it is (../run/partial.ts).
 */
export interface IterationBatch extends PartialHeader {
  jobs: RolloutJob[];
  modes: Mode[];
  episodes: Episode[];
  stats: RolloutStats;
  intrinsic: number[][] | null;
  prepared: PreparedUpdate;
  /** The trainer's random stream after the iteration's draws (before the update's shuffles). */
  rngAfterDraws: number;
  /** Where the update stands; null before its first optimiser step. */
  progress: OptimiserProgress | null;
  /** Seconds the iteration has run so far, by phase (the resumed iteration's log and metrics add to them). */
  seconds: { rollout: number; optimizer: number };
  /** env.reward: judge: the groups the judge scored and left out (absent: the environment's rewards). */
  judged?: JudgeTally;
}

/** A Ctrl-C met an iteration at a part-way save, or cut its agents' rollouts short: the loop stops there, nothing else to save. */
class StoppedPartWay extends Error {}

export async function train(cfg: Config, opts: TrainOptions): Promise<TrainResult> {
  const log = opts.log ?? ((l: string) => console.log(l));
  const t = await openTraining(cfg, {
    resume: opts.resume,
    handleSignals: opts.handleSignals ?? false,
    signal: opts.signal,
    agentProcesses: opts.agentProcesses,
    log,
  });
  t.player = opts.player ?? environmentPlayer(t.run.envs);
  t.onPhase = opts.onPhase;
  const { run } = t;
  const { state, metrics } = run;
  // The "before" of the before/after table; on resume, the one logged when the run started.
  const initialEval = metrics.evalAt(0) ?? (state.iteration === 0 ? await evaluateOutsideLoop(t, 0) : null);
  if (state.iteration === 0 && !initialEval)
    return closeTraining(t, { initialEval, finalEval: null, interrupted: true, failedIterations: [] });
  if (state.iteration >= cfg.train.iterations)
    log(`the run already finished its ${state.iteration} iterations; raise train.iterations to train it longer`);

  const clock = { started: performance.now() - state.elapsedSeconds * 1000 };
  let lastEval: EvalResult | null = initialEval;
  let interrupted = false;
  const failedIterations: number[] = [];
  const streak = new FailureStreak();
  try {
    for (let it = state.iteration + 1; it <= cfg.train.iterations && !interrupted; it++) {
      const done = await runIteration(t, it, clock, opts);
      lastEval = done.evaluation ?? lastEval;
      interrupted = done.stop;
      if (done.episodes.every(isFailed)) failedIterations.push(it);
      streak.count(it, done.episodes);
    }
  } catch (e) {
    if (!(e instanceof StoppedPartWay)) {
      run.interrupts?.dispose();
      t.judge?.close();
      await closeRun(run, true);
      throw e;
    }
    log(e.message);
    interrupted = true;
  }
  const finalEval = interrupted ? lastEval : await finalEvaluation(t, initialEval);
  sayFailures(t, failedIterations, interrupted ? null : finalEval);
  return closeTraining(t, { initialEval, finalEval, interrupted: interrupted || !finalEval, failedIterations });
}

/** At the end of the run: the iterations in which every episode failed, and a final evaluation without a score. */
function sayFailures(t: Training, failedIterations: readonly number[], finalEval: EvalResult | null): void {
  if (failedIterations.length > 0)
    t.run.log(
      `every episode failed (environment or engine failures) in iteration${failedIterations.length > 1 ? 's' : ''} ${failedIterations.join(', ')}: nothing was learned there`,
    );
  if (finalEval?.invalid) t.run.log(`the final evaluation is invalid, it gives no score: ${finalEval.invalid}`);
}

/**
 * One iteration: draw modes → rollouts → intrinsic reward → update → memory → log → evaluate →
 * checkpoint. Returns the evaluation it made (if any), and whether a Ctrl-C asked the run to stop.
 */
async function runIteration(t: Training, it: number, clock: { started: number }, opts: TrainOptions) {
  const { cfg, engine, memory, state, rng, log } = t.run;
  // draw modes → rollouts → intrinsic reward (or the batch an iteration saved part-way)
  const { batch, resumed, t0, tOptimizer } = await iterationBatch(t, it, clock, opts.progress ?? false);
  const partWay = partWaySaver(t, { it, batch, resumed: resumed !== null, t0, tOptimizer }, opts.onPartialSave);
  if (!resumed) await partWay.save(null);
  // update
  enter(t, 'update', it);
  const stepsDone = batch.progress?.optimizerSteps ?? 0;
  const stopWatching = watchUpdate(engine, `iter ${it} update`, log, { stepsDone });
  const update = await runOptimiserSteps(engine, batch.prepared, {
    settings: updateSettings(cfg),
    rng,
    from: batch.progress,
    onStep: partWay.save,
    stepResume: partWay.stepResume,
  }).finally(stopWatching);
  const tUpdate = performance.now();
  const rehearsalNll = t.rehearsal ? await t.rehearsal.step(engine, it) : null;
  if (t.run.remoteRollouts) await t.run.remoteRollouts.sync(); // the server samples the next rollouts: give it the weights this update produced
  // memory
  const written = memory ? await memory.writeTips(batch.episodes) : null;
  const memorySeconds = memory ? memory.takeSeconds() : 0;
  const writing = memory ? memory.takeWriting() : null;
  const t2 = performance.now();
  state.iteration = it;
  state.envSteps += batch.stats.envSteps;
  state.rngState = rng.getState();
  state.elapsedSeconds = (t2 - clock.started) / 1000;
  // log
  recordTrainingEpisodes(t, it, batch, written?.reflections ?? null);
  const line = logIteration(t, batch, {
    update,
    rehearsalNll,
    tipsAdded: written?.added ?? 0,
    writing,
    memorySeconds,
    t0,
    tOptimizer,
    tUpdate,
    t2,
  });
  opts.onIteration?.(line);
  await turnEventLoop(); // so that Ctrl-C is seen between iterations
  // evaluate, checkpoint
  const last = it === cfg.train.iterations;
  const evaluation = cfg.train.eval_every > 0 && it % cfg.train.eval_every === 0 && !last ? await evaluateInLoop(t, it) : null;
  if (it % cfg.train.checkpoint_every === 0 || last || stopRequested(t.run)) {
    enter(t, 'checkpoint', it);
    log(`checkpoint ${await saveRunCheckpoint(t.run)}`);
  }
  return { evaluation, stop: stopRequested(t.run) && !last, episodes: batch.episodes };
}

/**
 * The final evaluation, or the one a finished run resumed (or one stopped between its final checkpoint
 * and evaluation) logged already, as a table in eval.md and the log; null when a Ctrl-C stopped it.
 */
async function finalEvaluation(t: Training, initialEval: EvalResult | null): Promise<EvalResult | null> {
  const { cfg, state, metrics } = t.run;
  const finalEval = metrics.evalAt(state.iteration) ?? (await evaluateOutsideLoop(t, state.iteration));
  if (finalEval) {
    const table = formatEvalTable(finalEval, initialEval);
    writeFileSync(join(cfg.run_dir, 'eval.md'), table + '\n');
    t.run.log('\n' + table);
  }
  return finalEval;
}

/** Ends the run (its Ctrl-C handling, environments, memory, engine and lock) and says how far it got. */
async function closeTraining(
  t: Training,
  r: Pick<TrainResult, 'initialEval' | 'finalEval' | 'interrupted' | 'failedIterations'>,
): Promise<TrainResult> {
  const { run } = t;
  run.interrupts?.dispose();
  t.judge?.close();
  await closeRun(run);
  return { runDir: run.cfg.run_dir, iterations: run.state.iteration, ...r };
}

/**
 * An evaluation between iterations. A player that stops at once (a user's agents) ends it on a Ctrl-C:
 * null then, nothing of it kept, and the iteration's checkpoint is saved as after any Ctrl-C.
 */
async function evaluateInLoop(t: Training, iteration: number): Promise<EvalResult | null> {
  try {
    return await evaluateAndLog(t, iteration);
  } catch (e) {
    if (!(e instanceof EvaluationInterrupted)) throw e;
    t.run.log(`stopped the evaluation at iteration ${iteration}; nothing of it was kept`);
    return null;
  }
}

/**
 * The first or the final evaluation. Before the first iteration and after the last, a Ctrl-C stops the
 * evaluation itself (../run/interrupt.ts): null then, nothing of it kept.
 */
async function evaluateOutsideLoop(t: Training, iteration: number): Promise<EvalResult | null> {
  const { run } = t;
  const interrupts = run.interrupts;
  try {
    if (!interrupts) return await evaluateAndLog(t, iteration);
    run.log(
      iteration === 0
        ? 'evaluating before training (Ctrl-C stops the run here, with nothing saved)'
        : `final evaluation at iteration ${iteration} (Ctrl-C stops it; the checkpoint is saved and --resume makes it again)`,
    );
    return await interrupts.evaluation(() => evaluateAndLog(t, iteration));
  } catch (e) {
    if (!(e instanceof EvaluationInterrupted)) {
      run.interrupts?.dispose();
      await closeRun(run, true);
      throw e;
    }
    run.log(`stopped the evaluation at iteration ${iteration}; nothing of it was kept`);
    return null;
  }
}

/**
 * The iteration's rollouts, intrinsic rewards and prepared update: made now, or taken from the part-way
 * save this run resumes inside (../run/partial.ts), whose clock then starts as far in as its saved phases
 * had run (moving the run's start back by as much). t0: the iteration's start; tOptimizer: the update's.
 */
async function iterationBatch(t: Training, it: number, clock: { started: number }, showProgress: boolean) {
  const { cfg, engine, memory, rng } = t.run;
  // Written by savePartial from this iteration's IterationBatch.
  const resumed = t.run.partial?.iteration === it ? (t.run.partial as IterationBatch) : null;
  t.run.partial = null;
  if (resumed) {
    const saved = (resumed.seconds.rollout + resumed.seconds.optimizer) * 1000;
    clock.started -= saved;
    rng.setState(resumed.rngAfterDraws);
    const now = performance.now();
    return { batch: resumed, resumed, t0: now - saved, tOptimizer: now - resumed.seconds.optimizer * 1000 };
  }
  const t0 = performance.now();
  const { jobs, modes } = drawModes(t, it);
  const { episodes, stats } = await rollOut(t, it, { jobs, modes }, showProgress);
  logFailures(t, it, episodes);
  enter(t, 'update', it);
  const rolloutSeconds = (performance.now() - t0) / 1000;
  if (rolloutSeconds > 60)
    t.run.log(`iter ${it}: ${episodes.length} episodes, ${stats.envSteps} steps rolled out in ${formatDuration(rolloutSeconds)}; updating`);
  const judged = t.judge ? await t.judge.apply(episodes, t.run.log, it) : undefined;
  const intrinsic = memory ? await memory.intrinsicRewards(episodes) : null;
  const lost = episodes.filter((e) => e.engineError);
  if (lost.length)
    t.run.log(
      `iter ${it}: ${lost.length} of ${episodes.length} episodes cut short by the rollout engine (${lost[0].engineError}), left out of the update`,
    );
  const tOptimizer = performance.now();
  const prepared = await prepareUpdate(
    engine,
    episodes.map((e, i) => ({ ...e, mode: modes[i], intrinsic: intrinsic?.[i] })),
    updateSettings(cfg),
  );
  const batch: IterationBatch = {
    format: 'empo2-partial-iteration',
    version: 1,
    iteration: it,
    jobs,
    modes,
    episodes,
    stats,
    intrinsic,
    prepared,
    rngAfterDraws: rng.getState(),
    progress: null,
    seconds: { rollout: rolloutSeconds, optimizer: 0 },
    judged,
  };
  return { batch, resumed: null, t0, tOptimizer };
}

/**
 * An iteration that has run train.partial_save_minutes saves part-way after its rollouts and after each
 * optimiser step; after a Ctrl-C it stops there (unless only the cheap rest is left), since finishing it
 * could take hours. An optimiser step that runs for hours (the PyTorch worker on CPU) is saved inside it
 * between micro-batches, as often (stepResume), so a kill loses at most that.
 */
function partWaySaver(
  t: Training,
  at: { it: number; batch: IterationBatch; resumed: boolean; t0: number; tOptimizer: number },
  onPartialSave: TrainOptions['onPartialSave'],
) {
  const { run } = t;
  const { it, batch } = at;
  const minutes = run.cfg.train.partial_save_minutes;
  // The part-way save this iteration goes on from, if any.
  let partialDir = at.resumed ? run.resumeFrom : null;
  const stepResume = () => (partialDir ? { file: join(partialDir, STEP_FILE), everySeconds: minutes * 60 } : undefined);
  const save = async (progress: OptimiserProgress | null) => {
    if (performance.now() - at.t0 < minutes * 60_000) return;
    batch.progress = progress;
    batch.seconds.optimizer = (performance.now() - at.tOptimizer) / 1000;
    const dir = await saveRunPartWay(run, batch);
    partialDir = dir;
    const where = progress ? `${progress.optimizerSteps} of ${progress.optimizerStepsTotal} optimiser steps done` : 'rollouts done';
    if (minutes > 0) run.log(`iter ${it}: saved part-way in ${dir} (${where})`);
    onPartialSave?.(dir, progress);
    if (stopRequested(run) && (!progress || progress.optimizerSteps < progress.optimizerStepsTotal))
      throw new StoppedPartWay(`iter ${it}: stopped part-way (${where}); --resume goes on from ${dir}`);
  };
  return { save, stepResume };
}

/** The iteration's line in metrics.jsonl and in the log. */
function logIteration(
  t: Training,
  batch: IterationBatch,
  r: {
    update: UpdateStats;
    rehearsalNll: number | null;
    tipsAdded: number;
    writing: { skipped: number; external: ExternalUsage | null } | null;
    memorySeconds: number;
    t0: number;
    tOptimizer: number;
    tUpdate: number;
    t2: number;
  },
): TrainLine {
  const { cfg, memory, state } = t.run;
  const t1 = r.t0 + batch.seconds.rollout * 1000;
  const report = {
    iteration: batch.iteration,
    iterations: cfg.train.iterations,
    envSteps: state.envSteps,
    elapsedSeconds: state.elapsedSeconds,
    episodes: batch.episodes,
    modes: batch.modes,
    rollout: batch.stats,
    prefillCounts: Boolean(t.run.rolloutEngine.prefillCounts),
    update: r.update,
    intrinsic: batch.intrinsic,
    rehearsalNll: r.rehearsalNll,
    tipsAdded: r.tipsAdded,
    tipsSkipped: r.writing?.skipped ?? 0,
    external: externalUsage(r.writing?.external ?? null, t.judge),
    judged: batch.judged ?? null,
    memorySize: memory ? memory.tips.size() : 0,
    memorySeconds: r.memorySeconds,
    seconds: {
      rollout: (t1 - r.t0) / 1000,
      update: (r.t2 - t1) / 1000,
      optimizer: (r.tUpdate - r.tOptimizer) / 1000,
      iteration: (r.t2 - r.t0) / 1000,
    },
  };
  const line = trainRecord(report);
  t.run.metrics.append(line);
  const draw = { drawsModes: t.algo.drawsModes, groupSize: cfg.rollout.group_size, perRollout: drawnPer(t.algo, 'rollout') };
  t.run.log(formatIterationLine(report, draw));
  return line;
}

/** Whether modes are drawn, and drawn once per `scope` (iteration, task group or rollout). */
const drawnPer = (algo: ResolvedAlgo, scope: ResolvedAlgo['modeDraw']) => algo.drawsModes && algo.modeDraw === scope;

/**
 * The iteration's batch, from the run's random stream: tasks_per_batch (task, variation) groups of
 * group_size rollouts, and the mode of every rollout (drawn per iteration, task group or rollout).
 */
function drawModes(t: Training, it: number): { jobs: RolloutJob[]; modes: Mode[] } {
  const { algo } = t;
  const { cfg, rng } = t.run;
  const jobs: RolloutJob[] = [];
  const modes: Mode[] = [];
  const schedule = { p: scheduledP(algo.p, algo.pEnd, it, cfg.train.iterations), q: algo.q };
  const iterationMode: Mode = drawnPer(algo, 'iteration') ? drawMode(schedule, rng.next(), rng.next()) : 'plain';
  for (let g = 0; g < cfg.rollout.tasks_per_batch; g++) {
    const task = rng.pick(t.tasks);
    const variation = rng.pick(t.trainVariations.get(task)!);
    const groupMode = drawnPer(algo, 'task') ? drawMode(schedule, rng.next(), rng.next()) : iterationMode;
    for (let k = 0; k < cfg.rollout.group_size; k++) {
      jobs.push({ task, variation, group: g });
      // Per rollout, the group's advantage weighs tip-guided rollouts against plain ones of the same task.
      modes.push(drawnPer(algo, 'rollout') ? drawMode(schedule, rng.next(), rng.next()) : groupMode);
    }
  }
  return { jobs, modes };
}

/** The batch's episodes, memory rollouts shown tips; chunks after the first (env.max_instances < batch) get seeds of their own. */
async function rollOut(t: Training, it: number, drawn: { jobs: RolloutJob[]; modes: readonly Mode[] }, showProgress: boolean) {
  const { cfg, memory } = t.run;
  const { jobs, modes } = drawn;
  const withTips = memory && modes.some(usesMemory) ? { tips: memory.tipSource(), uses: (i: number) => usesMemory(modes[i]) } : undefined;
  // A real model takes minutes per iteration: on a terminal its rollouts show progress in place, in a log
  // a status line every 2 minutes (none for a fast model, whose iteration line comes first).
  const progress = showProgress
    ? new EpisodeProgress(jobs, { label: `iter ${it} rollouts`, logIntervalMs: 120_000, taskLines: false })
    : undefined;
  const player = t.player!;
  enter(t, 'rollout', it);
  const play = () =>
    player(t.run.rolloutEngine, jobs, {
      settingsFor: (start) => rolloutSettings(cfg, false, cfg.seed * 1_000_003 + it + 7_919 * start),
      memory: withTips,
      progress,
      evaluation: false,
      signal: t.run.interrupts?.stopping,
    });
  const interrupts = t.run.interrupts;
  try {
    return await (player.stopsAtOnce && interrupts ? interrupts.rollouts(play) : play());
  } catch (e) {
    if (!(e instanceof RolloutsInterrupted)) throw e;
    await saveIterationBefore(t, it);
    throw new StoppedPartWay(
      `iter ${it}: stopped during its rollouts; nothing of this iteration was kept${it > 1 ? `, --resume plays it again from the checkpoint of iteration ${it - 1}` : ''}`,
    );
  } finally {
    progress?.finish();
  }
}

/**
 * Rollouts cut short leave the run as iteration `it` - 1 left it (the weights, memory and state change
 * only after the rollouts): saved where train.checkpoint_every skipped it, so that no iteration is lost.
 */
async function saveIterationBefore(t: Training, it: number): Promise<void> {
  const latest = latestCheckpoint(t.run.cfg.run_dir);
  if (it > 1 && (latest === null || loadTrainerState(latest).iteration < it - 1)) t.run.log(`checkpoint ${await saveRunCheckpoint(t.run)}`);
}

/**
 * Each failed episode with its reason (a user's agent threw, hung, or went over a budget: ../gateway/;
 * an environment failed). They stay in the batch: prepareUpdate leaves them out, the scores count them apart.
 */
function logFailures(t: Training, it: number, episodes: readonly Episode[]): void {
  episodes.forEach((e, i) => {
    if (isFailed(e))
      t.run.log(
        `iter ${it}: episode ${e.episodeId ?? i} (task ${e.task} #${e.variation}) failed and is left out of the update: ${e.failure}`,
      );
  });
}

/** A spread sample of the iteration's episodes into trajectories/train.jsonl. */
function recordTrainingEpisodes(t: Training, it: number, batch: IterationBatch, reflections: readonly (string | null)[] | null): void {
  const { cfg, memory, state } = t.run;
  recordEpisodes(
    t.run.recorders.train,
    batch.episodes,
    { source: 'train', iteration: it, envSteps: state.envSteps },
    { count: cfg.trajectories.train_per_iteration, mode: batch.modes, slots: memory?.algo.memory ? memory : null, reflections },
  );
}

/** Evaluates on the held-out split (with tips where train.eval_with_memory), records and logs it. */
async function evaluateAndLog(t: Training, iteration: number): Promise<EvalResult> {
  const { cfg, state } = t.run;
  enter(t, 'evaluation', iteration);
  const shown = cfg.train.eval_with_memory && t.run.memory ? t.run.memory : undefined;
  let followed: number | null = null;
  const played = (episodes: readonly Episode[]) => {
    followed = tipFollowRate(episodes);
    recordEpisodes(
      t.run.recorders.eval,
      episodes,
      { source: 'eval', iteration, envSteps: state.envSteps },
      { count: cfg.trajectories.eval_per_evaluation, mode: shown ? 'tips' : 'plain', slots: shown?.algo.memory ? shown : null },
    );
  };
  const r = await evaluate(t.run.engine, t.run.envs, cfg, {
    tasks: t.tasks,
    iteration,
    memory: shown,
    progressLabel: `eval @ iter ${iteration}`,
    played,
    player: t.player,
    signal: t.run.interrupts?.stopping,
  });
  const settings = {
    eval_split: cfg.env.eval_split,
    eval_variations: cfg.env.eval_variations,
    eval_temperature: cfg.rollout.eval_temperature,
    eval_with_memory: shown !== undefined,
  };
  t.run.metrics.append(evalRecord(r, { iteration, trainEnvSteps: state.envSteps, settings, tipsFollowed: shown ? followed : undefined }));
  t.run.log(formatEvalLine(r, iteration, cfg.env.eval_split));
  return r;
}

/** Tells the caller the loop enters `phase` of `iteration`, with the policy version that samples now. */
function enter(t: Training, phase: TrainPhase['phase'], iteration: number): void {
  t.onPhase?.({ phase, iteration, policyVersion: t.run.state.iteration });
}
