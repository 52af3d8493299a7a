import { describe, expect, it } from 'vitest';
import { logSumExp, sampleToken } from './sampling.ts';
import { Rng } from '../util/rng.ts';

/** log-softmax(logits / T) at one index, in double precision. */
function logSoftmaxAt(logits: number[], T: number, index: number): number {
  const scaled = logits.map((x) => x / T);
  const max = Math.max(...scaled);
  const lse = max + Math.log(scaled.reduce((a, x) => a + Math.exp(x - max), 0));
  return scaled[index] - lse;
}

const row = (xs: number[]) => Float32Array.from(xs);

/** Logits whose softmax is exactly the given probabilities (up to float32 rounding). */
const logitsOf = (probs: number[]) => row(probs.map(Math.log));

function counts(
  logits: Float32Array,
  opts: { temperature: number; topP: number },
  draws: number,
  seed: number,
  allowed?: number[],
): number[] {
  const rng = new Rng(seed);
  const c = new Array(logits.length).fill(0);
  for (let i = 0; i < draws; i++) c[sampleToken(logits, opts, rng, allowed).token]++;
  return c;
}

describe('sampleToken', () => {
  const logits = [0.3, 2.5, -1, 2.4, 0];

  it('temperature 0 is greedy: always the argmax, whatever the random stream', () => {
    const rng = new Rng(1);
    for (let i = 0; i < 20; i++) expect(sampleToken(row(logits), { temperature: 0, topP: 1 }, rng).token).toBe(1);
  });

  it("greedy returns the unconstrained log-softmax at T = 1 (the policy's own probability), within 1e-6", () => {
    const pick = sampleToken(row(logits), { temperature: 0, topP: 1 }, new Rng(0));
    expect(Math.abs(pick.logprob - logSoftmaxAt(logits, 1, 1))).toBeLessThan(1e-6);
  });

  it('greedy with allowed ids picks the best allowed one', () => {
    const pick = sampleToken(row(logits), { temperature: 0, topP: 1 }, new Rng(0), [0, 2, 4]);
    expect(pick.token).toBe(0);
    // The log-prob is still the unconstrained one (what the trainer's ratio uses).
    expect(Math.abs(pick.logprob - logSoftmaxAt(logits, 1, 0))).toBeLessThan(1e-6);
  });

  it('returned log-prob equals log-softmax(logits / T) at the sampled token, for several T (within 1e-5)', () => {
    for (const T of [0.4, 1, 2.5]) {
      const rng = new Rng(7);
      for (let i = 0; i < 50; i++) {
        const pick = sampleToken(row(logits), { temperature: T, topP: 1 }, rng);
        expect(Math.abs(pick.logprob - logSoftmaxAt(logits, T, pick.token))).toBeLessThan(1e-5);
      }
    }
  });

  it('constrained sampling only ever picks allowed ids and renormalises over them (20000 draws, ±0.02)', () => {
    // Allowed {0, 2, 4} with logits [0.3, −1, 0]: probabilities ∝ [e^0.3, e^-1, 1] = [1.3499, 0.3679, 1] / 2.7178.
    const c = counts(row(logits), { temperature: 1, topP: 1 }, 20_000, 3, [0, 2, 4]);
    expect(c[1] + c[3]).toBe(0);
    const z = Math.exp(0.3) + Math.exp(-1) + 1;
    expect(Math.abs(c[0] / 20_000 - Math.exp(0.3) / z)).toBeLessThan(0.02);
    expect(Math.abs(c[2] / 20_000 - Math.exp(-1) / z)).toBeLessThan(0.02);
    expect(Math.abs(c[4] / 20_000 - 1 / z)).toBeLessThan(0.02);
  });

  it('constrained log-prob is the unconstrained policy log-prob, not the renormalised one', () => {
    const pick = sampleToken(row(logits), { temperature: 1, topP: 1 }, new Rng(5), [2]);
    expect(pick.token).toBe(2);
    expect(Math.abs(pick.logprob - logSoftmaxAt(logits, 1, 2))).toBeLessThan(1e-6);
  });

  it('an empty allowed list means unconstrained', () => {
    const c = counts(row(logits), { temperature: 1, topP: 1 }, 2000, 9, []);
    expect(c.filter((x) => x > 0).length).toBe(5);
  });

  it('top-p keeps the smallest nucleus reaching p: probs [0.5, 0.3, 0.15, 0.05], p = 0.7 keeps {0, 1} at 0.625 / 0.375 (20000 draws, ±0.02)', () => {
    const c = counts(logitsOf([0.5, 0.3, 0.15, 0.05]), { temperature: 1, topP: 0.7 }, 20_000, 11);
    expect(c[2] + c[3]).toBe(0);
    expect(Math.abs(c[0] / 20_000 - 0.625)).toBeLessThan(0.02);
  });

  it('top-p = 0.9 keeps three tokens {0, 1, 2} in proportion 0.5 : 0.3 : 0.15 (20000 draws, ±0.02)', () => {
    const c = counts(logitsOf([0.5, 0.3, 0.15, 0.05]), { temperature: 1, topP: 0.9 }, 20_000, 12);
    expect(c[3]).toBe(0);
    expect(Math.abs(c[0] / 20_000 - 0.5 / 0.95)).toBeLessThan(0.02);
    expect(Math.abs(c[2] / 20_000 - 0.15 / 0.95)).toBeLessThan(0.02);
  });

  it("top-p smaller than the top token's probability still keeps that one token", () => {
    const c = counts(logitsOf([0.1, 0.6, 0.3]), { temperature: 1, topP: 0.05 }, 500, 13);
    expect(c).toEqual([0, 500, 0]);
  });

  it('plain sampling at T = 1 follows softmax (probs [0.5, 0.3, 0.15, 0.05], 20000 draws, ±0.02)', () => {
    const probs = [0.5, 0.3, 0.15, 0.05];
    const c = counts(logitsOf(probs), { temperature: 1, topP: 1 }, 20_000, 14);
    probs.forEach((p, i) => expect(Math.abs(c[i] / 20_000 - p)).toBeLessThan(0.02));
  });

  it('the same seed gives the same draws', () => {
    const a = counts(row(logits), { temperature: 1, topP: 0.9 }, 300, 21);
    const b = counts(row(logits), { temperature: 1, topP: 0.9 }, 300, 21);
    expect(a).toEqual(b);
  });
});

describe('logSumExp', () => {
  it('is stable for large values and honours the scale (within 1e-9 relative)', () => {
    expect(logSumExp([1000, 1000])).toBeCloseTo(1000 + Math.LN2, 9);
    expect(logSumExp([2, 4], 0.5)).toBeCloseTo(Math.log(Math.exp(1) + Math.exp(2)), 9);
    expect(logSumExp([])).toBe(-Infinity);
  });
});
