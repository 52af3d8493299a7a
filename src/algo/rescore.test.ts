import { describe, expect, it } from 'vitest';
import { actionLikelihood, likelihoodWeight, minMaxNormalise, rescore, SCIENCEWORLD_SCHEDULE } from './rescore.ts';

const close = (actual: number[], expected: number[], digits = 12) => {
  expect(actual).toHaveLength(expected.length);
  actual.forEach((a, i) => expect(a, `index ${i}`).toBeCloseTo(expected[i], digits));
};

describe('likelihoodWeight: λ_t = max(b, d^t)', () => {
  it('starts at 1, decays by d per step taken, and stops at the floor b (d 0.95, b 0.25)', () => {
    expect(likelihoodWeight(0, SCIENCEWORLD_SCHEDULE)).toBe(1);
    expect(likelihoodWeight(1, SCIENCEWORLD_SCHEDULE)).toBeCloseTo(0.95, 12);
    // 0.95^10 = 0.598736939...
    expect(likelihoodWeight(10, SCIENCEWORLD_SCHEDULE)).toBeCloseTo(0.5987369392383789, 12);
    // 0.95^27 = 0.2503 > 0.25, 0.95^28 = 0.2378 < 0.25: the floor from step 28 on.
    expect(likelihoodWeight(27, SCIENCEWORLD_SCHEDULE)).toBeCloseTo(0.250344, 6);
    expect(likelihoodWeight(28, SCIENCEWORLD_SCHEDULE)).toBe(0.25);
    expect(likelihoodWeight(100, SCIENCEWORLD_SCHEDULE)).toBe(0.25);
  });

  it('refuses a fractional or negative step count', () => {
    expect(() => likelihoodWeight(-1, SCIENCEWORLD_SCHEDULE)).toThrow(/non-negative integer/);
    expect(() => likelihoodWeight(1.5, SCIENCEWORLD_SCHEDULE)).toThrow(/non-negative integer/);
  });
});

describe('minMaxNormalise', () => {
  it('maps the smallest to 0 and the largest to 1, linearly between', () => {
    close(minMaxNormalise([2, 4, 3]), [0, 1, 0.5]);
    close(minMaxNormalise([-1, 1]), [0, 1]);
  });

  it('gives 0.5 to every value when they all tie (ALFWorld/WebShop `normalize`)', () => {
    expect(minMaxNormalise([0.3, 0.3, 0.3])).toEqual([0.5, 0.5, 0.5]);
    expect(minMaxNormalise([7])).toEqual([0.5]);
  });

  it('refuses NaN and infinities rather than ranking them', () => {
    expect(() => minMaxNormalise([1, Number.NaN])).toThrow(/non-finite/);
    expect(() => minMaxNormalise([1, Infinity])).toThrow(/non-finite/);
  });
});

describe("actionLikelihood: exp(mean token log-prob), as the authors' cal_prob = exp(−loss)", () => {
  it('is the geometric mean of the token probabilities', () => {
    // Tokens with p = 0.5 and 0.125: exp((ln 0.5 + ln 0.125) / 2) = sqrt(0.0625) = 0.25.
    expect(actionLikelihood([Math.log(0.5), Math.log(0.125)])).toBeCloseTo(0.25, 12);
    expect(actionLikelihood([Math.log(0.9)])).toBeCloseTo(0.9, 12);
    expect(() => actionLikelihood([])).toThrow(/no tokens/);
  });
});

describe('rescore: S = λ·p̂ + (1 − λ)·q̂, first best taken', () => {
  // Three candidates: the LLM prefers the first, the critic the third.
  const likelihoods = [0.6, 0.3, 0.2];
  const qValues = [0.1, 0.4, 0.9];
  // p̂ = [(0.6−0.2)/0.4, (0.3−0.2)/0.4, 0] = [1, 0.25, 0]; q̂ = [0, 0.3/0.8, 1] = [0, 0.375, 1].

  it('step 0 (λ = 1): the LLM alone decides', () => {
    const r = rescore(likelihoods, qValues, 0, SCIENCEWORLD_SCHEDULE);
    expect(r.weight).toBe(1);
    close(r.scores, [1, 0.25, 0]);
    expect(r.chosen).toBe(0);
  });

  it('step 10 (λ = 0.95^10 = 0.598737): still the LLM, by a smaller margin', () => {
    const r = rescore(likelihoods, qValues, 10, SCIENCEWORLD_SCHEDULE);
    const lam = 0.5987369392383789;
    // S = [λ, 0.25λ + 0.375(1−λ), 1−λ] = [0.598737, 0.149684 + 0.150474, 0.401263] = [0.598737, 0.300158, 0.401263].
    close(r.scores, [lam, 0.25 * lam + 0.375 * (1 - lam), 1 - lam]);
    close(r.scores, [0.598737, 0.300158, 0.401263], 6);
    expect(r.chosen).toBe(0);
  });

  it('step 30 (λ = b = 0.25): the critic overrules the LLM', () => {
    const r = rescore(likelihoods, qValues, 30, SCIENCEWORLD_SCHEDULE);
    // S = [0.25, 0.0625 + 0.28125, 0.75] = [0.25, 0.34375, 0.75].
    close(r.scores, [0.25, 0.34375, 0.75]);
    expect(r.chosen).toBe(2);
  });

  it('the step at which the critic takes over: λ·1 < (1 − λ)·1 once λ < 0.5, i.e. from step 14 (0.95^14 = 0.4877)', () => {
    expect(rescore(likelihoods, qValues, 13, SCIENCEWORLD_SCHEDULE).chosen).toBe(0); // λ = 0.5133
    expect(rescore(likelihoods, qValues, 14, SCIENCEWORLD_SCHEDULE).chosen).toBe(2); // λ = 0.4877
  });

  it('a tie in S goes to the first candidate, and equal Q values leave the choice to the LLM', () => {
    // p̂ = [0, 1], q̂ = [1, 0], λ = 0.5 (d = 0.5, t = 1): S = [0.5, 0.5].
    expect(rescore([0.1, 0.2], [3, 1], 1, { decay: 0.5, floor: 0 })).toEqual({ weight: 0.5, scores: [0.5, 0.5], chosen: 0 });
    // q̂ = [0.5, 0.5]: S = λ·p̂ + (1 − λ)/2, ordered as p̂.
    expect(rescore([0.1, 0.2], [1, 1], 40, SCIENCEWORLD_SCHEDULE).chosen).toBe(1);
  });

  it('one candidate is taken whatever its numbers', () => {
    expect(rescore([0.01], [-5], 3, SCIENCEWORLD_SCHEDULE).chosen).toBe(0);
  });

  it('refuses mismatched lists and an empty step', () => {
    expect(() => rescore([0.1], [1, 2], 0, SCIENCEWORLD_SCHEDULE)).toThrow(/1 likelihoods but 2 Q values/);
    expect(() => rescore([], [], 0, SCIENCEWORLD_SCHEDULE)).toThrow(/no candidates/);
  });
});
