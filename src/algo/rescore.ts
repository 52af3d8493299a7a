/**
 * Retrospex's dynamic action rescoring (Xiang et al., EMNLP 2024, arXiv 2505.11807): the frozen LLM
 * proposes candidate actions with their likelihoods, an offline critic gives each its Q, and the
 * action taken is the best of
 *
 *   S(a) = λ_t · p̂(a) + (1 − λ_t) · q̂(a),   λ_t = max(b, d^t)
 *
 * where p̂ and q̂ are the likelihoods and Q values min-max normalised over the candidates of the step
 * and t counts the steps already taken in the episode (0 for the first action). The weight of the
 * critic, 1 − λ_t, grows with t until λ_t reaches its floor b: early steps follow the LLM, later ones
 * (where the LLM, with a long history, has gone wrong more often) lean on experience.
 *
 * Ported from Yufei-Xiang/Retrospex at commit 6d169a4397eb46581564e315f691541536a9eaed:
 * `decide_action` and `normalize` in ScienceWorld/, alfworld/ and webshop/dynamic_action_scoring_*.py,
 * `cal_prob` (the likelihood: exp of minus the mean token negative log-likelihood of the action).
 * Where all candidates tie, the ALFWorld and WebShop `normalize` give each 0.5 (the ScienceWorld copy
 * divides by zero); that is followed here. Ties in S go to the first candidate, as `list.index(max)`.
 */

/** d and b of λ_t = max(b, d^t). */
export interface RescoreSchedule {
  /** d: the LLM's weight shrinks by this factor per step taken. */
  decay: number;
  /** b: the LLM's weight never goes below this. */
  floor: number;
}

/** The authors' ScienceWorld setting (`--discount_prob 0.95 --limit_prob 0.25`); ALFWorld used 0.95/0.6, WebShop 0.9/0.5. */
export const SCIENCEWORLD_SCHEDULE: RescoreSchedule = { decay: 0.95, floor: 0.25 };

export function checkSchedule(s: RescoreSchedule): void {
  if (!(s.decay > 0 && s.decay <= 1)) throw new RangeError(`rescoring decay d must be in (0, 1], got ${s.decay}`);
  if (!(s.floor >= 0 && s.floor <= 1)) throw new RangeError(`rescoring floor b must be in [0, 1], got ${s.floor}`);
}

/** λ_t = max(b, d^t): the weight of the LLM's likelihood after `stepsTaken` steps. */
export function likelihoodWeight(stepsTaken: number, s: RescoreSchedule): number {
  if (!Number.isInteger(stepsTaken) || stepsTaken < 0)
    throw new RangeError(`steps taken must be a non-negative integer, got ${stepsTaken}`);
  return Math.max(s.floor, s.decay ** stepsTaken);
}

/** (x − min) / (max − min) over the list; every value 0.5 when they are all equal. */
export function minMaxNormalise(values: readonly number[]): number[] {
  if (values.some((v) => !Number.isFinite(v))) throw new RangeError(`cannot normalise non-finite values: ${values.join(', ')}`);
  const lo = Math.min(...values);
  const hi = Math.max(...values);
  return hi === lo ? values.map(() => 0.5) : values.map((v) => (v - lo) / (hi - lo));
}

/** exp(mean log p) of an action's tokens: the per-token geometric mean probability, so long actions are not penalised for their length. */
export function actionLikelihood(tokenLogprobs: readonly number[]): number {
  if (tokenLogprobs.length === 0) throw new RangeError('an action with no tokens has no likelihood');
  return Math.exp(tokenLogprobs.reduce((a, b) => a + b, 0) / tokenLogprobs.length);
}

export interface Rescored {
  /** λ_t used. */
  weight: number;
  /** S(a) of each candidate, in the order given. */
  scores: number[];
  /** Index of the candidate taken: the first with the highest S. */
  chosen: number;
}

/** S(a) for every candidate of one step and the one taken; `likelihoods` and `qValues` are per candidate, in the same order. */
export function rescore(likelihoods: readonly number[], qValues: readonly number[], stepsTaken: number, s: RescoreSchedule): Rescored {
  if (likelihoods.length === 0) throw new RangeError('rescore: no candidates');
  if (likelihoods.length !== qValues.length)
    throw new RangeError(`rescore: ${likelihoods.length} likelihoods but ${qValues.length} Q values`);
  const weight = likelihoodWeight(stepsTaken, s);
  const p = minMaxNormalise(likelihoods);
  const q = minMaxNormalise(qValues);
  const scores = p.map((pi, i) => weight * pi + (1 - weight) * q[i]);
  let chosen = 0;
  for (let i = 1; i < scores.length; i++) if (scores[i] > scores[chosen]) chosen = i;
  return { weight, scores, chosen };
}
