/**
 * What a training run says about itself: the banner when it starts, then per iteration a `train`
 * line in metrics.jsonl and a log line, per evaluation an `eval` line and a log line. The loop
 * (../trainer/trainer.ts) hands over what happened; the fields and wording are decided here alone.
 */
import type { Mode } from '../algo/modes.ts';
import type { Config, ResolvedAlgo } from '../config/schema.ts';
import type { ExternalUsage } from '../external/usage.ts';
import { formatDuration } from '../util/duration.ts';
import { followedTip } from '../trajectory/format.ts';
import type { MetricsLine, TrainLine } from './metrics-log.ts';
import { isFailed, type Episode, type EvalResult, type JudgeTally, type RolloutStats, type UpdateStats } from './records.ts';

/** One finished iteration, as the loop saw it. */
export interface IterationReport {
  iteration: number;
  /** train.iterations */
  iterations: number;
  /** Environment steps of the run so far, this iteration's included. */
  envSteps: number;
  elapsedSeconds: number;
  episodes: readonly Episode[];
  modes: readonly Mode[];
  rollout: RolloutStats;
  /** Whether the rollout engine reports how many prompt tokens it prefilled. */
  prefillCounts: boolean;
  update: UpdateStats;
  /** Weighted intrinsic reward of every step of every episode (null: none this run). */
  intrinsic: number[][] | null;
  /** Tip rehearsal's NLL after the update (null: no rehearsal). */
  rehearsalNll: number | null;
  tipsAdded: number;
  /** Episodes whose tip the writer could not write (its external model failed): nothing stored from them. */
  tipsSkipped: number;
  /** What each external model cost this iteration, by role (null: the run calls none). */
  external: Record<string, ExternalUsage> | null;
  /** env.reward: judge: the groups judged and left out this iteration (null: the environment's rewards). */
  judged: JudgeTally | null;
  memorySize: number;
  memorySeconds: number;
  /** Wall time of the rollouts, of everything after them (update, rehearsal, memory), of the optimiser steps alone, of the whole iteration. */
  seconds: { rollout: number; update: number; optimizer: number; iteration: number };
}

/** How the iteration's modes were drawn, for the log line. */
export interface ModeDraw {
  drawsModes: boolean;
  groupSize: number;
  perRollout: boolean;
}

/** The iteration's `train` line of metrics.jsonl. */
export function trainRecord(r: IterationReport): TrainLine {
  const { episodes, update, rollout: stats } = r;
  return {
    type: 'train',
    iteration: r.iteration,
    env_steps: r.envSteps,
    mean_score: meanScore(episodes),
    success_rate: successRate(episodes),
    failed: episodes.filter(isFailed).length,
    loss: update.loss,
    clip_fraction: update.clipFraction,
    mean_ratio: update.meanRatio,
    grad_norm: update.gradNorm,
    kl: update.kl,
    sequences: update.sequences,
    trained_tokens: update.tokens,
    packed_share: update.packedSteps / Math.max(1, update.steps),
    rollout_seconds: r.seconds.rollout,
    update_seconds: r.seconds.update,
    optimizer_seconds: r.seconds.optimizer,
    rollout_tokens_per_s: rolloutTokensPerSecond(stats),
    mean_prompt_tokens: stats.promptTokens / Math.max(1, stats.envSteps),
    prompt_tokens: stats.promptTokens,
    prefill_tokens: r.prefillCounts ? stats.prefilledTokens : null,
    sequence_tokens: update.sequenceTokens,
    elapsed_seconds: r.elapsedSeconds,
    modes: countModes(r.modes),
    score_by_mode: scoreByMode(episodes, r.modes),
    off_policy_sequences: update.offPolicySequences,
    off_policy_mean_weight: update.offPolicyMeanWeight,
    dropped_low_prob: update.droppedLowProb,
    intrinsic_mean: r.intrinsic ? r.intrinsic.flat().reduce((a, b) => a + b, 0) / Math.max(1, episodes.length) : 0,
    memory_seconds: r.memorySeconds,
    memory_share_of_rollout: r.memorySeconds / Math.max(1e-9, r.seconds.rollout),
    tips_added: r.tipsAdded,
    ...(r.external ? { tips_skipped: r.tipsSkipped, external: r.external } : {}),
    ...(r.judged ? { judge: r.judged } : {}),
    memory_size: r.memorySize,
    tips_followed: tipFollowRate(episodes),
    entropy: sampledTokenEntropy(episodes),
    ...(update.stepGroups
      ? {
          step_groups: {
            count: update.stepGroups.count,
            mean_size: update.stepGroups.meanSize,
            max_size: update.stepGroups.maxSize,
            singleton_share: update.stepGroups.singletonShare,
            varied_rollouts: update.stepGroups.variedRollouts,
          },
        }
      : {}),
    ...(r.rehearsalNll !== null ? { tip_rehearsal_nll: r.rehearsalNll } : {}),
  };
}

/** `iter 3/40 [tips/off,plain] | env steps … | score … | loss … | rollout …s (… tok/s) | update …s | ETA …` */
export function formatIterationLine(r: IterationReport, draw: ModeDraw): string {
  const { episodes, update } = r;
  const modes = draw.drawsModes ? ` [${describeModes(r.modes, draw.groupSize, draw.perRollout)}]` : '';
  const trainTokensPerSecond = update.tokens / Math.max(1e-9, r.seconds.update);
  const eta = (r.iterations - r.iteration) * r.seconds.iteration;
  const score = meanScore(episodes);
  const success = successRate(episodes);
  const failures = episodes.filter(isFailed).length;
  return (
    `iter ${r.iteration}/${r.iterations}${modes} | env steps ${r.envSteps} | score ${score === null ? 'none' : score.toFixed(1)}${describeScores(scoreByMode(episodes, r.modes))} | success ${success === null ? 'none' : `${(success * 100).toFixed(0)}%`}${failures > 0 ? ` | failed ${failures} of ${episodes.length} episodes` : ''}${r.tipsSkipped > 0 ? ` | ${r.tipsSkipped} tips skipped (writer failed)` : ''}${r.judged?.left_out ? ` | ${r.judged.left_out} of ${r.judged.groups} groups left out (judge failed)` : ''} | loss ${update.loss.toFixed(4)}${r.rehearsalNll !== null ? ` | tip NLL ${r.rehearsalNll.toFixed(2)}` : ''} | clip ${(update.clipFraction * 100).toFixed(1)}% | ` +
    `rollout ${r.seconds.rollout.toFixed(1)}s (${rolloutTokensPerSecond(r.rollout).toFixed(0)} tok/s) | update ${r.seconds.update.toFixed(1)}s (${trainTokensPerSecond.toFixed(0)} resp tok/s) | ETA ${formatDuration(eta)}`
  );
}

/** How an evaluation was played; `empo2 compare` reuses a logged evaluation only where these match its own. */
export interface EvalSettings {
  eval_split: string;
  eval_variations: number;
  eval_temperature: number;
  eval_with_memory: boolean;
}

/** An evaluation's `eval` line of metrics.jsonl; `tipsFollowed` only where the evaluation showed tips. */
export function evalRecord(
  r: EvalResult,
  at: { iteration: number; trainEnvSteps: number; settings: EvalSettings; tipsFollowed?: number | null },
): MetricsLine {
  // An invalid evaluation gives no score: its score fields are null, and `invalid` says why.
  const unscored = r.invalid ? { mean_score: null, success_rate: null } : {};
  return {
    type: 'eval',
    iteration: at.iteration,
    train_env_steps: at.trainEnvSteps,
    ...at.settings,
    ...r.summary,
    ...unscored,
    per_task: r.perTask.map((t) => ({ ...t, ...unscored })),
    ...(r.invalid ? { invalid: r.invalid } : {}),
    ...(at.tipsFollowed !== undefined ? { tips_followed: at.tipsFollowed } : {}),
  };
}

export function formatEvalLine(r: EvalResult, iteration: number, split: string): string {
  const s = r.summary;
  const scores = r.invalid
    ? `invalid, no score: ${r.invalid}`
    : `mean score ${s.mean_score.toFixed(1)} | success ${(s.success_rate * 100).toFixed(1)}%`;
  const failed = s.failed ? `, ${s.failed} failed` : '';
  return `eval @ iter ${iteration}: ${scores} | ${s.episodes} episodes on ${split}${failed} | ${timing(s)}`;
}

/** What the banner says about the run beyond its config. */
export interface RunDescription {
  runDir: string;
  backend: string;
  /** Why matrix products run where they do (native-matmul.ts). */
  matMul: string;
  engine: string;
  vocabSize: number;
  memory: { embedder: string; reflector: string; tips: number } | null;
  /** Examples the tip rehearsal draws from (null: no rehearsal). */
  rehearsalPool: number | null;
  tasks: readonly string[];
  resumeFrom: string | null;
}

/** The three lines a run starts with: where and on what it runs, the algorithm, the environment and batch. */
export function bannerLines(cfg: Config, algo: ResolvedAlgo, d: RunDescription): string[] {
  return [
    `empo2 train | run ${d.runDir} | backend ${d.backend} (${d.matMul}) | ${d.engine}, vocab ${d.vocabSize}`,
    `algo ${cfg.algo.name}: p=${algo.p}${algo.pEnd !== null ? ` → ${algo.pEnd} by iteration ${cfg.train.iterations}` : ''} q=${algo.q} (mode drawn per ${algo.modeDraw}), intrinsic ${algo.intrinsic}` +
      (algo.stepAdvantage === 'gigpo'
        ? `, GiGPO step advantage (ω=${cfg.algo.gigpo_omega}, γ=${cfg.algo.gigpo_gamma}, ${cfg.algo.gigpo_mode})`
        : '') +
      (d.memory
        ? ` | memory: ${d.memory.embedder} embedder, ${d.memory.reflector} reflector, slot per ${cfg.memory.slot}, ${d.memory.tips} tips`
        : '') +
      (d.rehearsalPool !== null
        ? ` | tip rehearsal: ${cfg.experimental.tip_rehearsal} of ${d.rehearsalPool} examples after every update`
        : ''),
    `env ${cfg.env.name}: ${d.tasks.length} tasks (${d.tasks.join(', ')}) | ${cfg.rollout.tasks_per_batch} groups x ${cfg.rollout.group_size} rollouts per iteration | ${cfg.train.iterations} iterations` +
      (d.resumeFrom ? ` | resuming from ${d.resumeFrom}` : ''),
  ];
}

/** Mean score of the episodes no failure ended (null: every one failed). */
function meanScore(episodes: readonly Episode[]): number | null {
  const scored = episodes.filter((e) => !isFailed(e));
  return scored.length ? scored.reduce((a, e) => a + e.score, 0) / scored.length : null;
}

/** Success rate of the episodes no failure ended (null: every one failed). */
function successRate(episodes: readonly Episode[]): number | null {
  const scored = episodes.filter((e) => !isFailed(e));
  return scored.length ? scored.filter((e) => e.success).length / scored.length : null;
}
const rolloutTokensPerSecond = (s: RolloutStats) => (s.promptTokens + s.generatedTokens) / Math.max(1e-9, s.policySeconds);

export function countModes(modes: readonly Mode[]): Record<Mode, number> {
  const out: Record<Mode, number> = { plain: 0, 'tips-on-policy': 0, 'tips-off-policy': 0 };
  for (const m of modes) out[m]++;
  return out;
}

/**
 * Mean rollout score per mode that ran this iteration: the first thing to look at when asking whether
 * the tips help the rollouts they are shown to (groups differ by task, so compare over many iterations).
 */
export function scoreByMode(
  episodes: readonly Pick<Episode, 'score' | 'outcome'>[],
  modes: readonly Mode[],
): Partial<Record<Mode, number>> {
  const sum: Partial<Record<Mode, [number, number]>> = {};
  episodes.forEach((e, i) => {
    if (isFailed(e)) return;
    const acc = (sum[modes[i]] ??= [0, 0]);
    acc[0] += e.score;
    acc[1]++;
  });
  return Object.fromEntries(Object.entries(sum).map(([m, [total, n]]) => [m, total / n]));
}

function describeScores(byMode: Partial<Record<Mode, number>>): string {
  const entries = Object.entries(byMode) as [Mode, number][];
  return entries.length > 1 ? ` (${entries.map(([m, v]) => `${MODE_SHORT[m]} ${v.toFixed(1)}`).join(', ')})` : '';
}

const MODE_SHORT: Record<Mode, string> = { plain: 'plain', 'tips-on-policy': 'tips/on', 'tips-off-policy': 'tips/off' };
/** One mode for the batch, the mode of each group, or (modes drawn per rollout) how many rollouts ran in each. */
export function describeModes(modes: readonly Mode[], groupSize: number, perRollout: boolean): string {
  const distinct = [...new Set(modes)];
  if (distinct.length === 1) return MODE_SHORT[distinct[0]];
  if (!perRollout)
    return modes
      .filter((_, i) => i % groupSize === 0)
      .map((m) => MODE_SHORT[m])
      .join(',');
  return Object.entries(countModes(modes))
    .filter(([, n]) => n > 0)
    .map(([m, n]) => `${MODE_SHORT[m as Mode]} ${n}`)
    .join(', ');
}

/** Of the steps whose tips named an action, the share whose action was one of them (null: no such step). */
export function tipFollowRate(episodes: readonly Episode[]): number | null {
  let named = 0;
  let followed = 0;
  for (const e of episodes) {
    for (const s of e.steps) {
      const f = followedTip(s.action, s.tips ?? []);
      if (f === null) continue;
      named++;
      if (f) followed++;
    }
  }
  return named ? followed / named : null;
}

/**
 * Mean −log π of the sampled action tokens at the sampling temperature: a Monte Carlo estimate of the
 * policy's entropy per token (with constrained decoding, of the distribution before the constraint).
 */
export function sampledTokenEntropy(episodes: readonly Episode[]): number | null {
  let sum = 0;
  let n = 0;
  for (const e of episodes) {
    for (const s of e.steps) {
      for (const lp of s.logprobs) {
        sum -= lp;
        n++;
      }
    }
  }
  return n ? sum / n : null;
}

/** Wall time of an evaluation, per episode and per step: what a real model costs on this machine. */
export function timing(s: EvalResult['summary']): string {
  return `${s.episodes} episodes, ${s.env_steps} steps in ${s.seconds.toFixed(1)} s: ${(s.seconds / Math.max(1, s.episodes)).toFixed(2)} s per episode, ${(s.seconds / Math.max(1, s.env_steps)).toFixed(3)} s per step`;
}
