import { describe, expect, it } from 'vitest';
import { noveltyReward, retrievalReward } from './intrinsic.ts';
import { drawMode, modeShares, scheduledP } from './modes.ts';

describe('intrinsic rewards (docs/EMPO2.md §6)', () => {
  it('novelty variant: 1/n', () => {
    expect([1, 2, 4, 10].map(noveltyReward)).toEqual([1, 0.5, 0.25, 0.1]);
    expect(() => noveltyReward(0)).toThrow(/>= 1/);
  });
  it('retrieval variant: 1/(k+1), 1 when nothing is retrieved', () => {
    expect([0, 1, 3, 9].map(retrievalReward)).toEqual([1, 0.5, 0.25, 0.1]);
    expect(() => retrievalReward(-1)).toThrow(/>= 0/);
  });
});

describe('mode schedule (docs/EMPO2.md §5)', () => {
  const ref = { p: 0.25, q: 0.68 };
  it('experimental.p_end (not in the paper): p moves linearly from p at the first iteration to p_end at the last', () => {
    // p = 0.5 → 0.1 over 5 iterations: steps of 0.1.
    const ps = [1, 2, 3, 4, 5].map((it) => scheduledP(0.5, 0.1, it, 5));
    ps.forEach((p, i) => expect(p).toBeCloseTo([0.5, 0.4, 0.3, 0.2, 0.1][i], 12));
    expect(scheduledP(0.25, null, 7, 10)).toBe(0.25); // no schedule: constant
    expect(scheduledP(0.25, 0, 1, 1)).toBe(0.25); // a single iteration uses p
    expect(scheduledP(0.2, 0.6, 9, 5)).toBeCloseTo(0.6, 12); // past the end (a run extended without a new schedule) stays at p_end
  });
  it('draws plain when u1 >= p, else off-policy when u2 < q, else on-policy with tips', () => {
    expect(drawMode(ref, 0.25, 0)).toBe('plain');
    expect(drawMode(ref, 0.9, 0.1)).toBe('plain');
    expect(drawMode(ref, 0.1, 0.5)).toBe('tips-off-policy');
    expect(drawMode(ref, 0.1, 0.68)).toBe('tips-on-policy');
    expect(drawMode({ p: 0, q: 1 }, 0, 0)).toBe('plain');
    expect(() => drawMode({ p: 1.5, q: 0 }, 0, 0)).toThrow(/p and q must be in \[0, 1\]/);
  });
  it("the reference's p = 0.25, q = 0.68 gives 17% off-policy, 8% on-policy with tips, 75% plain", () => {
    const s = modeShares(ref);
    expect(s['tips-off-policy']).toBeCloseTo(0.17, 10);
    expect(s['tips-on-policy']).toBeCloseTo(0.08, 10);
    expect(s.plain).toBeCloseTo(0.75, 10);
    // And a fine grid of (u1, u2) reproduces the shares.
    const n = 200;
    let off = 0;
    let on = 0;
    for (let i = 0; i < n; i++)
      for (let j = 0; j < n; j++) {
        const m = drawMode(ref, (i + 0.5) / n, (j + 0.5) / n);
        if (m === 'tips-off-policy') off++;
        if (m === 'tips-on-policy') on++;
      }
    expect(off / n / n).toBeCloseTo(0.17, 2);
    expect(on / n / n).toBeCloseTo(0.08, 2);
  });
});
