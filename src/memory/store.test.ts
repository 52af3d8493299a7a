import { describe, expect, it } from 'vitest';
import { TipMemory } from './store.ts';

/** Unit vector in `dim` dimensions with the given non-zero coordinates (normalised). */
function vec(dim: number, coords: Record<number, number>): Float32Array {
  const v = new Float32Array(dim);
  for (const [i, x] of Object.entries(coords)) v[Number(i)] = x;
  const n = Math.hypot(...v);
  return v.map((x) => x / n);
}

describe('TipMemory', () => {
  it('retrieves only entries with cosine above the threshold, highest score first, at most top-k', () => {
    const m = new TipMemory(4, { capacity: 10, threshold: 0.5, topK: 2 });
    const q = vec(4, { 0: 1 });
    m.add('t', vec(4, { 0: 1 }), 'exact, score 10', 10); // cos 1
    m.add('t', vec(4, { 0: 1, 1: 1 }), 'cos .707, score 90', 90); // cos 0.7071
    m.add('t', vec(4, { 0: 1, 1: 2 }), 'cos .447, score 100', 100); // cos 0.4472 < 0.5: never returned
    m.add('t', vec(4, { 0: 2, 1: 1 }), 'cos .894, score 50', 50); // cos 0.8944
    expect(m.retrieve('t', q).map((r) => r.text)).toEqual(['cos .707, score 90', 'cos .894, score 50']);
    expect(m.retrieve('t', q, 10).map((r) => r.text)).toEqual(['cos .707, score 90', 'cos .894, score 50', 'exact, score 10']);
    expect(m.retrieve('t', q, 10)[1].similarity).toBeCloseTo(2 / Math.sqrt(5), 6);
    expect(m.countSimilar('t', q)).toBe(3);
  });

  it('breaks score ties by similarity, then by recency', () => {
    const m = new TipMemory(2, { capacity: 10, threshold: 0, topK: 10 });
    m.add('t', vec(2, { 0: 1, 1: 1 }), 'old less similar', 5);
    m.add('t', vec(2, { 0: 1 }), 'old exact', 5);
    m.add('t', vec(2, { 0: 1 }), 'new exact', 5);
    expect(m.retrieve('t', vec(2, { 0: 1 })).map((r) => r.text)).toEqual(['new exact', 'old exact', 'old less similar']);
  });

  it('leaves out tips whose action the filter rejects before the top-k cut; tips without an action are always kept', () => {
    const m = new TipMemory(2, { capacity: 10, threshold: 0.5, topK: 2 });
    const q = vec(2, { 0: 1 });
    m.add('t', q, 'take key: +20', 20, 'take key');
    m.add('t', q, 'open box: +15', 15, 'open box');
    m.add('t', q, 'an episode tip', 10);
    m.add('t', q, 'go north: 0', 0, 'go north');
    expect(m.retrieve('t', q).map((r) => r.text)).toEqual(['take key: +20', 'open box: +15']);
    expect(m.retrieve('t', q, undefined, { keepAction: (a) => a !== 'take key' }).map((r) => r.text)).toEqual([
      'open box: +15',
      'an episode tip',
    ]);
    expect(
      m.retrieve('t', q, undefined, { keepAction: (a) => !['take key', 'open box'].includes(a) }).map((r) => [r.text, r.action]),
    ).toEqual([
      ['an episode tip', null],
      ['go north: 0', 'go north'],
    ]);
    expect(m.retrieve('t', q, undefined, { keepAction: () => true })).toEqual(m.retrieve('t', q));
    expect(m.retrieve('t', q, undefined, { keepAction: () => false }).map((r) => r.text)).toEqual(['an episode tip']);
    // minScore: strictly above; it applies to episode tips too, and before the top-k cut.
    expect(m.retrieve('t', q, 10, { minScore: 0 }).map((r) => r.text)).toEqual(['take key: +20', 'open box: +15', 'an episode tip']);
    expect(m.retrieve('t', q, 10, { minScore: 10 }).map((r) => r.text)).toEqual(['take key: +20', 'open box: +15']);
    expect(m.retrieve('t', q, undefined, { keepAction: (a) => a !== 'take key', minScore: 0 }).map((r) => r.text)).toEqual([
      'open box: +15',
      'an episode tip',
    ]);
    expect(m.retrieve('t', q, 10, { keepAction: (a) => a === 'go north', minScore: 0 }).map((r) => r.text)).toEqual(['an episode tip']);
    expect(m.retrieve('t', q, 10, { minScore: null })).toEqual(m.retrieve('t', q, 10));
  });

  it('progress filter: keeps entries written at the same score so far, and entries with none recorded', () => {
    const m = new TipMemory(2, { capacity: 10, threshold: 0.5, topK: 10 });
    const q = vec(2, { 0: 1 });
    m.add('t', q, 'go to hallway: +50 (carrying it)', 50, 'go to hallway', 50);
    m.add('t', q, 'open crate: +20', 20, 'open crate', 0);
    m.add('t', q, 'an episode tip', 10);
    const texts = (progress: number | null) => m.retrieve('t', q, 10, { progress }).map((r) => r.text);
    expect(texts(null)).toEqual(['go to hallway: +50 (carrying it)', 'open crate: +20', 'an episode tip']);
    expect(texts(0)).toEqual(['open crate: +20', 'an episode tip']);
    expect(texts(50)).toEqual(['go to hallway: +50 (carrying it)', 'an episode tip']);
    expect(texts(20)).toEqual(['an episode tip']);
    expect(m.entries('t').map((e) => e.progress)).toEqual([50, 0, null]);
  });

  it('keeps slots apart', () => {
    const m = new TipMemory(2, { capacity: 10, threshold: 0.5, topK: 10 });
    m.add('boil', vec(2, { 0: 1 }), 'a boil tip', 1);
    expect(m.retrieve('fetch', vec(2, { 0: 1 }))).toEqual([]);
    expect(m.retrieve('boil', vec(2, { 0: 1 }))).toHaveLength(1);
  });

  it('evicts the oldest entry once a slot is full', () => {
    const m = new TipMemory(2, { capacity: 3, threshold: -1, topK: 10 });
    for (let i = 0; i < 5; i++) m.add('t', vec(2, { 0: 1 }), `tip ${i}`, i);
    expect(m.size('t')).toBe(3);
    expect(m.entries('t').map((e) => e.text)).toEqual(['tip 2', 'tip 3', 'tip 4']);
    // An evicted text may be stored again.
    expect(m.add('t', vec(2, { 0: 1 }), 'tip 0', 0)).toBe(true);
    expect(m.entries('t').map((e) => e.text)).toEqual(['tip 3', 'tip 4', 'tip 0']);
  });

  it('stores identical contents once', () => {
    const m = new TipMemory(2, { capacity: 10, threshold: -1, topK: 10 });
    expect(m.add('t', vec(2, { 0: 1 }), 'same', 1)).toBe(true);
    expect(m.add('t', vec(2, { 1: 1 }), 'same', 50)).toBe(false);
    expect(m.size('t')).toBe(1);
    expect(m.add('u', vec(2, { 1: 1 }), 'same', 50)).toBe(true); // other slot
  });

  it('round-trips through JSON: same entries, same order, same retrievals, eviction continues', () => {
    const m = new TipMemory(8, { capacity: 4, threshold: 0.1, topK: 3 });
    const rnd = (i: number) => vec(8, { [i % 8]: 1, [(i * 3 + 1) % 8]: 0.5 + (i % 3) });
    for (let i = 0; i < 7; i++) m.add(i % 2 ? 'a' : 'b', rnd(i), `tip ${i}`, (i * 37) % 100);
    const copy = TipMemory.fromJSON(JSON.parse(JSON.stringify(m.toJSON())));
    for (const slot of ['a', 'b']) {
      expect(copy.entries(slot).map((e) => [e.text, e.score])).toEqual(m.entries(slot).map((e) => [e.text, e.score]));
      for (let i = 0; i < 8; i++) expect(copy.retrieve(slot, rnd(i))).toEqual(m.retrieve(slot, rnd(i)));
    }
    m.add('b', rnd(9), 'tip 9', 9);
    copy.add('b', rnd(9), 'tip 9', 9);
    expect(copy.entries('b').map((e) => e.text)).toEqual(m.entries('b').map((e) => e.text));
  });

  it('round-trips the actions of per-step tips; a memory saved without actions reads as action-less', () => {
    const m = new TipMemory(2, { capacity: 10, threshold: 0.5, topK: 10 });
    m.add('t', vec(2, { 0: 1 }), 'take key: +20', 20, 'take key');
    m.add('t', vec(2, { 0: 1 }), 'an episode tip', 10);
    const saved = JSON.parse(JSON.stringify(m.toJSON()));
    expect(saved.slots.t.actions).toEqual(['take key', null]);
    expect(
      TipMemory.fromJSON(saved)
        .entries('t')
        .map((e) => e.action),
    ).toEqual(['take key', null]);
    delete saved.slots.t.actions;
    expect(
      TipMemory.fromJSON(saved)
        .entries('t')
        .map((e) => e.action),
    ).toEqual([null, null]);
    const plain = new TipMemory(2);
    plain.add('t', vec(2, { 0: 1 }), 'x', 1);
    expect(plain.toJSON().slots.t).not.toHaveProperty('actions');
    expect(plain.toJSON().slots.t).not.toHaveProperty('progress');
  });

  it('round-trips the progress of per-step tips; a memory saved without it reads as progress-less', () => {
    const m = new TipMemory(2, { capacity: 10, threshold: 0.5, topK: 10 });
    m.add('t', vec(2, { 0: 1 }), 'take key: +20', 20, 'take key', 15);
    m.add('t', vec(2, { 0: 1 }), 'an episode tip', 10);
    const saved = JSON.parse(JSON.stringify(m.toJSON()));
    expect(saved.slots.t.progress).toEqual([15, null]);
    const copy = TipMemory.fromJSON(saved);
    expect(copy.entries('t').map((e) => e.progress)).toEqual([15, null]);
    expect(copy.retrieve('t', vec(2, { 0: 1 }), 10, { progress: 0 }).map((r) => r.text)).toEqual(['an episode tip']);
    delete saved.slots.t.progress;
    expect(
      TipMemory.fromJSON(saved)
        .entries('t')
        .map((e) => e.progress),
    ).toEqual([null, null]);
  });

  it('refuses bad input clearly', () => {
    const m = new TipMemory(4);
    expect(() => m.add('t', new Float32Array(3), 'x', 1)).toThrow(/3 dimensions, memory has 4/);
    expect(() => m.retrieve('t', new Float32Array(5))).toThrow(/5 dimensions/);
    expect(() => TipMemory.fromJSON({ format: 'nope' }, 'memory.json')).toThrow(/memory.json: not an empo2 tip memory/);
    const good = new TipMemory(2);
    good.add('t', vec(2, { 0: 1 }), 'x', 1);
    const bad = good.toJSON();
    bad.slots.t.keys = Buffer.from(new Float32Array(3).buffer).toString('base64');
    expect(() => TipMemory.fromJSON(bad, 'memory.json')).toThrow(/slot "t" keys hold 12 bytes, expected 8/);
    const badActions = good.toJSON();
    badActions.slots.t.actions = ['a', 'b'];
    expect(() => TipMemory.fromJSON(badActions, 'memory.json')).toThrow(/slot "t" has 2 actions for 1 tips/);
    const badProgress = good.toJSON();
    badProgress.slots.t.progress = ['ten' as unknown as number];
    expect(() => TipMemory.fromJSON(badProgress, 'memory.json')).toThrow(
      /slot "t" has 1 progress values for 1 tips, or values that are not numbers/,
    );
  });
});
