import { describe, expect, it } from 'vitest';
import { ADVANTAGE_EPS, groupNormalisedAdvantages, rolloutReturn } from './advantage.ts';
import { discountedReturns, gigpoAdvantages, summariseStepGroups, type GigpoRollout, type GigpoSettings } from './gigpo.ts';

const close = (actual: number[], expected: number[], digits = 12) => {
  expect(actual).toHaveLength(expected.length);
  actual.forEach((a, i) => expect(a, `index ${i}`).toBeCloseTo(expected[i], digits));
};

/**
 * One group of three rollouts of the same task. All three start in s0 (the same reset observation);
 * a and b both pass through s1; s2, s3, s4 are visited once.
 *   a: s0 → s1 → s2, rewards 0, 0, 1    R = 1
 *   b: s0 → s1 → s3, rewards 0, 0, 0    R = 0
 *   c: s0 → s4,      rewards 0, 0.5     R = 0.5
 */
const threeRollouts: GigpoRollout[] = [
  { group: 'g', anchors: ['s0', 's1', 's2'], rewards: [0, 0, 1] },
  { group: 'g', anchors: ['s0', 's1', 's3'], rewards: [0, 0, 0] },
  { group: 'g', anchors: ['s0', 's4'], rewards: [0, 0.5] },
];
const paperDefaults: GigpoSettings = { omega: 1, gamma: 0.5, mode: 'mean_std_norm' };

describe('discountedReturns (G_t = r_t + γ·G_{t+1})', () => {
  it('accumulates from the last step back', () => {
    // γ = 0.5: G2 = 1, G1 = 0 + 0.5·1 = 0.5, G0 = 0 + 0.5·0.5 = 0.25.
    close(discountedReturns([0, 0, 1], 0.5), [0.25, 0.5, 1]);
    // γ = 0.9: G1 = 2, G0 = 1 + 0.9·2 = 2.8.
    close(discountedReturns([1, 2], 0.9), [2.8, 2]);
    expect(discountedReturns([], 0.95)).toEqual([]);
  });
});

describe('gigpoAdvantages: A = A_E + ω·A_S (GiGPO Eq. 8)', () => {
  it('three rollouts, two sharing a state: the hand-computed case (mean_std_norm, γ = 0.5, ω = 1)', () => {
    const r = gigpoAdvantages(threeRollouts, paperDefaults);

    // Episode term, as GRPO: returns [1, 0, 0.5], mean 0.5, unbiased variance (0.25 + 0.25 + 0) / 2 = 0.25,
    // std 0.5, so A_E = [0.5, -0.5, 0] / (0.5 + 1e-6) ≈ [1, -1, 0].
    const sE = 0.5 + ADVANTAGE_EPS;
    close(r.episode, [0.5 / sE, -0.5 / sE, 0]);

    // Discounted step returns (γ = 0.5): a [0.25, 0.5, 1], b [0, 0, 0], c [0.25, 0.5].
    // Step group s0 = {a0: 0.25, b0: 0, c0: 0.25}: mean 1/6, deviations [1/12, -1/6, 1/12],
    //   unbiased variance (1/144 + 4/144 + 1/144) / 2 = 1/48, std 1/√48 ≈ 0.144338,
    //   A_S = [1/12, -1/6, 1/12] / (1/√48 + 1e-6) ≈ [0.57735, -1.15470, 0.57735] (= [1, -2, 1]/√3).
    const s0 = 1 / Math.sqrt(48) + ADVANTAGE_EPS;
    // Step group s1 = {a1: 0.5, b1: 0}: mean 0.25, std √((0.0625 + 0.0625) / 1) = √0.125 ≈ 0.353553,
    //   A_S = ±0.25 / (0.353553 + 1e-6) ≈ ±0.707107.
    const s1 = Math.sqrt(0.125) + ADVANTAGE_EPS;
    // s2, s3, s4 are groups of one: A_S = 0 (nothing to compare with).
    close(r.step[0], [1 / 12 / s0, 0.25 / s1, 0]);
    close(r.step[1], [-1 / 6 / s0, -0.25 / s1, 0]);
    close(r.step[2], [1 / 12 / s0, 0]);
    // The 1e-6 in the denominators moves these by under 1e-5.
    close(r.step[0], [1 / Math.sqrt(3), Math.SQRT1_2, 0], 4);
    close(r.step[1], [-2 / Math.sqrt(3), -Math.SQRT1_2, 0], 4);

    // Combined, ω = 1: a ≈ [1.57735, 1.70711, 1], b ≈ [-2.15470, -1.70711, -1], c ≈ [0.57735, 0].
    close(r.advantages[0], [0.5 / sE + 1 / 12 / s0, 0.5 / sE + 0.25 / s1, 0.5 / sE]);
    close(r.advantages[1], [-0.5 / sE - 1 / 6 / s0, -0.5 / sE - 0.25 / s1, -0.5 / sE]);
    close(r.advantages[2], [1 / 12 / s0, 0]);
    close(r.advantages[0], [1.57735, 1.70711, 1], 4);
    close(r.advantages[1], [-2.1547, -1.70711, -1], 4);
    close(r.advantages[2], [0.57735, 0], 4);

    // Five step groups: s0 (3 steps), s1 (2), s2, s3, s4 (1 each).
    expect([...r.stepGroupSizes].sort()).toEqual([1, 1, 1, 2, 3]);
  });

  it('mean_norm (F_norm = 1) only subtracts the group means, in both terms', () => {
    const r = gigpoAdvantages(threeRollouts, { ...paperDefaults, mode: 'mean_norm' });
    // A_E = R - 0.5 = [0.5, -0.5, 0]; s0: [0.25, 0, 0.25] - 1/6; s1: [0.5, 0] - 0.25.
    close(r.episode, [0.5, -0.5, 0]);
    close(r.advantages[0], [0.5 + 1 / 12, 0.5 + 0.25, 0.5]);
    close(r.advantages[1], [-0.5 - 1 / 6, -0.5 - 0.25, -0.5]);
    close(r.advantages[2], [1 / 12, 0]);
  });

  it('ω scales the step term only', () => {
    const one = gigpoAdvantages(threeRollouts, paperDefaults);
    const half = gigpoAdvantages(threeRollouts, { ...paperDefaults, omega: 0.5 });
    half.advantages.forEach((perStep, i) =>
      close(
        perStep,
        perStep.map((_, t) => one.episode[i] + 0.5 * one.step[i][t]),
      ),
    );
    close(half.advantages[1], [-1 - 0.5 * 1.1547, -1 - 0.5 * 0.707107, -1], 4);
  });

  it('γ sets what the step groups compare: γ = 0 only the immediate reward, γ = 1 the whole rest of the rollout', () => {
    // γ = 0: G_t = r_t. s0 = {0, 0, 0} and s1 = {0, 0}: uniform, so A_S = 0 everywhere and A = A_E.
    const myopic = gigpoAdvantages(threeRollouts, { ...paperDefaults, gamma: 0 });
    myopic.step.forEach((perStep) => expect(perStep.every((a) => a === 0)).toBe(true));
    myopic.advantages.forEach((perStep, i) => expect(perStep.every((a) => a === myopic.episode[i])).toBe(true));
    // γ = 1: G = a [1, 1, 1], b [0, 0, 0], c [0.5, 0.5]. s0 = {1, 0, 0.5}: mean 0.5, std 0.5 -> [1, -1, 0];
    // s1 = {1, 0}: mean 0.5, std √0.5 -> ±0.5/√0.5 = ±0.707107.
    const full = gigpoAdvantages(threeRollouts, { ...paperDefaults, gamma: 1 });
    const sd = Math.SQRT1_2 + ADVANTAGE_EPS;
    close(full.step[0], [0.5 / (0.5 + ADVANTAGE_EPS), 0.5 / sd, 0]);
    close(full.step[1], [-0.5 / (0.5 + ADVANTAGE_EPS), -0.5 / sd, 0]);
    close(full.step[2], [0, 0]);
  });

  it('all anchors distinct (only singleton step groups): A = A_E at every step, whatever ω and γ', () => {
    const rollouts: GigpoRollout[] = [
      { group: 0, anchors: ['a', 'b'], rewards: [0.2, 0.3] },
      { group: 0, anchors: ['c'], rewards: [0] },
    ];
    const r = gigpoAdvantages(rollouts, { omega: 3, gamma: 0.9, mode: 'mean_std_norm' });
    const grpo = groupNormalisedAdvantages([0.5, 0], [0, 0]);
    expect(r.step).toEqual([[0, 0], [0]]);
    expect(r.advantages).toEqual([[grpo[0], grpo[0]], [grpo[1]]]);
    expect(r.stepGroupSizes).toEqual([1, 1, 1]);
  });

  it('an episode group of one: A_E = R / (1 + 1e-6) (mean 0, std 1, as GRPO) and its steps are singletons', () => {
    const r = gigpoAdvantages([{ group: 'solo', anchors: ['x', 'y'], rewards: [0.5, 0.25] }], paperDefaults);
    close(r.advantages[0], [0.75 / (1 + ADVANTAGE_EPS), 0.75 / (1 + ADVANTAGE_EPS)]);
    const centred = gigpoAdvantages([{ group: 'solo', anchors: ['x'], rewards: [0.5] }], { ...paperDefaults, mode: 'mean_norm' });
    expect(centred.advantages).toEqual([[0.5]]); // verl-agent's mean 0 for a group of one
  });

  it("ω = 0 is exactly GRPO: every step gets its rollout's group-normalised return", () => {
    const rollouts: GigpoRollout[] = [
      ...threeRollouts,
      { group: 'h', anchors: ['s0', 's1'], rewards: [0.2, 0.7] },
      { group: 'h', anchors: ['s0', 's9', 's1'], rewards: [0, 0, 0.1] },
    ];
    const r = gigpoAdvantages(rollouts, { omega: 0, gamma: 0.95, mode: 'mean_std_norm' });
    const grpo = groupNormalisedAdvantages(
      rollouts.map((ro) => rolloutReturn(ro.rewards)),
      rollouts.map((ro) => ro.group),
    );
    expect(r.advantages).toEqual(rollouts.map((ro, i) => ro.anchors.map(() => grpo[i])));
  });

  it('a rollout that comes back to a state compares its two visits; the same text in another episode group does not join', () => {
    // Group p: one rollout x → y → x, rewards 0, 0, 1, γ = 0.5: G = [0.25, 0.5, 1]. Step group x = {0.25, 1}:
    // mean 0.625, std √(2·0.375²) = 0.53033, A_S = ∓0.375 / 0.53033 = ∓0.707107. Group q's x is its own group of one.
    const r = gigpoAdvantages(
      [
        { group: 'p', anchors: ['x', 'y', 'x'], rewards: [0, 0, 1] },
        { group: 'q', anchors: ['x'], rewards: [1] },
      ],
      paperDefaults,
    );
    const sd = Math.sqrt(2 * 0.375 ** 2) + ADVANTAGE_EPS;
    close(r.step[0], [-0.375 / sd, 0, 0.375 / sd]);
    expect(r.step[1]).toEqual([0]);
    expect([...r.stepGroupSizes].sort()).toEqual([1, 1, 2]);
  });

  it('anchors match as exact strings (no case or whitespace folding, as verl-agent without similarity)', () => {
    const r = gigpoAdvantages(
      [
        { group: 0, anchors: ['You are in the hall.'], rewards: [1] },
        { group: 0, anchors: ['You are in the hall. '], rewards: [0] },
      ],
      paperDefaults,
    );
    expect(r.stepGroupSizes).toEqual([1, 1]);
  });

  it('refuses bad input, naming what is wrong', () => {
    expect(() => gigpoAdvantages([{ group: 0, anchors: ['a', 'b'], rewards: [1] }], paperDefaults)).toThrow(
      /rollout 0 has 2 anchor states but 1 step rewards/,
    );
    expect(() => gigpoAdvantages(threeRollouts, { ...paperDefaults, gamma: 1.5 })).toThrow(/γ \(gamma\) must be in \[0, 1\], got 1\.5/);
    expect(() => gigpoAdvantages(threeRollouts, { ...paperDefaults, omega: -1 })).toThrow(
      /ω \(omega\) must be a finite number ≥ 0, got -1/,
    );
    expect(() => gigpoAdvantages(threeRollouts, { ...paperDefaults, mode: 'std' as never })).toThrow(
      /mode must be mean_std_norm or mean_norm, got std/,
    );
  });
});

describe('summariseStepGroups', () => {
  it('counts groups, their mean and largest size and the share of groups of one', () => {
    expect(summariseStepGroups([3, 2, 1, 1, 1])).toEqual({ count: 5, meanSize: 8 / 5, maxSize: 3, singletonShare: 3 / 5 });
    expect(summariseStepGroups([])).toEqual({ count: 0, meanSize: 0, maxSize: 0, singletonShare: 0 });
  });
});
