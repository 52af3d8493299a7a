import { describe, expect, it } from 'vitest';
import { NoveltyList } from './novelty.ts';

const unit = (...xs: number[]) => {
  const n = Math.hypot(...xs);
  return Float32Array.from(xs.map((x) => x / n));
};

describe('NoveltyList', () => {
  it('a new state counts 1; each later visit to a similar state counts up (reward 1/n)', () => {
    const list = new NoveltyList(0.9);
    expect(list.visit('t', unit(1, 0, 0))).toBe(1);
    expect(list.visit('t', unit(1, 0, 0))).toBe(2);
    expect(list.visit('t', unit(1, 0.1, 0))).toBe(3); // cos 0.995 > 0.9: the same state
    expect(list.visit('t', unit(1, 1, 0))).toBe(1); // cos 0.707: new
    expect(list.size('t')).toBe(2);
    expect(list.visit('u', unit(1, 0, 0))).toBe(1); // slots are separate
  });

  it('a visit counts toward the most similar kept state', () => {
    const list = new NoveltyList(0.5);
    list.visit('t', unit(1, 0));
    list.visit('t', unit(0, 1)); // cos 0 with the first: new
    expect(list.visit('t', unit(1, 2))).toBe(2); // cos .447 vs .894: the second state
    expect(list.visit('t', unit(0, 1))).toBe(3);
    expect(list.visit('t', unit(1, 0))).toBe(2);
  });

  it('round-trips through JSON', () => {
    const list = new NoveltyList(0.8);
    list.visit('t', unit(1, 0, 0));
    list.visit('t', unit(1, 0, 0));
    list.visit('t', unit(0, 0, 1));
    const copy = NoveltyList.fromJSON(JSON.parse(JSON.stringify(list.toJSON())), 3);
    expect(copy.visit('t', unit(1, 0, 0))).toBe(3);
    expect(copy.visit('t', unit(0, 0, 1))).toBe(2);
    expect(() => NoveltyList.fromJSON(list.toJSON(), 4, 'memory.json')).toThrow(/memory.json: slot "t"/);
  });
});
