import { beforeAll, describe, expect, it } from 'vitest';
import { initBackend, tf } from '../policy/tfjs/backend.ts';
import { objectiveTerms, sequenceLowProbKeep, type ObjectiveConfig } from './objective.ts';

// The objective runs in float32: hand-computed values are compared to 5 decimals (|Δ| < 5e-6).
const DIGITS = 5;

const base: ObjectiveConfig = { clipLow: 0.2, clipHigh: 0.3, dualClip: null, klCoef: 0, lowProbDelta: null };

interface Case {
  /** ρ per token; log πθ is log πold + log ρ. */
  ratio: number[];
  advantages: number[];
  oldLogp?: number[];
  mask?: number[];
  refLogp?: number[];
  lowProbScope?: number[];
}

function evaluate(c: Case, cfg: Partial<ObjectiveConfig> = {}) {
  const n = c.ratio.length;
  const old = c.oldLogp ?? new Array(n).fill(Math.log(0.5));
  return tf.tidy(() => {
    const terms = objectiveTerms(
      {
        logp: tf.tensor1d(c.ratio.map((r, i) => old[i] + Math.log(r))),
        oldLogp: tf.tensor1d(old),
        advantages: tf.tensor1d(c.advantages),
        mask: tf.tensor1d(c.mask ?? new Array(n).fill(1)),
        refLogp: c.refLogp ? tf.tensor1d(c.refLogp) : undefined,
        lowProbScope: c.lowProbScope ? tf.tensor1d(c.lowProbScope) : undefined,
      },
      { ...base, ...cfg },
    );
    const num = (t: tf.Scalar) => t.dataSync()[0];
    return {
      lossSum: num(terms.lossSum),
      tokens: num(terms.tokens),
      clipped: num(terms.clipped),
      ratioSum: num(terms.ratioSum),
      klSum: num(terms.klSum),
    };
  });
}

/** d lossSum / d logp per token, by autodiff. */
function gradWrtLogp(c: Case, cfg: Partial<ObjectiveConfig> = {}): number[] {
  const old = c.oldLogp ?? new Array(c.ratio.length).fill(Math.log(0.5));
  return tf.tidy(() => {
    const logp = tf.tensor1d(c.ratio.map((r, i) => old[i] + Math.log(r)));
    const g = tf.grad(
      (lp: tf.Tensor) =>
        objectiveTerms(
          {
            logp: lp as tf.Tensor1D,
            oldLogp: tf.tensor1d(old),
            advantages: tf.tensor1d(c.advantages),
            mask: tf.ones([c.ratio.length]) as tf.Tensor1D,
          },
          { ...base, ...cfg },
        ).lossSum,
    )(logp);
    return Array.from(g.dataSync());
  });
}

beforeAll(async () => {
  await initBackend();
});

describe('objectiveTerms: clipped ratio (ε_low 0.2, ε_high 0.3), loss = −min(ρA, clip(ρ)A)', () => {
  it('ratio in the trust region is not clipped, in both directions of ρ', () => {
    // ρ=1.1, A=+2 -> min(2.2, 2.2) = 2.2 -> loss −2.2.   ρ=0.9, A=−1 -> min(−0.9, −0.9) -> loss +0.9.
    const r = evaluate({ ratio: [1.1, 0.9], advantages: [2, -1] });
    expect(r.lossSum).toBeCloseTo(-2.2 + 0.9, DIGITS);
    expect(r.clipped).toBe(0);
    expect(r.ratioSum).toBeCloseTo(2.0, DIGITS);
    expect(r.tokens).toBe(2);
  });

  it('A > 0: ρ above 1+ε_high is capped at 1.3; ρ below 1−ε_low keeps ρA (the min picks the smaller)', () => {
    // ρ=1.5, A=1 -> min(1.5, 1.3) = 1.3 -> loss −1.3.
    expect(evaluate({ ratio: [1.5], advantages: [1] }).lossSum).toBeCloseTo(-1.3, DIGITS);
    // ρ=0.5, A=1 -> min(0.5, 0.8) = 0.5 -> loss −0.5.
    expect(evaluate({ ratio: [0.5], advantages: [1] }).lossSum).toBeCloseTo(-0.5, DIGITS);
  });

  it('A < 0: ρ below 1−ε_low is floored at 0.8·A; ρ above 1+ε_high keeps ρA', () => {
    // ρ=0.5, A=−1 -> min(−0.5, −0.8) = −0.8 -> loss +0.8.
    expect(evaluate({ ratio: [0.5], advantages: [-1] }).lossSum).toBeCloseTo(0.8, DIGITS);
    // ρ=1.5, A=−2 -> min(−3, −2.6) = −3 -> loss +3.
    expect(evaluate({ ratio: [1.5], advantages: [-2] }).lossSum).toBeCloseTo(3, DIGITS);
  });

  it('clip fraction counts tokens whose ρ left [0.8, 1.3], whatever the sign of A', () => {
    // ρ = 0.5 (out), 0.85 (in), 1.25 (in), 1.5 (out), 2 (out).
    const r = evaluate({ ratio: [0.5, 0.85, 1.25, 1.5, 2], advantages: [1, 1, -1, -1, 1] });
    expect(r.clipped).toBe(3);
    expect(r.ratioSum).toBeCloseTo(0.5 + 0.85 + 1.25 + 1.5 + 2, DIGITS);
  });

  it('gradient flows only through unclipped tokens: d loss / d logp = −ρA there, 0 where clipped', () => {
    // loss_t = −ρ_t A_t with ρ = exp(logp − old): d/dlogp = −ρA.
    // ρ=1.1, A=1 -> −1.1.   ρ=1.5, A=1 -> clipped at 1.3 (constant) -> 0.   ρ=0.5, A=−1 -> floored at −0.8 -> 0.   ρ=1.5, A=−1 -> +1.5.
    const g = gradWrtLogp({ ratio: [1.1, 1.5, 0.5, 1.5], advantages: [1, 1, -1, -1] });
    expect(g[0]).toBeCloseTo(-1.1, DIGITS);
    expect(g[1]).toBeCloseTo(0, DIGITS);
    expect(g[2]).toBeCloseTo(0, DIGITS);
    expect(g[3]).toBeCloseTo(1.5, DIGITS);
  });
});

describe('objectiveTerms: dual clip (c = 10)', () => {
  it('bounds the objective below by c·A for A < 0', () => {
    // ρ=20, A=−1: min(−20, −1.3) = −20; dual clip max(−20, 10·(−1)) = −10 -> loss +10. Without dual clip: +20.
    expect(evaluate({ ratio: [20], advantages: [-1] }, { dualClip: 10 }).lossSum).toBeCloseTo(10, 4);
    expect(evaluate({ ratio: [20], advantages: [-1] }, { dualClip: null }).lossSum).toBeCloseTo(20, 4);
  });

  it('does not touch A > 0, nor A < 0 while ρA stays above c·A', () => {
    // ρ=20, A=+1: min(20, 1.3) = 1.3 -> loss −1.3.   ρ=5, A=−1: −5 > −10 -> loss +5.
    const r = evaluate({ ratio: [20, 5], advantages: [1, -1] }, { dualClip: 10 });
    expect(r.lossSum).toBeCloseTo(-1.3 + 5, 4);
  });

  it('the dual-clipped token has zero gradient', () => {
    // The bound c·A is constant in logp.
    const g = gradWrtLogp({ ratio: [20], advantages: [-1] }, { dualClip: 10 });
    expect(g[0]).toBeCloseTo(0, DIGITS);
  });
});

describe('objectiveTerms: masks', () => {
  it('token mask δ drops tokens whose current probability is below δ (p = 0.05 < 0.1 dropped, p = 0.2 kept)', () => {
    // ρ = 1 everywhere (logp = old), A = 1: each kept token contributes −1.
    const lp = [Math.log(0.05), Math.log(0.2), Math.log(0.9)];
    const r = evaluate({ ratio: [1, 1, 1], advantages: [1, 1, 1], oldLogp: lp }, { lowProbDelta: 0.1 });
    expect(r.tokens).toBe(2);
    expect(r.lossSum).toBeCloseTo(-2, DIGITS);
    expect(r.ratioSum).toBeCloseTo(2, DIGITS);
    // Off: all three count.
    expect(evaluate({ ratio: [1, 1, 1], advantages: [1, 1, 1], oldLogp: lp }).tokens).toBe(3);
  });

  it('δ compares the current πθ, not πold: old p = 0.05 but current p = 0.05·3 = 0.15 ≥ 0.1 is kept', () => {
    const r = evaluate({ ratio: [3], advantages: [1], oldLogp: [Math.log(0.05)] }, { lowProbDelta: 0.1 });
    expect(r.tokens).toBe(1);
    expect(r.lossSum).toBeCloseTo(-1.3, DIGITS); // ρ=3 capped at 1.3
  });

  it('δ applies only inside its scope (EMPO² masks off-policy tokens only)', () => {
    // Tokens 1 and 2 have p = 0.05 < δ = 0.1; only token 1 is in scope, so token 2 still counts.
    const lp = [Math.log(0.05), Math.log(0.05), Math.log(0.5)];
    const r = evaluate({ ratio: [1, 1, 1], advantages: [1, 2, 4], oldLogp: lp, lowProbScope: [1, 0, 1] }, { lowProbDelta: 0.1 });
    expect(r.tokens).toBe(2);
    expect(r.lossSum).toBeCloseTo(-6, DIGITS); // −(2 + 4)
  });

  it('the caller mask removes tokens from every sum', () => {
    // Token 2 (ρ=2, A=5) is masked out: loss only from token 1, −1.1·1.
    const r = evaluate({ ratio: [1.1, 2], advantages: [1, 5], mask: [1, 0] });
    expect(r.tokens).toBe(1);
    expect(r.lossSum).toBeCloseTo(-1.1, DIGITS);
    expect(r.clipped).toBe(0);
    expect(r.ratioSum).toBeCloseTo(1.1, DIGITS);
  });

  it('token mean is lossSum / tokens', () => {
    // ρ=1.2, A=1 -> −1.2;  ρ=0.9, A=−1 -> +0.9;  ρ=1, A=0.5 -> −0.5;  sum −0.8 over 3 tokens -> mean −0.2667.
    const r = evaluate({ ratio: [1.2, 0.9, 1], advantages: [1, -1, 0.5] });
    expect(r.lossSum / r.tokens).toBeCloseTo(-0.8 / 3, DIGITS);
  });
});

describe('objectiveTerms: KL penalty (k3 estimator)', () => {
  it('k3 = e^(ref − logp) − (ref − logp) − 1; hand case p = 0.5, p_ref = 0.25', () => {
    // d = log 0.25 − log 0.5 = −ln 2 = −0.693147; k3 = 0.5 + 0.693147 − 1 = 0.193147.
    // With ρ = 1, A = 0 the policy term is 0, so lossSum = β·k3 = 0.1 · 0.193147 = 0.0193147.
    const k3 = 0.5 + Math.LN2 - 1;
    const r = evaluate({ ratio: [1], advantages: [0], oldLogp: [Math.log(0.5)], refLogp: [Math.log(0.25)] }, { klCoef: 0.1 });
    expect(r.klSum).toBeCloseTo(k3, DIGITS);
    expect(r.lossSum).toBeCloseTo(0.1 * k3, DIGITS);
  });

  it('k3 is zero when πθ = πref and is counted only on unmasked tokens', () => {
    const r = evaluate(
      {
        ratio: [1, 1],
        advantages: [0, 0],
        oldLogp: [Math.log(0.5), Math.log(0.5)],
        refLogp: [Math.log(0.5), Math.log(0.01)],
        mask: [1, 0],
      },
      { klCoef: 1 },
    );
    expect(r.klSum).toBeCloseTo(0, DIGITS);
  });

  it('klCoef > 0 without reference log-probs is refused', () => {
    expect(() => evaluate({ ratio: [1], advantages: [1] }, { klCoef: 0.1 })).toThrow(/reference log-probs/);
  });
});

describe('sequenceLowProbKeep (reference variant: drop a response whose min old log-prob < threshold)', () => {
  it('keeps at and above the threshold, drops below', () => {
    expect(sequenceLowProbKeep([-1, -4.9], -5)).toBe(true);
    expect(sequenceLowProbKeep([-1, -5], -5)).toBe(true);
    expect(sequenceLowProbKeep([-0.1, -5.01, -0.2], -5)).toBe(false);
    expect(sequenceLowProbKeep([], -5)).toBe(true);
  });
});
