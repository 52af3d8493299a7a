/**
 * One multi-step GRPO update, top to bottom (spec §7–§8):
 *   1. return of each rollout = sum of its step rewards;
 *   2. advantage = return normalised within its group (same task and variation);
 *   3. every action token of every step gets its rollout's advantage;
 *   4. clipped-ratio objective, token mean, over `minibatches` optimiser steps for `epochs` passes.
 */
import { groupNormalisedAdvantages, rolloutReturn } from '../algo/advantage.ts';
import { sequenceLowProbKeep, type ObjectiveConfig } from '../algo/objective.ts';
import type { PolicyEngine, TrainSequence, TrainStats } from '../policy/types.ts';
import type { Rng } from '../util/rng.ts';
import type { Episode } from './rollout.ts';

export interface GrpoSettings {
  objective: ObjectiveConfig;
  /** Reference's sequence-level mask: drop responses whose minimum old log-prob is below this. */
  seqMinLogprob: number | null;
  minibatches: number;
  epochs: number;
  rewardScale: number;
  skipZeroAdvantage: boolean;
  temperature: number;
  lr?: number;
}

export interface UpdateStats extends TrainStats {
  sequences: number;
  optimizerSteps: number;
  meanReturn: number;
  droppedLowProb: number;
}

export async function grpoUpdate(engine: PolicyEngine, episodes: Episode[], s: GrpoSettings, rng: Rng): Promise<UpdateStats> {
  const returns = episodes.map((e) => rolloutReturn(e.steps.map((st) => st.reward * s.rewardScale)));
  const advantages = groupNormalisedAdvantages(returns, episodes.map((e) => e.group));

  let droppedLowProb = 0;
  const samples: TrainSequence[] = [];
  episodes.forEach((episode, i) => {
    const A = advantages[i];
    if (s.skipZeroAdvantage && s.objective.klCoef === 0 && Math.abs(A) < 1e-9) return;
    for (const step of episode.steps) {
      if (step.response.length === 0) continue;
      const keep = s.seqMinLogprob === null || sequenceLowProbKeep(step.logprobs, s.seqMinLogprob);
      if (!keep) droppedLowProb++;
      samples.push({
        prompt: step.prompt,
        response: step.response,
        advantages: step.response.map(() => A),
        oldLogprobs: step.logprobs,
        mask: step.response.map(() => (keep ? 1 : 0)),
      });
    }
  });

  const totals = { loss: 0, tokens: 0, clipFraction: 0, meanRatio: 0, kl: 0, gradNorm: 0 };
  let optimizerSteps = 0;
  for (let epoch = 0; epoch < s.epochs && samples.length > 0; epoch++) {
    rng.shuffle(samples);
    const size = Math.ceil(samples.length / s.minibatches);
    for (let start = 0; start < samples.length; start += size) {
      const stats = await engine.trainStep(samples.slice(start, start + size), s.objective, s.temperature, s.lr);
      optimizerSteps++;
      totals.loss += stats.loss;
      totals.tokens += stats.tokens;
      totals.clipFraction += stats.clipFraction;
      totals.meanRatio += stats.meanRatio;
      totals.kl += stats.kl;
      totals.gradNorm += stats.gradNorm;
    }
  }
  const n = Math.max(1, optimizerSteps);
  return {
    loss: totals.loss / n,
    tokens: totals.tokens,
    clipFraction: totals.clipFraction / n,
    meanRatio: optimizerSteps ? totals.meanRatio / n : 1,
    kl: totals.kl / n,
    gradNorm: totals.gradNorm / n,
    sequences: samples.length,
    optimizerSteps,
    meanReturn: returns.reduce((a, b) => a + b, 0) / Math.max(1, returns.length),
    droppedLowProb,
  };
}
