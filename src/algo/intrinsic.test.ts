import { describe, expect, it } from 'vitest';
import { noveltyReward, retrievalReward } from './intrinsic.ts';
import { drawMode, modeShares } from './modes.ts';

describe('intrinsic rewards (spec §6)', () => {
  it('novelty variant: 1/n', () => {
    expect([1, 2, 4, 10].map(noveltyReward)).toEqual([1, 0.5, 0.25, 0.1]);
    expect(() => noveltyReward(0)).toThrow(/>= 1/);
  });
  it('retrieval variant: 1/(k+1), 1 when nothing is retrieved', () => {
    expect([0, 1, 3, 9].map(retrievalReward)).toEqual([1, 0.5, 0.25, 0.1]);
    expect(() => retrievalReward(-1)).toThrow(/>= 0/);
  });
});

describe('mode schedule (spec §5)', () => {
  const ref = { p: 0.25, q: 0.68 };
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
