/**
 * Reflexion (Shinn et al., 2023) as the other memory-only method of `empo2 adapt` (`--method
 * reflexion`), on the same trial protocol and report as the tip memory: frozen weights, K trials of
 * the first N variations of a task. After each trial, the policy writes a plan for every variation it
 * failed; the variation's last k plans open every prompt of its next trial. A solved variation is
 * not played again and counts as solved in every later trial.
 *
 * Semantics follow noahshinn/reflexion, alfworld_runs/ at commit 218cf0ef1df84b05ce379dd4a8e47f17766733a0:
 * main.py (trials, reflection after each), alfworld_trial.py `run_trial` (an environment that succeeded
 * is skipped and still counted as a success; the others play with `memory[-3:]`),
 * generate_reflections.py `update_memory` (a plan only for the unsolved), env_history.py (the plans
 * before the task: src/trainer/prompt.ts `renderReflections`). Not ported: `check_is_exhausted`, which
 * ends an ALFWorld episode when an action is repeated twice in a row; episodes here end as in the tip
 * method, so the two methods differ only in what they show the policy.
 */
import { join } from 'node:path';
import type { Config } from '../config/schema.ts';
import { ReflexionMemory, ReflexionReflector, REFLEXION_WINDOW } from '../memory/reflexion.ts';
import type { PolicyEngine } from '../policy/types.ts';
import { TrajectoryWriter } from '../trajectory/writer.ts';
import { ADAPT_TRAJECTORIES } from './adapt.ts';
import { reflectionRender, trajectoryOf } from './memory.ts';
import { recordEpisodes } from './trajectories.ts';
import {
  checkTrialOptions,
  loadTrialState,
  markdownTable,
  openTrialBed,
  pct,
  playTrial,
  removeTrialState,
  saveTrialReport,
  saveTrialState,
  scoreCells,
  TRIAL_STATE_FILE,
  trialScores,
  trialSeed,
  type TrialOptions,
  type TrialScores,
  type TrialState,
} from './trials.ts';

/** Reflexion's reflections: 256 tokens, the `max_tokens` of its `get_completion`. */
export const REFLECTION_MAX_TOKENS = 256;

export interface ReflexionOptions extends TrialOptions {
  /** k: plans of a variation shown in its next trial and in its next reflection query (Reflexion: 3). */
  window?: number;
  /** Most tokens of one plan. */
  reflectionMaxTokens?: number;
}

export interface ReflexionTrialResult extends TrialScores {
  /** Variations played in this trial: those not solved in an earlier one. */
  played: number;
  /** Plans in the prompts of this trial's episodes, per episode played. */
  reflections_shown_per_episode: number;
  /** Plans written after this trial, one per variation it failed. */
  reflections: { variation: number; plan: string }[];
  /** Plans held after this trial (at most k per variation). */
  memory_size: number;
}

/** What Reflexion carries between trials besides its plans: each variation's latest outcome. */
type Outcomes = [variation: number, outcome: { score: number; success: boolean }][];

export async function reflexion(engine: PolicyEngine, cfg: Config, o: ReflexionOptions): Promise<ReflexionTrialResult[]> {
  const log = o.log ?? ((l: string) => console.log(l));
  checkTrialOptions(o);
  const window = o.window ?? REFLEXION_WINDOW;
  const maxTokens = o.reflectionMaxTokens ?? REFLECTION_MAX_TOKENS;
  if (!Number.isInteger(window) || window < 1) throw new Error(`--reflections must be a positive integer, got ${window}`);
  if (!Number.isInteger(maxTokens) || maxTokens < 1)
    throw new Error(`--reflection-max-tokens must be a positive integer, got ${maxTokens}`);
  const memory = new ReflexionMemory(window);
  // Reflections are sampled as the actions are: the evaluation temperature.
  const reflector = new ReflexionReflector(engine, reflectionRender(cfg), { maxTokens, temperature: cfg.rollout.eval_temperature });
  const settings = { window, reflection_max_tokens: maxTokens, temperature: cfg.rollout.eval_temperature };
  const bed = await openTrialBed(cfg, o);
  const { jobs, variations } = bed;
  let resumed: TrialState<ReflexionTrialResult, Outcomes> | null;
  try {
    resumed = loadTrialState<ReflexionTrialResult, Outcomes>('reflexion', cfg, o, variations, settings);
  } catch (e) {
    await bed.close();
    throw e;
  }
  const results: ReflexionTrialResult[] = resumed?.results ?? [];
  // The latest outcome of each variation: a solved one keeps its score and is not played again.
  const outcome = new Map<number, { score: number; success: boolean }>(resumed?.carry ?? []);
  // A resumed memory is the plans the finished trials wrote, in order (the window keeps the last k).
  for (const r of results) for (const { variation, plan } of r.reflections) memory.add(variation, { trial: r.trial, plan });
  const writerOptions = { maxBytes: cfg.trajectories.max_megabytes * 2 ** 20, log };
  const trajectories = join(o.outDir, ADAPT_TRAJECTORIES);
  const recorder = resumed
    ? TrajectoryWriter.resume(trajectories, results.length, writerOptions, 'trial')
    : TrajectoryWriter.fresh(trajectories, writerOptions);
  log(
    `adapt --method reflexion: task ${o.task}, ${variations.length} ${o.split} variations x ${o.trials} trials, frozen weights, the last ${window} plans of a variation in its prompts (plans of up to ${maxTokens} tokens)`,
  );
  if (resumed) log(`resuming after trial ${results.length} (${join(o.outDir, TRIAL_STATE_FILE)}, ${memory.size()} plans held)`);
  try {
    for (let trial = results.length + 1; trial <= o.trials; trial++) {
      const unsolved = jobs
        .filter((j) => !outcome.get(j.variation)?.success)
        .map((j) => ({ ...j, reflections: memory.recent(j.variation) }));
      const seed = trialSeed(cfg, trial, o.sameSeed !== false);
      const episodes = await playTrial(bed, engine, cfg, unsolved, { trial, trials: o.trials, seed });
      for (const e of episodes) outcome.set(e.variation, { score: e.score, success: e.success });
      const failed = episodes.filter((e) => !e.success);
      const plans = await reflector.reflect(
        failed.map((e) => ({ trajectory: trajectoryOf(e), past: memory.recent(e.variation) })),
        seed,
      );
      const shownTo = new Map(unsolved.map((j) => [j.variation, j.reflections.map((r) => r.plan)]));
      const planOf = new Map(failed.map((e, i) => [e.variation, plans[i]]));
      recordEpisodes(recorder, episodes, [...episodes.keys()], { source: 'adapt', trial }, (i) => ({
        mode: 'reflexion',
        slot: null,
        reflection: planOf.get(episodes[i].variation) ?? null,
        plansShown: shownTo.get(episodes[i].variation) ?? [],
      }));
      failed.forEach((e, i) => memory.add(e.variation, { trial, plan: plans[i] }));
      const r: ReflexionTrialResult = {
        ...trialScores(
          trial,
          variations.map((v) => outcome.get(v)!),
        ),
        played: unsolved.length,
        reflections_shown_per_episode: unsolved.reduce((n, j) => n + j.reflections.length, 0) / Math.max(1, unsolved.length),
        reflections: failed.map((e, i) => ({ variation: e.variation, plan: plans[i] })),
        memory_size: memory.size(),
      };
      results.push(r);
      saveTrialState('reflexion', cfg, o, variations, { results, carry: [...outcome] }, settings);
      log(
        `trial ${trial}/${o.trials}: mean score ${r.mean_score.toFixed(1)} | success ${pct(r.success_rate)} | ${r.played} variations played | ${r.reflections_shown_per_episode.toFixed(1)} plans per episode | ${r.reflections.length} plans written`,
      );
    }
  } finally {
    await bed.close();
  }
  const table = markdownTable(
    ['trial', 'mean score', 'success', 'variations played', 'plans per episode', 'plans written', 'memory entries'],
    results.map((r) => [
      ...scoreCells(r),
      String(r.played),
      r.reflections_shown_per_episode.toFixed(1),
      String(r.reflections.length),
      String(r.memory_size),
    ]),
  );
  saveTrialReport(
    o.outDir,
    { method: 'reflexion', task: o.task, split: o.split, variations, reflexion: settings, trials: results },
    table,
    log,
  );
  removeTrialState(o.outDir);
  return results;
}
