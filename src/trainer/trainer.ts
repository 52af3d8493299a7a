/**
 * The training loop: sample (task, variation) groups, roll out N episodes each, take a GRPO
 * update, log a JSON line, evaluate on held-out variations now and then, checkpoint. Ctrl-C stops
 * at the next iteration boundary after saving; a second Ctrl-C exits at once (the last complete
 * checkpoint stays intact either way, since checkpoints are written atomically; ./interrupt.ts).
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Config, ResolvedAlgo } from '../config/schema.ts';
import { turnEventLoop } from '../util/event-loop.ts';
import { formatDuration } from '../util/duration.ts';
import { drawMode, scheduledP, usesMemory, type Mode } from '../algo/modes.ts';
import { evaluate, formatEvalTable, type EvalResult } from './evaluate.ts';
import { prepareUpdate, runOptimiserSteps, updateSettings, type OptimiserProgress } from './grpo.ts';
import { savePartial, STEP_FILE, type PartialBatch } from './partial.ts';
import { evalRecord, formatEvalLine, formatIterationLine, trainRecord } from './iteration-log.ts';
import { EpisodeProgress, watchUpdate } from './progress.ts';
import { rolloutSettings, runEpisodesInChunks, type Episode, type RolloutJob } from './rollout.ts';
import { EvaluationInterrupted } from './interrupt.ts';
import { closeRun, openRun, saveRunCheckpoint, stopRequested, type RunContext } from './run-context.ts';
import { recordEpisodes, spreadSample, tipFollowRate } from './trajectories.ts';

/** A Ctrl-C met an iteration at a part-way save: the loop stops there, nothing else to save. */
class StoppedPartWay extends Error {}

export interface TrainOptions {
  resume: boolean;
  log?: (line: string) => void;
  /** Install SIGINT handling (the CLI does; tests do not). */
  handleSignals?: boolean;
  /** Told after each part-way save of an iteration (./partial.ts): its folder and where the update stood. */
  onPartialSave?: (dir: string, progress: OptimiserProgress | null) => void;
  /** Show the rollouts' progress in place when stderr is a terminal (the CLI does). */
  progress?: boolean;
}

export interface TrainResult {
  runDir: string;
  iterations: number;
  initialEval: EvalResult | null;
  /** Null when the run was stopped before any evaluation finished. */
  finalEval: EvalResult | null;
  /** Stopped by Ctrl-C: after an iteration's checkpoint, or during the first or the final evaluation. */
  interrupted: boolean;
}

export async function train(cfg: Config, opts: TrainOptions): Promise<TrainResult> {
  const log = opts.log ?? ((l: string) => console.log(l));
  const run = await openRun(cfg, opts.resume, opts.handleSignals ?? false, log);
  const { engine, memory, rehearsal, remoteRollouts, state, rng, metrics } = run;
  // The "before" of the before/after table; on resume, the one logged when the run started.
  const initialEval = metrics.evalAt(0) ?? (state.iteration === 0 ? await evaluateOutsideLoop(run, 0) : null);
  if (state.iteration === 0 && !initialEval) {
    run.interrupts?.dispose();
    await closeRun(run);
    return { runDir: cfg.run_dir, iterations: 0, initialEval, finalEval: null, interrupted: true };
  }
  if (state.iteration >= cfg.train.iterations)
    log(`the run already finished its ${state.iteration} iterations; raise train.iterations to train it longer`);

  const clock = { started: performance.now() - state.elapsedSeconds * 1000 };
  let lastEval: EvalResult | null = initialEval;
  let interrupted = false;
  try {
    for (let it = state.iteration + 1; it <= cfg.train.iterations; it++) {
      // draw modes → rollouts → intrinsic reward (or the batch an iteration saved part-way)
      const { batch, resumed, t0, tOptimizer } = await iterationBatch(run, it, clock, opts);
      const partWay = partWaySaver(run, it, batch, resumed, t0, tOptimizer, opts);
      if (!resumed) await partWay.save(null);
      // update
      const stopWatching = watchUpdate(engine, `iter ${it} update`, log, undefined, undefined, batch.progress?.optimizerSteps ?? 0);
      const update = await runOptimiserSteps(
        engine,
        batch.prepared,
        updateSettings(cfg),
        rng,
        batch.progress,
        partWay.save,
        partWay.stepResume,
      ).finally(stopWatching);
      const tUpdate = performance.now();
      const rehearsalNll = rehearsal ? await rehearsal.step(engine, it) : null;
      if (remoteRollouts) await remoteRollouts.sync(); // the server samples the next rollouts: give it the weights this update produced
      // memory
      const written = memory ? await memory.writeTips(batch.episodes) : null;
      const memorySeconds = memory ? memory.takeSeconds() : 0;
      const t2 = performance.now();
      state.iteration = it;
      state.envSteps += batch.stats.envSteps;
      state.rngState = rng.getState();
      state.elapsedSeconds = (t2 - clock.started) / 1000;
      // log
      recordTrainingEpisodes(run, it, batch.episodes, batch.modes, written?.reflections ?? null);
      logIteration(run, it, batch, { update, rehearsalNll, tipsAdded: written?.added ?? 0, memorySeconds, t0, tOptimizer, tUpdate, t2 });
      await turnEventLoop(); // so that Ctrl-C is seen between iterations
      // evaluate, checkpoint
      const last = it === cfg.train.iterations;
      if (cfg.train.eval_every > 0 && it % cfg.train.eval_every === 0 && !last) lastEval = await evaluateAndLog(run, it);
      if (it % cfg.train.checkpoint_every === 0 || last || stopRequested(run)) log(`checkpoint ${await saveRunCheckpoint(run)}`);
      if (stopRequested(run) && !last) {
        interrupted = true;
        break;
      }
    }
  } catch (e) {
    if (e instanceof StoppedPartWay) {
      log(e.message);
      interrupted = true;
    } else {
      run.interrupts?.dispose();
      await closeRun(run, true);
      throw e;
    }
  }
  let finalEval = lastEval;
  if (!interrupted) {
    // A finished run that is resumed (or one stopped between its final checkpoint and evaluation) keeps its logged evaluation.
    finalEval = metrics.evalAt(state.iteration) ?? (await evaluateOutsideLoop(run, state.iteration));
    if (finalEval) {
      const table = formatEvalTable(finalEval, initialEval);
      writeFileSync(join(cfg.run_dir, 'eval.md'), table + '\n');
      log('\n' + table);
    } else interrupted = true;
  }
  run.interrupts?.dispose();
  await closeRun(run);
  return { runDir: cfg.run_dir, iterations: state.iteration, initialEval, finalEval, interrupted };
}

/**
 * The first or the final evaluation. Before the first iteration and after the last, a Ctrl-C stops the
 * evaluation itself (./interrupt.ts): null then, nothing of it kept.
 */
async function evaluateOutsideLoop(run: RunContext, iteration: number): Promise<EvalResult | null> {
  const interrupts = run.interrupts;
  try {
    if (!interrupts) return await evaluateAndLog(run, iteration);
    run.log(
      iteration === 0
        ? 'evaluating before training (Ctrl-C stops the run here, with nothing saved)'
        : `final evaluation at iteration ${iteration} (Ctrl-C stops it; the checkpoint is saved and --resume makes it again)`,
    );
    return await interrupts.evaluation(() => evaluateAndLog(run, iteration));
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
 * save this run resumes inside (./partial.ts), whose clock then starts as far in as its saved phases
 * had run (moving the run's start back by as much). t0: the iteration's start; tOptimizer: the update's.
 */
async function iterationBatch(run: RunContext, it: number, clock: { started: number }, opts: TrainOptions) {
  const { cfg, engine, memory, rng } = run;
  const resumed = run.partial?.iteration === it ? run.partial : null;
  run.partial = null;
  if (resumed) {
    const saved = (resumed.seconds.rollout + resumed.seconds.optimizer) * 1000;
    clock.started -= saved;
    rng.setState(resumed.rngAfterDraws);
    const now = performance.now();
    return { batch: resumed, resumed, t0: now - saved, tOptimizer: now - resumed.seconds.optimizer * 1000 };
  }
  const t0 = performance.now();
  const { jobs, modes } = drawModes(run, it);
  const { episodes, stats } = await rollOut(run, it, jobs, modes, opts.progress ?? false);
  const rolloutSeconds = (performance.now() - t0) / 1000;
  if (rolloutSeconds > 60)
    run.log(`iter ${it}: ${episodes.length} episodes, ${stats.envSteps} steps rolled out in ${formatDuration(rolloutSeconds)}; updating`);
  const intrinsic = memory ? await memory.intrinsicRewards(episodes) : null;
  const tOptimizer = performance.now();
  const prepared = await prepareUpdate(
    engine,
    episodes.map((e, i) => ({ ...e, mode: modes[i], intrinsic: intrinsic?.[i] })),
    updateSettings(cfg),
  );
  const batch: PartialBatch = {
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
  run: RunContext,
  it: number,
  batch: PartialBatch,
  resumed: PartialBatch | null,
  t0: number,
  tOptimizer: number,
  opts: TrainOptions,
) {
  const { cfg, memory, state } = run;
  const minutes = cfg.train.partial_save_minutes;
  // The part-way save this iteration goes on from, if any.
  let partialDir = resumed ? run.resumeFrom : null;
  const stepResume = () => (partialDir ? { file: join(partialDir, STEP_FILE), everySeconds: minutes * 60 } : undefined);
  const save = async (progress: OptimiserProgress | null) => {
    if (performance.now() - t0 < minutes * 60_000) return;
    batch.progress = progress;
    batch.seconds.optimizer = (performance.now() - tOptimizer) / 1000;
    const dir = await savePartial(
      cfg.run_dir,
      run.training.checkpointWriter,
      state,
      batch,
      memory ? JSON.stringify(memory.toJSON()) : null,
      run.baseModelDir,
    );
    partialDir = dir;
    const where = progress ? `${progress.optimizerSteps} of ${progress.optimizerStepsTotal} optimiser steps done` : 'rollouts done';
    if (minutes > 0) run.log(`iter ${it}: saved part-way in ${dir} (${where})`);
    opts.onPartialSave?.(dir, progress);
    if (stopRequested(run) && (!progress || progress.optimizerSteps < progress.optimizerStepsTotal))
      throw new StoppedPartWay(`iter ${it}: stopped part-way (${where}); --resume goes on from ${dir}`);
  };
  return { save, stepResume };
}

/** The iteration's line in metrics.jsonl and in the log. */
function logIteration(
  run: RunContext,
  it: number,
  batch: PartialBatch,
  r: {
    update: Awaited<ReturnType<typeof runOptimiserSteps>>;
    rehearsalNll: number | null;
    tipsAdded: number;
    memorySeconds: number;
    t0: number;
    tOptimizer: number;
    tUpdate: number;
    t2: number;
  },
): void {
  const { cfg, algo, memory, state } = run;
  const t1 = r.t0 + batch.seconds.rollout * 1000;
  const report = {
    iteration: it,
    iterations: cfg.train.iterations,
    envSteps: state.envSteps,
    elapsedSeconds: state.elapsedSeconds,
    episodes: batch.episodes,
    modes: batch.modes,
    rollout: batch.stats,
    prefillCounts: Boolean(run.rolloutEngine.prefillCounts),
    update: r.update,
    intrinsic: batch.intrinsic,
    rehearsalNll: r.rehearsalNll,
    tipsAdded: r.tipsAdded,
    memorySize: memory ? memory.tips.size() : 0,
    memorySeconds: r.memorySeconds,
    seconds: {
      rollout: (t1 - r.t0) / 1000,
      update: (r.t2 - t1) / 1000,
      optimizer: (r.tUpdate - r.tOptimizer) / 1000,
      iteration: (r.t2 - r.t0) / 1000,
    },
  };
  run.metrics.append(trainRecord(report));
  run.log(
    formatIterationLine(report, { drawsModes: algo.drawsModes, groupSize: cfg.rollout.group_size, perRollout: drawnPer(run, 'rollout') }),
  );
}

/** Whether modes are drawn, and drawn once per `scope` (iteration, task group or rollout). */
const drawnPer = (run: RunContext, scope: ResolvedAlgo['modeDraw']) => run.algo.drawsModes && run.algo.modeDraw === scope;

/**
 * The iteration's batch, from the run's random stream: tasks_per_batch (task, variation) groups of
 * group_size rollouts, and the mode of every rollout (drawn per iteration, task group or rollout).
 */
function drawModes(run: RunContext, it: number): { jobs: RolloutJob[]; modes: Mode[] } {
  const { cfg, algo, rng } = run;
  const jobs: RolloutJob[] = [];
  const modes: Mode[] = [];
  const schedule = { p: scheduledP(algo.p, algo.pEnd, it, cfg.train.iterations), q: algo.q };
  const iterationMode: Mode = drawnPer(run, 'iteration') ? drawMode(schedule, rng.next(), rng.next()) : 'plain';
  for (let g = 0; g < cfg.rollout.tasks_per_batch; g++) {
    const task = rng.pick(run.tasks);
    const variation = rng.pick(run.trainVariations.get(task)!);
    const groupMode = drawnPer(run, 'task') ? drawMode(schedule, rng.next(), rng.next()) : iterationMode;
    for (let k = 0; k < cfg.rollout.group_size; k++) {
      jobs.push({ task, variation, group: g });
      // Per rollout, the group's advantage weighs tip-guided rollouts against plain ones of the same task.
      modes.push(drawnPer(run, 'rollout') ? drawMode(schedule, rng.next(), rng.next()) : groupMode);
    }
  }
  return { jobs, modes };
}

/** The batch's episodes, memory rollouts shown tips; chunks after the first (env.max_instances < batch) get seeds of their own. */
async function rollOut(run: RunContext, it: number, jobs: RolloutJob[], modes: readonly Mode[], showProgress: boolean) {
  const { cfg, memory } = run;
  const withTips = memory && modes.some(usesMemory) ? { tips: memory.tipSource(), uses: (i: number) => usesMemory(modes[i]) } : undefined;
  // A real model takes minutes per iteration: on a terminal its rollouts show progress in place, in a log
  // a status line every 2 minutes (none for a fast model, whose iteration line comes first).
  const progress = showProgress
    ? new EpisodeProgress(jobs, { label: `iter ${it} rollouts`, logIntervalMs: 120_000, taskLines: false })
    : undefined;
  const played = await runEpisodesInChunks(
    run.envs,
    run.rolloutEngine,
    jobs,
    (start) => rolloutSettings(cfg, false, cfg.seed * 1_000_003 + it + 7_919 * start),
    withTips,
    progress,
  );
  progress?.finish();
  return played;
}

/** A spread sample of the iteration's episodes into trajectories/train.jsonl. */
function recordTrainingEpisodes(
  run: RunContext,
  it: number,
  episodes: readonly Episode[],
  modes: readonly Mode[],
  reflections: readonly (string | null)[] | null,
): void {
  const { memory } = run;
  recordEpisodes(
    run.recorders.train,
    episodes,
    spreadSample(episodes.length, run.cfg.trajectories.train_per_iteration),
    { source: 'train', iteration: it, envSteps: run.state.envSteps },
    (i) => ({
      mode: modes[i],
      slot: memory?.algo.memory ? memory.slotOf(episodes[i]) : null,
      reflection: reflections?.[i] ?? null,
    }),
  );
}

/** Evaluates on the held-out split (with tips where train.eval_with_memory), records and logs it. */
async function evaluateAndLog(run: RunContext, iteration: number): Promise<EvalResult> {
  const { cfg, state } = run;
  const shown = cfg.train.eval_with_memory && run.memory ? run.memory : undefined;
  let followed: number | null = null;
  const played = (episodes: readonly Episode[]) => {
    followed = tipFollowRate(episodes);
    const k = cfg.trajectories.eval_per_evaluation;
    const slot = (i: number) => (shown?.algo.memory ? shown.slotOf(episodes[i]) : null);
    recordEpisodes(
      run.recorders.eval,
      episodes,
      spreadSample(episodes.length, k ?? episodes.length),
      { source: 'eval', iteration, envSteps: state.envSteps },
      (i) => ({ mode: shown ? 'tips' : 'plain', slot: slot(i), reflection: null }),
    );
  };
  const r = await evaluate(run.engine, run.envs, run.tasks, cfg, iteration, shown, `eval @ iter ${iteration}`, played);
  const settings = {
    eval_split: cfg.env.eval_split,
    eval_variations: cfg.env.eval_variations,
    eval_temperature: cfg.rollout.eval_temperature,
    eval_with_memory: shown !== undefined,
  };
  run.metrics.append(evalRecord(r, iteration, state.envSteps, settings, shown ? followed : undefined));
  run.log(formatEvalLine(r, iteration, cfg.env.eval_split));
  return r;
}
