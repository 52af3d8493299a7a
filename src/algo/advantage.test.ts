import { describe, expect, it } from 'vitest';
import { ADVANTAGE_EPS, groupNormalisedAdvantages, groupStats, rolloutReturn } from './advantage.ts';

// Tolerance: 1e-12 absolute; everything here is double-precision arithmetic on small numbers.
const close = (actual: number[], expected: number[]) => {
  expect(actual).toHaveLength(expected.length);
  actual.forEach((a, i) => expect(a).toBeCloseTo(expected[i], 12));
};

describe('groupNormalisedAdvantages (docs/EMPO2.md §7: A = (R − mean) / (std + 1e-6), unbiased std)', () => {
  it('group of three returns [1, 2, 3]: mean 2, unbiased std 1, so A = [-1, 0, 1] / (1 + 1e-6)', () => {
    // variance = ((1-2)² + 0 + (3-2)²) / (3 - 1) = 1, std = 1.
    close(groupNormalisedAdvantages([1, 2, 3], [0, 0, 0]), [-1 / (1 + ADVANTAGE_EPS), 0, 1 / (1 + ADVANTAGE_EPS)]);
    expect(ADVANTAGE_EPS).toBe(1e-6);
  });

  it('a group of one keeps its return: mean 0, std 1, so A = R / (1 + 1e-6)', () => {
    close(groupNormalisedAdvantages([5], ['solo']), [5 / (1 + ADVANTAGE_EPS)]);
    close(groupNormalisedAdvantages([-0.25, 7], ['a', 'b']), [-0.25 / (1 + ADVANTAGE_EPS), 7 / (1 + ADVANTAGE_EPS)]);
  });

  it('two interleaved groups are normalised separately and results stay in input order', () => {
    // Group "x": returns [0, 4] -> mean 2, variance (4 + 4) / 1 = 8, std 2√2 -> A = ∓2 / (2√2 + ε) = ∓1/√2 (≈ 0.7071).
    // Group "y": returns [10, 20, 30] -> mean 20, variance (100 + 0 + 100) / 2 = 100, std 10 -> A = [-1, 0, 1] · 10/(10 + ε).
    const returns = [0, 10, 4, 20, 30];
    const groups = ['x', 'y', 'x', 'y', 'y'];
    const sx = 2 * Math.SQRT2 + ADVANTAGE_EPS;
    const sy = 10 + ADVANTAGE_EPS;
    close(groupNormalisedAdvantages(returns, groups), [-2 / sx, -10 / sy, 2 / sx, 0, 10 / sy]);
  });

  it('a group whose returns are all equal gets zero advantages (std 0, the 1e-6 avoids 0/0)', () => {
    const a = groupNormalisedAdvantages([3, 3, 3, 3], [1, 1, 1, 1]);
    expect(a).toEqual([0, 0, 0, 0]);
  });

  it('numeric and string group ids are distinct keys as given', () => {
    // 1 and '1' are different Map keys: two groups of one each.
    close(groupNormalisedAdvantages([2, 4], [1, '1']), [2 / (1 + ADVANTAGE_EPS), 4 / (1 + ADVANTAGE_EPS)]);
  });

  it('refuses mismatched lengths with a message giving both counts', () => {
    expect(() => groupNormalisedAdvantages([1, 2], [0])).toThrow(/2 returns but 1 group ids/);
  });
});

describe('groupStats and rolloutReturn', () => {
  it('groupStats uses the n-1 denominator', () => {
    // [2, 4, 4, 4, 5, 5, 7, 9]: mean 5, sum of squared deviations 32, unbiased variance 32/7.
    const { mean, std } = groupStats([2, 4, 4, 4, 5, 5, 7, 9]);
    expect(mean).toBeCloseTo(5, 12);
    expect(std).toBeCloseTo(Math.sqrt(32 / 7), 12);
  });

  it('rolloutReturn is the plain sum of step rewards (no discount)', () => {
    expect(rolloutReturn([20, 30, 0, 50])).toBe(100);
    expect(rolloutReturn([])).toBe(0);
  });
});
