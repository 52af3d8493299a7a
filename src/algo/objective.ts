/**
 * The clipped policy objective of EMPO² (docs/EMPO2.md §8), as a loss to minimise:
 *
 *   L = − mean_tokens[ min(ρ·A, clip(ρ, 1−ε_low, 1+ε_high)·A) · m ] + β·KL(πθ ‖ πref)
 *
 * ρ = exp(log πθ − log πold) per token. In the off-policy mode log πθ is scored on the tip-free
 * prompt and log πold is the sampler's, with tips: off-policy.ts (offPolicyRatio) pairs the two;
 * this function only sees the two numbers. Dual clip (c): for A < 0 the
 * objective is bounded below by c·A. Token-level low-probability masking drops tokens whose
 * current probability is below δ; the sequence-level variant is applied by the caller through m.
 */
import * as tf from '@tensorflow/tfjs';
import type { ObjectiveConfig } from './objective-config.ts';

export type { ObjectiveConfig };

export interface ObjectiveInputs {
  /** log πθ(a_t | ...) for every response token, [n]; carries the gradient. */
  logp: tf.Tensor1D;
  /** log πold(a_t | ...), [n]. */
  oldLogp: tf.Tensor1D;
  /** A for every token, [n]. */
  advantages: tf.Tensor1D;
  /** 1 for tokens in the loss, 0 for padding and masked tokens, [n]. */
  mask: tf.Tensor1D;
  /** log πref(a_t | ...), [n]; needed only when klCoef > 0. */
  refLogp?: tf.Tensor1D;
  /** 1 where the δ mask applies, [n] (EMPO² masks only off-policy tokens); absent: everywhere. */
  lowProbScope?: tf.Tensor1D;
}

export interface ObjectiveTerms {
  /** Sum over tokens of the per-token loss; divide by the token count of the whole minibatch. */
  lossSum: tf.Scalar;
  /** Tokens that counted (after masking). */
  tokens: tf.Scalar;
  /** Tokens whose ratio was clipped. */
  clipped: tf.Scalar;
  /** Sum over counted tokens of ρ. */
  ratioSum: tf.Scalar;
  /** Sum over counted tokens of the KL estimate. */
  klSum: tf.Scalar;
}

export function objectiveTerms(x: ObjectiveInputs, cfg: ObjectiveConfig): ObjectiveTerms {
  const logp = x.logp;
  let mask: tf.Tensor = x.mask;
  if (cfg.lowProbDelta !== null) {
    // A comparison has zero gradient, so the mask itself is not trained.
    let keep: tf.Tensor = logp.greaterEqual(Math.log(cfg.lowProbDelta)).toFloat();
    if (x.lowProbScope) keep = tf.maximum(keep, x.lowProbScope.equal(0).toFloat());
    mask = mask.mul(keep);
  }
  const ratio = logp.sub(x.oldLogp).exp(); // ρ
  const unclipped = ratio.mul(x.advantages);
  const clippedRatio = ratio.clipByValue(1 - cfg.clipLow, 1 + cfg.clipHigh);
  let objective = tf.minimum(unclipped, clippedRatio.mul(x.advantages));
  if (cfg.dualClip !== null) {
    const lowerBound = x.advantages.mul(cfg.dualClip);
    objective = tf.where(x.advantages.less(0), tf.maximum(objective, lowerBound), objective);
  }
  let perToken = objective.neg();
  let klSum: tf.Scalar = tf.scalar(0);
  if (cfg.klCoef > 0) {
    if (!x.refLogp) throw new Error('objective: klCoef > 0 needs reference log-probs');
    const diff = x.refLogp.sub(logp);
    const kl = diff.exp().sub(diff).sub(1); // k3 estimator of KL(πθ ‖ πref)
    perToken = perToken.add(kl.mul(cfg.klCoef));
    klSum = kl.mul(mask).sum();
  }
  const wasClipped = tf.logicalOr(ratio.less(1 - cfg.clipLow), ratio.greater(1 + cfg.clipHigh)).toFloat();
  return {
    lossSum: perToken.mul(mask).sum(),
    tokens: mask.sum(),
    clipped: wasClipped.mul(mask).sum(),
    ratioSum: ratio.mul(mask).sum(),
    klSum,
  };
}

/**
 * Sequence-level low-probability mask (the reference's variant): a whole response is dropped when
 * its minimum old log-prob is below the threshold (−5.0 in the reference).
 */
export function sequenceLowProbKeep(oldLogprobs: readonly number[], minLogprob: number): boolean {
  return oldLogprobs.every((lp) => lp >= minLogprob);
}
