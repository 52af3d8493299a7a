/**
 * A training run as the loop (./trainer.ts) sees it: the run (../run/run-context.ts) opened with the
 * trainer's memory, the tasks and the variations it trains on, the tip warm-up done before the first
 * iteration and the rehearsal replayed after every update; its banner logged, and the run started.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { resolveAlgo, type Config, type ResolvedAlgo } from '../config/schema.ts';
import { envDefinition, evalVariationsNote } from '../envs/index.ts';
import type { Env } from '../envs/types.ts';
import { matMulDescription } from '../policy/index.ts';
import { bannerLines } from '../run/iteration-log.ts';
import { openRun, startRun, type RunContext } from '../run/run-context.ts';
import type { TrainPhase } from '../run/records.ts';
import { evaluationEpisodes } from './evaluate.ts';
import { JudgeReward } from './judge-reward.ts';
import { MemoryRuntime } from './memory-runtime.ts';
import { oracleOf, type RolloutPlayer } from './rollout.ts';
import { buildWarmupExamples, runTipWarmup, TipRehearsal, tipWarmupSettings } from './tip-warmup.ts';

export interface Training {
  run: RunContext<MemoryRuntime>;
  algo: ResolvedAlgo;
  tasks: string[];
  /** The train-split variations of each task that batches are drawn from. */
  trainVariations: Map<string, number[]>;
  rehearsal: TipRehearsal | null;
  /** env.reward: judge: the model that scores each group's episodes before the update (null: the environment's rewards). */
  judge: JudgeReward | null;
  /** Who plays the episodes (trainer.ts sets it: the built-in rollout, or the one the caller passed). */
  player?: RolloutPlayer;
  /** Told as the loop enters each phase (trainer.ts sets it from TrainOptions.onPhase). */
  onPhase?: (p: TrainPhase) => void;
}

/**
 * Opens a run in cfg.run_dir, fresh or (`resume`) from its latest checkpoint, warms it up, logs its
 * banner and starts it; `handleSignals` installs Ctrl-C handling (the CLI does; tests do not), and an
 * abort of `signal` stops the run as a Ctrl-C does.
 */
export async function openTraining(
  cfg: Config,
  o: { resume: boolean; handleSignals: boolean; signal?: AbortSignal; agentProcesses?: boolean; log: (line: string) => void },
): Promise<Training> {
  envDefinition(cfg.env.name); // an unknown env.name fails here, before the run folder is made
  const algo = resolveAlgo(cfg);
  let tasks: string[] = [];
  const run = await openRun(cfg, o, {
    memory: async (engine, restoreFrom) =>
      algo.memory || algo.intrinsic !== 'none'
        ? await MemoryRuntime.create(cfg, algo, engine, { checkpoint: restoreFrom, writer: { cacheDir: null, log: o.log } })
        : null,
    environments: (first, memory) => {
      if (memory && cfg.experimental.tip_source === 'oracle') oracleOf(first); // fail before training, not at the first memory rollout
      tasks = cfg.env.tasks ?? first.tasks();
      return Math.max(cfg.rollout.tasks_per_batch * cfg.rollout.group_size, evaluationEpisodes(first, tasks, cfg));
    },
  });
  try {
    const probe = run.envs[0];
    const evalNote = evalVariationsNote(probe, tasks, cfg.env.eval_split, cfg.env.eval_variations);
    if (evalNote) o.log(evalNote);
    const trainVariations = new Map(tasks.map((t) => [t, probe.variations(t, 'train').slice(0, cfg.env.train_variations ?? undefined)]));
    const judge =
      cfg.env.reward === 'judge' && cfg.env.judge ? new JudgeReward(cfg.env.judge, { cacheDir: cfg.run_dir, log: o.log }) : null;
    const rehearsal = await teachTipReading(run, probe, tasks);
    for (const line of await banner(run, algo, tasks, rehearsal)) o.log(line);
    if (judge) o.log(`rewards: ${judge.description}, each group's episodes scored together before the update`);
    await startRun(run, o);
    return { run, algo, tasks, trainVariations, rehearsal, judge };
  } catch (e) {
    run.lock.release();
    throw e;
  }
}

/**
 * The tip warm-up of a fresh run (experimental.tip_warmup_examples), and the rehearsal that replays its
 * kind of examples after every update (experimental.tip_rehearsal; null without one).
 */
async function teachTipReading(run: RunContext, probe: Env, tasks: string[]): Promise<TipRehearsal | null> {
  const { cfg, engine, log } = run;
  if (!run.resumeFrom && cfg.experimental.tip_warmup_examples > 0) {
    const ws = tipWarmupSettings(cfg);
    const examples = await buildWarmupExamples(probe, tasks, engine.tokenizer, ws);
    log(
      `tip warm-up: ${examples.length} synthetic prompts from random-action episodes on the train split of ${tasks.join(', ')}, ${ws.epochs} epochs`,
    );
    const report = await runTipWarmup(engine, examples, ws, log);
    // RL starts with fresh AdamW moments, as it would from a pretrained checkpoint.
    run.training.resetOptimizer?.();
    writeFileSync(join(cfg.run_dir, 'tip-warmup.json'), JSON.stringify(report, null, 2) + '\n');
  }
  return cfg.experimental.tip_rehearsal > 0 ? await TipRehearsal.build(probe, tasks, engine.tokenizer, cfg) : null;
}

/** The lines a run starts with (../run/iteration-log.ts bannerLines). */
async function banner(
  run: RunContext<MemoryRuntime>,
  algo: ResolvedAlgo,
  tasks: string[],
  rehearsal: TipRehearsal | null,
): Promise<string[]> {
  const { cfg, memory } = run;
  return bannerLines(cfg, algo, {
    runDir: cfg.run_dir,
    backend: run.backend,
    matMul: await matMulDescription(),
    engine: run.training.description,
    vocabSize: run.engine.tokenizer.vocabSize,
    memory: memory ? { embedder: memory.embedder.name, reflector: memory.reflector.name, tips: memory.tips.size() } : null,
    rehearsalPool: rehearsal ? rehearsal.pool.length : null,
    tasks,
    resumeFrom: run.resumeFrom,
  });
}
