/**
 * The off-policy ratio of EMPO² (docs/EMPO2.md §4): a rollout sampled with tips from memory is updated as if
 * the tips had never been shown.
 *
 *   ρ_t = πθ(a_t | s, u) / πθold(a_t | s, u, tips)
 *
 * Numerator: the policy being trained, on the prompt with the tip block cut out (the engine scores
 * it, with gradient, on the sample's prompt, which the caller made tip-free). Denominator: the
 * behaviour policy that sampled a_t, on the prompt with tips: the sampler's own log-probs. The
 * engine's objective takes ρ = exp(log πθ − log πold) from the pair (objective.ts), clips it, and
 * so pushes actions the tips made good into the tip-free policy (reward-guided self-distillation).
 * `offPolicyRatio` below is the one place where the two meet, for both variants.
 */
export type OffPolicyRatio = 'paper' | 'decoupled';

/** What the engine's clipped objective is fed for one off-policy sample, per response token. */
export interface OffPolicyTerms {
  /** A (paper) or w·A (decoupled). */
  advantages: number[];
  /** The denominator's log-probs: log πθold(a|s,u,tips) (paper) or log πθold(a|s,u) (decoupled). */
  oldLogprobs: number[];
  /** Decoupled only: the importance weight w of every token (null for the paper's ratio). */
  weights: number[] | null;
}

/**
 * Pairs the numerator πθ(a|s,u), scored by the engine on the sample's tip-free prompt, with its
 * denominator:
 *   paper:     ρ = πθ(a|s,u) / πθold(a|s,u,tips)            (the sampler's log-probs, as they are)
 *   decoupled: ρ = πθ(a|s,u) / πθold(a|s,u), A ← w·A,
 *              w = min(cap, πθold(a|s,u) / πθold(a|s,u,tips)) (not in the paper; see decoupledOffPolicy)
 * `sampledWithTips`: log πθold(a|s,u,tips) per token; `tipFreeBeforeUpdate`: log πθold(a|s,u), the
 * tip-free prompt scored with the weights before the update (needed by the decoupled variant only).
 */
export function offPolicyRatio(
  variant: OffPolicyRatio,
  sample: { advantages: readonly number[]; sampledWithTips: readonly number[]; tipFreeBeforeUpdate: readonly number[] | null },
  cap: number | null,
): OffPolicyTerms {
  if (sample.advantages.length !== sample.sampledWithTips.length)
    throw new Error(`offPolicyRatio: ${sample.advantages.length} advantages for ${sample.sampledWithTips.length} sampled log-probs`);
  if (variant === 'paper') return { advantages: [...sample.advantages], oldLogprobs: [...sample.sampledWithTips], weights: null };
  if (!sample.tipFreeBeforeUpdate) throw new Error('offPolicyRatio: the decoupled ratio needs the tip-free log-probs before the update');
  return decoupledOffPolicy(sample.advantages, sample.tipFreeBeforeUpdate, sample.sampledWithTips, cap);
}

/**
 * A decoupled off-policy update, not in the paper (experimental.off_policy_ratio: decoupled).
 *
 * The paper's ratio ρ = πθ(a|s,u) / πold(a|s,u,tips) is clipped to [1−ε_low, 1+ε_high], but it
 * does not start near 1: an action the tips made likely has ρ ≪ 1 before any step, an action the
 * tips talked the policy out of has ρ > 1. The clip then keeps the gradient of A > 0 only where
 * ρ < 1+ε_high and of A < 0 only where ρ > 1−ε_low, so tip-favoured actions can only be pushed up
 * and the policy's own choices only pushed down.
 *
 * Decoupled instead (the proximal policy apart from the behaviour policy, as in off-policy PPO):
 *   r = πθ(a|s,u) / πold(a|s,u)                  clipped as usual (a trust region around the
 *                                                  tip-free policy before the update)
 *   w = min(cap, πold(a|s,u) / πold(a|s,u,tips))  detached importance weight of the behaviour
 *                                                  policy (truncated as in V-trace; cap null: w = 1)
 *   objective = w · min(r·A, clip(r)·A)
 * Because w > 0 is a constant, this is the usual clipped objective with A replaced by w·A and πold
 * by the tip-free old policy, which is how it is fed to the engine.
 */

export interface DecoupledSample {
  /** Per response token: A·w. */
  advantages: number[];
  /** Per response token: log πold(a|s,u), the tip-free prompt scored before the update. */
  oldLogprobs: number[];
  /** Per response token: w. */
  weights: number[];
}

/** `advantages` per response token: one rollout's A on every token, or per step where steps differ (GiGPO). */
export function decoupledOffPolicy(
  advantages: readonly number[],
  tipFreeOldLogprobs: readonly number[],
  sampledLogprobs: readonly number[],
  cap: number | null,
): DecoupledSample {
  if (tipFreeOldLogprobs.length !== sampledLogprobs.length)
    throw new Error(`decoupledOffPolicy: ${tipFreeOldLogprobs.length} tip-free log-probs for ${sampledLogprobs.length} sampled ones`);
  if (advantages.length !== sampledLogprobs.length)
    throw new Error(`decoupledOffPolicy: ${advantages.length} advantages for ${sampledLogprobs.length} sampled log-probs`);
  const weights = tipFreeOldLogprobs.map((lp, t) => (cap === null ? 1 : Math.min(cap, Math.exp(lp - sampledLogprobs[t]))));
  return { advantages: weights.map((w, t) => w * advantages[t]), oldLogprobs: [...tipFreeOldLogprobs], weights };
}
