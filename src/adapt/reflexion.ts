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
import type { Config } from '../config/schema.ts';
import { ReflexionMemory, ReflexionReflector, REFLEXION_WINDOW } from '../memory/reflexion.ts';
import type { PolicyEngine } from '../policy/types.ts';
import { recordEpisodes } from '../run/episode-log.ts';
import { reflectionRender, trajectoryOf } from '../trainer/memory-runtime.ts';
import type { TrajectoryWriter } from '../trajectory/writer.ts';
import {
  checkTrialOptions,
  markdownTable,
  playTrial,
  runTrials,
  scoreCells,
  trialScores,
  trialSeed,
  type TrialBed,
  type TrialOptions,
  type TrialScores,
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
  // The latest outcome of each variation: a solved one keeps its score and is not played again.
  const outcome = new Map<number, { score: number; success: boolean }>();
  return runTrials<ReflexionTrialResult, Outcomes, null>(cfg, o, {
    method: 'reflexion',
    settings,
    open: (resumed) => {
      for (const [variation, last] of resumed?.carry ?? []) outcome.set(variation, last);
      // A resumed memory is the plans the finished trials wrote, in order (the window keeps the last k).
      for (const r of resumed?.results ?? [])
        for (const { variation, plan } of r.reflections) memory.add(variation, { trial: r.trial, plan });
      return null;
    },
    header: (_, { variations }) =>
      `adapt --method reflexion: task ${o.task}, ${variations.length} ${o.split} variations x ${o.trials} trials, frozen weights, the last ${window} plans of a variation in its prompts (plans of up to ${maxTokens} tokens)`,
    held: () => `${memory.size()} plans held`,
    play: (_, { bed, recorder, trial }) => reflexionTrial({ bed, engine, cfg, o, memory, reflector, outcome, recorder }, trial),
    carry: () => [...outcome],
    line: (r) =>
      `${r.played} variations played | ${r.reflections_shown_per_episode.toFixed(1)} plans per episode | ${r.reflections.length} plans written`,
    report: (_, results, { variations }) => ({
      report: { method: 'reflexion', task: o.task, split: o.split, variations, reflexion: settings, trials: results },
      table: markdownTable(
        ['trial', 'mean score', 'success', 'variations played', 'plans per episode', 'plans written', 'memory entries'],
        results.map((r) => [
          ...scoreCells(r),
          String(r.played),
          r.reflections_shown_per_episode.toFixed(1),
          String(r.reflections.length),
          String(r.memory_size),
        ]),
      ),
    }),
  });
}

/**
 * One trial: the variations not solved yet played with their last plans in every prompt, a plan written
 * for each one failed, the outcomes and plans kept, and the episodes recorded.
 */
async function reflexionTrial(
  a: {
    bed: TrialBed;
    engine: PolicyEngine;
    cfg: Config;
    o: ReflexionOptions;
    memory: ReflexionMemory;
    reflector: ReflexionReflector;
    outcome: Map<number, { score: number; success: boolean }>;
    recorder: TrajectoryWriter;
  },
  trial: number,
): Promise<ReflexionTrialResult> {
  const { memory, outcome } = a;
  const unsolved = a.bed.jobs
    .filter((j) => !outcome.get(j.variation)?.success)
    .map((j) => ({ ...j, reflections: memory.recent(j.variation) }));
  const seed = trialSeed(a.cfg, trial, a.o.sameSeed !== false);
  const episodes = await playTrial(a.bed, a.engine, a.cfg, { jobs: unsolved, trial, trials: a.o.trials, seed });
  for (const e of episodes) outcome.set(e.variation, { score: e.score, success: e.success });
  const failed = episodes.filter((e) => !e.success);
  const plans = await a.reflector.reflect(
    failed.map((e) => ({ trajectory: trajectoryOf(e), past: memory.recent(e.variation) })),
    seed,
  );
  const shownTo = new Map(unsolved.map((j) => [j.variation, j.reflections.map((r) => r.plan)]));
  const planOf = new Map(failed.map((e, i) => [e.variation, plans[i]]));
  recordEpisodes(
    a.recorder,
    episodes,
    { source: 'adapt', trial },
    {
      mode: 'reflexion',
      reflections: episodes.map((e) => planOf.get(e.variation) ?? null),
      plansShown: (i) => shownTo.get(episodes[i].variation) ?? [],
    },
  );
  failed.forEach((e, i) => memory.add(e.variation, { trial, plan: plans[i] }));
  return {
    ...trialScores(
      trial,
      a.bed.variations.map((v) => outcome.get(v)!),
    ),
    played: unsolved.length,
    reflections_shown_per_episode: unsolved.reduce((n, j) => n + j.reflections.length, 0) / Math.max(1, unsolved.length),
    reflections: failed.map((e, i) => ({ variation: e.variation, plan: plans[i] })),
    memory_size: memory.size(),
  };
}
