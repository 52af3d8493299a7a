/**
 * Implicit Q-Learning (Kostrikov, Nair and Levine, ICLR 2022), the offline critic of Retrospex
 * (docs/BASELINES.md). From logged transitions (s, a, r, s', done) alone, without ever asking which
 * action maximises Q, it learns
 *
 *   V(s)    by expectile regression towards the target critic: L_V = E[ |τ − 1(u < 0)| · u² ],  u = Q̄(s, a) − V(s)
 *   Q(s, a) by TD regression:                                     L_Q = E[ (Q(s, a) − (r + γ·(1 − done)·V(s')))² ]
 *   Q̄       by Polyak averaging after every update:               Q̄ ← (1 − α)·Q̄ + α·Q
 *
 * With τ > 0.5, V(s) is an upper expectile of Q over the actions the data took in s, so Q learns the
 * value of the best logged behaviour rather than the average one, without querying actions the data
 * never tried. With twin critics (Q₁, Q₂), Q̄ is the smaller of the two target heads, and L_Q the mean
 * of the two heads' squared errors.
 *
 * Settings are those of Yufei-Xiang/Retrospex at commit 6d169a4397eb46581564e315f691541536a9eaed
 * (IQL/src/iql.py, and the arguments of retrospect_*.py / dynamic_action_scoring_*.py): τ 0.7, γ 0.99,
 * α 0.005, Adam with learning rate 1e-4, batches of 128. Their `ImplicitQLearning_webshop` (the
 * (task, observation) critic, also used for ALFWorld) has twin heads but regresses min(Q₁, Q₂) on the
 * target; here each head is regressed, as in the IQL code theirs derives from (gwthomas/IQL-PyTorch),
 * so that both heads learn.
 *
 * Pure functions of tensors: the networks and the optimiser steps are in src/retrospex/critic.ts.
 */
import * as tf from '@tensorflow/tfjs';

export interface IqlSettings {
  /** τ: the expectile V regresses to (0.5 is the mean; towards 1, the maximum over logged actions). */
  expectile: number;
  /** γ. */
  discount: number;
  /** α: the target critic moves this share of the way to the online one after every update. */
  polyak: number;
}

/** The authors' values (retrospect_scienceworld.py: --tau 0.7 --discount 0.99 --alpha 0.005). */
export const RETROSPEX_IQL: IqlSettings = { expectile: 0.7, discount: 0.99, polyak: 0.005 };

export function checkIqlSettings(s: IqlSettings): void {
  if (!(s.expectile > 0 && s.expectile < 1)) throw new RangeError(`IQL expectile τ must be in (0, 1), got ${s.expectile}`);
  if (!(s.discount >= 0 && s.discount <= 1)) throw new RangeError(`IQL discount γ must be in [0, 1], got ${s.discount}`);
  if (!(s.polyak > 0 && s.polyak <= 1)) throw new RangeError(`IQL Polyak rate α must be in (0, 1], got ${s.polyak}`);
}

/** mean( |τ − 1(u < 0)| · u² ): the asymmetric squared loss whose minimiser over a constant is the τ-expectile. */
export function expectileLoss(u: tf.Tensor1D, tau: number): tf.Scalar {
  return tf.tidy(() => {
    // 1(u < 0) as step(−u): tfjs's step has a (zero) gradient, its comparisons have none.
    const weight = tf.abs(tf.sub(tf.scalar(tau), tf.step(tf.neg(u))));
    return tf.mean(tf.mul(weight, tf.square(u))) as tf.Scalar;
  });
}

/** L_V with u = Q̄(s, a) − V(s); `targetQ` carries no gradient. */
export function valueLoss(targetQ: tf.Tensor1D, v: tf.Tensor1D, tau: number): tf.Scalar {
  return tf.tidy(() => expectileLoss(tf.sub(targetQ, v), tau));
}

/** r + γ·(1 − done)·V(s'): `done` is 1 for the last step of an episode, whose successor is not bootstrapped. */
export function tdTargets(rewards: tf.Tensor1D, done: tf.Tensor1D, nextV: tf.Tensor1D, discount: number): tf.Tensor1D {
  return tf.tidy(() => tf.add(rewards, tf.mul(tf.scalar(discount), tf.mul(tf.sub(tf.scalar(1), done), nextV))) as tf.Tensor1D);
}

/** L_Q: the mean over heads of each head's mean squared error to the TD targets. */
export function qLoss(heads: readonly tf.Tensor1D[], targets: tf.Tensor1D): tf.Scalar {
  if (heads.length === 0) throw new RangeError('qLoss: no Q heads');
  return tf.tidy(() => tf.div(tf.addN(heads.map((q) => tf.mean(tf.square(tf.sub(q, targets))))), heads.length) as tf.Scalar);
}

/** (1 − α)·target + α·online, the target critic's new weights. */
export function polyakAverage(target: tf.Tensor, online: tf.Tensor, alpha: number): tf.Tensor {
  return tf.tidy(() => tf.add(tf.mul(target, 1 - alpha), tf.mul(online, alpha)));
}
