/**
 * Memory-only adaptation (the paper's out-of-distribution test): frozen weights, tip memory on,
 * K trials on a task. Each trial plays the same held-out variations with tips retrieved from the
 * memory at every step; after the trial, its episodes are reflected on and written to memory, so
 * trial k+1 can use what trials 1..k found. No weight is updated. Works with any PolicyEngine,
 * a remote server included.
 */
import { join } from 'node:path';
import { resolveAlgo, type Config } from '../config/schema.ts';
import type { ExternalUsage } from '../external/usage.ts';
import type { PolicyEngine } from '../policy/types.ts';
import { recordEpisodes } from '../run/episode-log.ts';
import type { Episode } from '../run/records.ts';
import { MemoryRuntime } from '../trainer/memory-runtime.ts';
import type { TrajectoryWriter } from '../trajectory/writer.ts';
import {
  checkTrialOptions,
  markdownTable,
  pct,
  playTrial,
  runTrials,
  scoreCells,
  TRIAL_STATE_FILE,
  trialScores,
  trialSeed,
  type TrialBed,
  type TrialOptions,
  type TrialScores,
} from './trials.ts';

export interface AdaptOptions extends TrialOptions {
  /** Checkpoint whose memory.json to start from (other tasks' slots are kept; the task's slot usually starts empty). */
  memoryFrom: string | null;
}

export interface TrialResult extends TrialScores {
  memory_size: number;
  tips_shown_per_step: number;
  /** Of the steps that were shown tips naming an action, the share whose action was one of them (null: no such step). */
  tips_followed: number | null;
  /**
   * Environments with a scripted solver only (the built-in one): of the steps shown tips, the share
   * whose best tip named the solver's next action, and the share of steps, with and without tips,
   * whose action was the solver's. Says whether the memory is right and whether the agent uses it.
   */
  best_tip_is_solver: number | null;
  solver_action_share: { with_tips: number | null; without_tips: number | null } | null;
  /** memory.reflector: openai only: episodes whose tip the writer could not write, and what its calls cost this trial. */
  tips_skipped?: number;
  external?: { reflector: ExternalUsage };
}

/** What one step was shown: the actions of its tips, best first, and the solver's next action (undefined without a solver). */
export interface ShownTips {
  tipActions: (string | null)[];
  solver: string | null | undefined;
}

/** The tip-use shares of one trial, from what each step was shown (keyed by `stepKey`) and the actions taken. */
export function tipUse(
  episodes: readonly Pick<Episode, 'group' | 'steps'>[],
  shown: ReadonlyMap<string, ShownTips>,
  hasSolver: boolean,
): Pick<TrialResult, 'tips_followed' | 'best_tip_is_solver' | 'solver_action_share'> {
  let named = 0;
  let followed = 0;
  let tipped = 0;
  let bestIsSolver = 0;
  const solverTaken = { with: 0, without: 0 };
  let untipped = 0;
  for (const e of episodes) {
    e.steps.forEach((step, t) => {
      const s = shown.get(stepKey(e.group, t));
      if (!s) throw new Error(`tipUse: no record of what step ${t} of group ${e.group} was shown`);
      const actions = s.tipActions.filter((a): a is string => a !== null);
      if (actions.length) {
        named++;
        if (actions.includes(step.action)) followed++;
      }
      const tookSolver = s.solver !== undefined && s.solver !== null && step.action === s.solver;
      if (s.tipActions.length) {
        tipped++;
        if (s.solver !== undefined && s.solver !== null && s.tipActions[0] === s.solver) bestIsSolver++;
        if (tookSolver) solverTaken.with++;
      } else {
        untipped++;
        if (tookSolver) solverTaken.without++;
      }
    });
  }
  const share = (a: number, b: number) => (b ? a / b : null);
  return {
    tips_followed: share(followed, named),
    best_tip_is_solver: hasSolver ? share(bestIsSolver, tipped) : null,
    solver_action_share: hasSolver
      ? { with_tips: share(solverTaken.with, tipped), without_tips: share(solverTaken.without, untipped) }
      : null,
  };
}

/** One step of one episode in a trial: adapt gives every variation its own group. */
export function stepKey(group: number, step: number): string {
  return `${group}:${step}`;
}

export async function adapt(engine: PolicyEngine, cfg: Config, o: AdaptOptions): Promise<TrialResult[]> {
  checkTrialOptions(o);
  // The memory is always on here, whatever algorithm trained the checkpoint. adapt.json records the
  // memory settings, since retrieval filters (not in the paper) change what every trial is shown.
  const memCfg: Config = { ...cfg, algo: { ...cfg.algo, name: 'empo2', p: 1, intrinsic: 'none' } };
  return runTrials<TrialResult, object, MemoryRuntime>(cfg, o, {
    method: 'tips',
    // Resumed, the memory is the one the last finished trial left (the reflector is seeded alike every call).
    open: (resumed, log) => {
      const saved = resumed ? { memory: resumed.carry, where: join(o.outDir, TRIAL_STATE_FILE) } : undefined;
      return MemoryRuntime.create(memCfg, resolveAlgo(memCfg), engine, {
        checkpoint: o.memoryFrom,
        saved,
        writer: { cacheDir: o.outDir, log },
      });
    },
    header: (memory, { variations }) =>
      `adapt: task ${o.task}, ${variations.length} ${o.split} variations x ${o.trials} trials, frozen weights, memory on (${memory.embedder.name}, ${memory.reflector.name} reflector, top ${cfg.memory.top_k})`,
    held: (_, results) => `${results.at(-1)!.memory_size} tips in memory`,
    play: (memory, { bed, recorder, trial }) => tipTrial({ bed, engine, cfg, o, memory, recorder }, trial),
    carry: (memory) => memory.toJSON(),
    line: (r) => {
      const solverNote = r.best_tip_is_solver === null ? '' : ` | best tip = solver's action ${pct(r.best_tip_is_solver)}`;
      return `${r.tips_shown_per_step.toFixed(1)} tips per step | tips followed ${pct(r.tips_followed)}${solverNote} | ${r.memory_size} tips in memory${r.tips_skipped ? ` | ${r.tips_skipped} tips skipped (writer failed)` : ''}`;
    },
    report: (memory, results, { variations, hasSolver }) => ({
      report: {
        method: 'tips',
        task: o.task,
        split: o.split,
        variations,
        memory: cfg.memory,
        experimental: cfg.experimental,
        trials: results,
      },
      table: tipTable(results, hasSolver),
      extra: { 'memory.json': JSON.stringify(memory.toJSON()) },
    }),
    dispose: (memory) => memory.dispose(),
  });
}

/**
 * One trial: the variations played with tips retrieved at every step (what each step was shown kept
 * for tipUse), then reflected on and written to the memory, and recorded.
 */
async function tipTrial(
  a: { bed: TrialBed; engine: PolicyEngine; cfg: Config; o: AdaptOptions; memory: MemoryRuntime; recorder: TrajectoryWriter },
  trial: number,
): Promise<TrialResult> {
  const { bed, cfg, o, memory } = a;
  let tipsShown = 0;
  let steps = 0;
  const shown = new Map<string, ShownTips>();
  const source = memory.tipSource((q, tipActions) =>
    shown.set(stepKey(q.job.group, q.taken.length), { tipActions, solver: bed.hasSolver ? q.oracleAction() : undefined }),
  );
  const counted = async (queries: Parameters<typeof source>[0]) => {
    const tips = await source(queries);
    tipsShown += tips.reduce((n, t) => n + t.length, 0);
    steps += queries.length;
    return tips;
  };
  const seed = trialSeed(cfg, trial, o.sameSeed !== false);
  const memoryUse = { tips: counted, uses: () => true };
  const episodes = await playTrial(bed, a.engine, cfg, { jobs: bed.jobs, trial, trials: o.trials, seed, memory: memoryUse });
  const { reflections } = await memory.writeTips(episodes);
  const writing = memory.takeWriting();
  recordEpisodes(a.recorder, episodes, { source: 'adapt', trial }, { mode: 'tips', slots: memory, reflections });
  return {
    ...trialScores(trial, episodes),
    // Entries in the slots this adaptation uses (one per task, or one per variation).
    memory_size: [...new Set(bed.jobs.map((j) => memory.slotOf(j)))].reduce((n, slot) => n + memory.tips.size(slot), 0),
    tips_shown_per_step: tipsShown / Math.max(1, steps),
    ...tipUse(episodes, shown, bed.hasSolver),
    ...(writing.external ? { tips_skipped: writing.skipped, external: { reflector: writing.external } } : {}),
  };
}

/** The trials' table: scores, tips shown and followed, and (with a solver) whether the tips named its actions. */
function tipTable(results: readonly TrialResult[], hasSolver: boolean): string {
  const solverColumns = hasSolver ? ["best tip = solver's action", "solver's action taken (with / without tips)"] : [];
  return markdownTable(
    ['trial', 'mean score', 'success', 'tips per step', 'tips followed', ...solverColumns, 'memory entries'],
    results.map((r) => {
      const solver = r.solver_action_share
        ? [pct(r.best_tip_is_solver), `${pct(r.solver_action_share.with_tips)} / ${pct(r.solver_action_share.without_tips)}`]
        : [];
      return [...scoreCells(r), r.tips_shown_per_step.toFixed(1), pct(r.tips_followed), ...solver, String(r.memory_size)];
    }),
  );
}
