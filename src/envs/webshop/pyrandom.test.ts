// Expected values were printed by CPython 3.11's random module with the same seeds and calls.
import { describe, expect, it } from 'vitest';
import { PyRandom } from './pyrandom.ts';

describe('PyRandom matches CPython random', () => {
  it('seeds like random.seed(int) and draws the same 32-bit words', () => {
    const r = new PyRandom(233);
    expect([r.getrandbits(32), r.getrandbits(32), r.getrandbits(32)]).toEqual([2931216007, 3446561803, 2698614761]);
  });

  it('random() and uniform() give the same doubles', () => {
    const r = new PyRandom(0);
    expect(r.random()).toBe(0.8444218515250481);
    expect(r.uniform(3.5, 9.25)).toBe(7.8582378169067395);
  });

  it('shuffle() gives the same permutation', () => {
    const r = new PyRandom(7);
    const x = Array.from({ length: 20 }, (_, i) => i);
    r.shuffle(x);
    expect(x).toEqual([17, 15, 11, 18, 7, 6, 19, 3, 14, 0, 9, 5, 16, 8, 13, 2, 1, 12, 4, 10]);
    // WebShop's goal shuffle: random.seed(233); random.shuffle(list(range(6910)))
    const goals = Array.from({ length: 6910 }, (_, i) => i);
    new PyRandom(233).shuffle(goals);
    expect(goals.slice(0, 8)).toEqual([3963, 2638, 2193, 1856, 4358, 6149, 2504, 3220]);
    expect(goals.slice(-3)).toEqual([5147, 6573, 5590]);
  });

  it('sample() and _randbelow() with a seed wider than 32 bits', () => {
    const r = new PyRandom(12345678901);
    expect(r.sample([10, 20, 30, 40], 2)).toEqual([30, 20]);
    expect(r.randbelow(1000)).toBe(362);
  });

  it('rejects bad arguments with a message naming them', () => {
    expect(() => new PyRandom(1.5)).toThrow(/seed must be a safe integer/);
    expect(() => new PyRandom(1).sample([1, 2], 3)).toThrow(/larger than the population/);
    expect(() => new PyRandom(1).getrandbits(33)).toThrow(/1\.\.32/);
  });
});
