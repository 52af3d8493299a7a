import { describe, expect, it } from 'vitest';
import { decoupledOffPolicy, offPolicyRatio } from './off-policy.ts';

describe('decoupledOffPolicy (w = min(cap, πold(a|s,u) / πold(a|s,u,tips)))', () => {
  // Token 0: tips made it likely (0.8 with tips, 0.1 without): w = 0.125.
  // Token 1: tips talked the policy out of it (0.2 with tips, 0.6 without): w = 3, capped at 1.
  const withTips = [Math.log(0.8), Math.log(0.2)];
  const tipFree = [Math.log(0.1), Math.log(0.6)];

  it('weights the advantage by the truncated importance weight and takes the tip-free log-probs as πold', () => {
    const d = decoupledOffPolicy([2, 2], tipFree, withTips, 1);
    expect(d.weights[0]).toBeCloseTo(0.125, 12);
    expect(d.weights[1]).toBe(1);
    expect(d.advantages[0]).toBeCloseTo(0.25, 12);
    expect(d.advantages[1]).toBe(2);
    expect(d.oldLogprobs).toEqual(tipFree);
  });

  it('a larger cap keeps more of the weight; the sign of A is kept (negative advantages push down alike)', () => {
    const d = decoupledOffPolicy([-1, -1], tipFree, withTips, 5);
    expect(d.weights[1]).toBeCloseTo(3, 12);
    expect(d.advantages[0]).toBeCloseTo(-0.125, 12);
    expect(d.advantages[1]).toBeCloseTo(-3, 12);
  });

  it('cap null: no importance weight (w = 1)', () => {
    expect(decoupledOffPolicy([0.5, 0.5], tipFree, withTips, null)).toEqual({
      advantages: [0.5, 0.5],
      oldLogprobs: tipFree,
      weights: [1, 1],
    });
  });

  it('refuses log-prob lists of different lengths', () => {
    expect(() => decoupledOffPolicy([1, 1], [0], [0, 0], 1)).toThrow(/1 tip-free log-probs for 2 sampled ones/);
    expect(() => decoupledOffPolicy([1], [0, 0], [0, 0], 1)).toThrow(/1 advantages for 2 sampled log-probs/);
  });

  it("per-token advantages (a packed episode whose steps differ, GiGPO) are each weighted by their own token's w", () => {
    const d = decoupledOffPolicy([2, -4], tipFree, withTips, 1);
    expect(d.advantages[0]).toBeCloseTo(0.25, 12);
    expect(d.advantages[1]).toBe(-4);
  });
});

describe("offPolicyRatio: where ρ's numerator πθ(a|s,u) meets its denominator", () => {
  // The sampler with tips gave the two tokens 0.8 and 0.2; the tip-free policy before the update 0.1
  // and 0.6; the policy being trained, scored on the tip-free prompt, gives them 0.4 and 0.3.
  const withTips = [Math.log(0.8), Math.log(0.2)];
  const tipFree = [Math.log(0.1), Math.log(0.6)];
  const current = [Math.log(0.4), Math.log(0.3)];
  const rho = (oldLogprobs: number[]) => current.map((lp, t) => Math.exp(lp - oldLogprobs[t]));

  it('paper: ρ = πθ(a|s,u) / πθold(a|s,u,tips) = 0.4/0.8 and 0.3/0.2; A as it is, no weight', () => {
    const terms = offPolicyRatio('paper', { advantages: [2, -1], sampledWithTips: withTips, tipFreeBeforeUpdate: null }, 1);
    expect(rho(terms.oldLogprobs)[0]).toBeCloseTo(0.5, 12);
    expect(rho(terms.oldLogprobs)[1]).toBeCloseTo(1.5, 12);
    expect(terms.advantages).toEqual([2, -1]);
    expect(terms.weights).toBeNull();
  });

  it("the paper's ratio ignores tip-free log-probs, should they be given", () => {
    const terms = offPolicyRatio('paper', { advantages: [2, -1], sampledWithTips: withTips, tipFreeBeforeUpdate: tipFree }, 1);
    expect(terms.oldLogprobs).toEqual(withTips);
  });

  it('decoupled: ρ = πθ(a|s,u) / πθold(a|s,u) = 0.4/0.1 and 0.3/0.6; A weighted by w = min(1, 0.1/0.8) and min(1, 0.6/0.2)', () => {
    const terms = offPolicyRatio('decoupled', { advantages: [2, -1], sampledWithTips: withTips, tipFreeBeforeUpdate: tipFree }, 1);
    expect(rho(terms.oldLogprobs)[0]).toBeCloseTo(4, 12);
    expect(rho(terms.oldLogprobs)[1]).toBeCloseTo(0.5, 12);
    expect(terms.weights![0]).toBeCloseTo(0.125, 12);
    expect(terms.weights![1]).toBe(1);
    expect(terms.advantages[0]).toBeCloseTo(0.25, 12);
    expect(terms.advantages[1]).toBe(-1);
  });

  it('refuses a decoupled ratio without the tip-free log-probs, and lists of different lengths', () => {
    expect(() => offPolicyRatio('decoupled', { advantages: [1, 1], sampledWithTips: withTips, tipFreeBeforeUpdate: null }, 1)).toThrow(
      /needs the tip-free log-probs/,
    );
    expect(() => offPolicyRatio('paper', { advantages: [1], sampledWithTips: withTips, tipFreeBeforeUpdate: null }, 1)).toThrow(
      /1 advantages for 2 sampled log-probs/,
    );
  });
});
