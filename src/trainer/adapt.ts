/**
 * Memory-only adaptation (the paper's out-of-distribution test): frozen weights, tip memory on,
 * K trials on a task. Each trial plays the same held-out variations with tips retrieved from the
 * memory at every step; after the trial, its episodes are reflected on and written to memory, so
 * trial k+1 can use what trials 1..k found. No weight is updated. Works with any PolicyEngine,
 * a remote server included.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { resolveAlgo, type Config } from '../config/schema.ts';
import { createEnv } from '../envs/index.ts';
import type { Env } from '../envs/types.ts';
import type { PolicyEngine } from '../policy/types.ts';
import { MemoryRuntime } from './memory.ts';
import { EpisodeProgress } from './progress.ts';
import { environmentCount, rolloutSettings, runEpisodesInChunks, type Episode, type RolloutJob } from './rollout.ts';

export interface AdaptOptions {
  task: string;
  trials: number;
  /** Held-out variations played in every trial (the first N of `split`). */
  variations: number;
  split: 'train' | 'dev' | 'test';
  /** Checkpoint whose memory.json to start from (other tasks' slots are kept; the task's slot usually starts empty). */
  memoryFrom: string | null;
  outDir: string;
  /** Sample every trial with the same seed (default), so score changes come from the memory alone; false gives each trial its own draw. */
  sameSeed?: boolean;
  log?: (line: string) => void;
}

export interface TrialResult {
  trial: number;
  mean_score: number;
  success_rate: number;
  scores: number[];
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
}

/** What one step was shown: the actions of its tips, best first, and the solver's next action (undefined without a solver). */
export interface ShownTips {
  tipActions: (string | null)[];
  solver: string | null | undefined;
}

/** The tip-use shares of one trial, from what each step was shown (keyed by `stepKey`) and the actions taken. */
export function tipUse(episodes: readonly Pick<Episode, 'group' | 'steps'>[], shown: ReadonlyMap<string, ShownTips>, hasSolver: boolean): Pick<TrialResult, 'tips_followed' | 'best_tip_is_solver' | 'solver_action_share'> {
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
    solver_action_share: hasSolver ? { with_tips: share(solverTaken.with, tipped), without_tips: share(solverTaken.without, untipped) } : null,
  };
}

/** One step of one episode in a trial: adapt gives every variation its own group. */
export function stepKey(group: number, step: number): string {
  return `${group}:${step}`;
}

export async function adapt(engine: PolicyEngine, cfg: Config, o: AdaptOptions): Promise<TrialResult[]> {
  const log = o.log ?? ((l: string) => console.log(l));
  if (!Number.isInteger(o.trials) || o.trials < 1) throw new Error(`--trials must be a positive integer, got ${o.trials}`);
  if (!Number.isInteger(o.variations) || o.variations < 1) throw new Error(`--variations must be a positive integer, got ${o.variations}`);
  // The memory is always on here, whatever algorithm trained the checkpoint. adapt.json records the
  // memory settings, since retrieval filters (not in the paper) change what every trial is shown.
  const memCfg: Config = { ...cfg, algo: { ...cfg.algo, name: 'empo2', p: 1, intrinsic: 'none' } };
  const memory = await MemoryRuntime.create(memCfg, resolveAlgo(memCfg), engine, o.memoryFrom);
  const probe = await createEnv({ ...cfg.env, tasks: null });
  if (!probe.tasks().includes(o.task)) {
    await probe.close();
    throw new Error(`unknown task "${o.task}" for environment ${cfg.env.name} (tasks: ${probe.tasks().join(', ')})`);
  }
  const variations = probe.variations(o.task, o.split).slice(0, o.variations);
  const hasSolver = typeof probe.oracleAction === 'function';
  const envs: Env[] = [probe];
  while (envs.length < environmentCount(cfg, variations.length)) envs.push(await createEnv({ ...cfg.env, tasks: null }));
  const jobs: RolloutJob[] = variations.map((variation, i) => ({ task: o.task, variation, group: i }));
  mkdirSync(o.outDir, { recursive: true });
  log(`adapt: task ${o.task}, ${variations.length} ${o.split} variations x ${o.trials} trials, frozen weights, memory on (${memory.embedder.name}, ${memory.reflector.name} reflector, top ${cfg.memory.top_k})`);
  const results: TrialResult[] = [];
  try {
    for (let trial = 1; trial <= o.trials; trial++) {
      let tipsShown = 0;
      let steps = 0;
      const shown = new Map<string, ShownTips>();
      const source = memory.tipSource((q, tipActions) => shown.set(stepKey(q.job.group, q.taken.length), { tipActions, solver: hasSolver ? q.oracleAction() : undefined }));
      const counted = async (queries: Parameters<typeof source>[0]) => {
        const tips = await source(queries);
        tipsShown += tips.reduce((a, t) => a + t.length, 0);
        steps += queries.length;
        return tips;
      };
      // Same sampling seed every trial by default: score changes then come from the memory, not from a luckier draw.
      const seed = 424_242 + cfg.seed + (o.sameSeed === false ? 7919 * trial : 0);
      const progress = new EpisodeProgress(jobs, { label: `trial ${trial}/${o.trials}` });
      const { episodes } = await runEpisodesInChunks(envs, engine, jobs, (start) => rolloutSettings(cfg, true, seed + start), { tips: counted, uses: () => true }, progress);
      progress.finish();
      await memory.write(episodes);
      const scores = episodes.map((e) => e.score);
      const r: TrialResult = {
        trial,
        mean_score: scores.reduce((a, b) => a + b, 0) / scores.length,
        success_rate: episodes.filter((e) => e.success).length / episodes.length,
        scores,
        // Entries in the slots this adaptation uses (one per task, or one per variation).
        memory_size: [...new Set(jobs.map((j) => memory.slotOf(j)))].reduce((n, slot) => n + memory.tips.size(slot), 0),
        tips_shown_per_step: tipsShown / Math.max(1, steps),
        ...tipUse(episodes, shown, hasSolver),
      };
      results.push(r);
      const solverNote = r.best_tip_is_solver === null ? '' : ` | best tip = solver's action ${pct(r.best_tip_is_solver)}`;
      log(`trial ${trial}/${o.trials}: mean score ${r.mean_score.toFixed(1)} | success ${(r.success_rate * 100).toFixed(0)}% | ${r.tips_shown_per_step.toFixed(1)} tips per step | tips followed ${pct(r.tips_followed)}${solverNote} | ${r.memory_size} tips in memory`);
    }
  } finally {
    await Promise.all(envs.map((e) => e.close()));
  }
  const solverColumns = hasSolver ? ["best tip = solver's action", "solver's action taken (with / without tips)"] : [];
  const table = [
    `| trial | mean score | success | tips per step | tips followed | ${[...solverColumns, 'memory entries'].join(' | ')} |`,
    `|---|---|---|---|---|${solverColumns.map(() => '---|').join('')}---|`,
    ...results.map((r) => {
      const solver = r.solver_action_share ? [pct(r.best_tip_is_solver), `${pct(r.solver_action_share.with_tips)} / ${pct(r.solver_action_share.without_tips)}`] : [];
      return `| ${r.trial} | ${r.mean_score.toFixed(1)} | ${(r.success_rate * 100).toFixed(0)}% | ${r.tips_shown_per_step.toFixed(1)} | ${[pct(r.tips_followed), ...solver, r.memory_size].join(' | ')} |`;
    }),
  ].join('\n');
  writeFileSync(join(o.outDir, 'adapt.json'), JSON.stringify({ task: o.task, split: o.split, variations, memory: cfg.memory, trials: results }, null, 2) + '\n');
  writeFileSync(join(o.outDir, 'adapt.md'), table + '\n');
  writeFileSync(join(o.outDir, 'memory.json'), JSON.stringify(memory.toJSON()));
  log('\n' + table + `\n(saved in ${o.outDir}: adapt.json, adapt.md, memory.json)`);
  memory.dispose();
  return results;
}

function pct(x: number | null): string {
  return x === null ? '–' : `${(x * 100).toFixed(0)}%`;
}
