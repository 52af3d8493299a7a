import { describe, expect, it } from 'vitest';
import { HashedNgramEmbedder } from '../memory/hashed.ts';
import { TipMemory } from '../memory/store.ts';
import { Rng } from '../util/rng.ts';
import { denseKey, sparseKey, TipIndex } from './tip-index.ts';

const WORDS = 'kitchen door key table lamp north south open take locked drawer garden shed box red blue small large'.split(' ');

function sentence(rng: Rng): string {
  return Array.from({ length: 4 + rng.int(6) }, () => rng.pick(WORDS)).join(' ');
}

describe('TipIndex', () => {
  // A low threshold: the highest score band gives k tips; a high one: few tips are similar, and most bands are walked.
  // Scores share bands ([25, 26): 25 and 25.75) and go below 0, as step credits do.
  it.each([0.3, 0.85])(
    'retrieves what TipMemory retrieves (same tips, order, scores and similarities), through evictions (threshold %s)',
    async (threshold) => {
      const rng = new Rng(7);
      const embedder = new HashedNgramEmbedder({ dim: 256 });
      const settings = { capacity: 40, threshold, topK: 5 };
      const memory = new TipMemory(256, settings);
      const index = new TipIndex(256, settings);
      let id = 0;
      for (let i = 0; i < 300; i++) {
        const slot = rng.pick(['a', 'b']);
        const state = sentence(rng);
        const text = `tip ${i}: ${state}`;
        const score = rng.pick([0, 12.5, 25, 25.75, 50, 99.9, 100, -10]);
        const [key] = await embedder.embed([state]);
        expect(memory.add(slot, key, text, score)).toBe(true);
        index.add(slot, { id: id++, text, score, action: null, progress: null }, sparseKey(key));
        if (i % 10 === 9)
          for (const q of [sentence(rng), sentence(rng)]) {
            const [qk] = await embedder.embed([q]);
            for (const s of ['a', 'b']) expect(index.retrieve(s, sparseKey(qk))).toEqual(memory.retrieve(s, qk));
          }
      }
      expect(index.size('a') + index.size('b')).toBe(memory.size());
      expect(index.size('a')).toBe(40);
    },
  );

  it('keeps a key as its non-zero coordinates, and gives it back', () => {
    const dense = new Float32Array([0, 0.5, 0, -0.25, 0]);
    const key = sparseKey(dense);
    expect([...key.idx]).toEqual([1, 3]);
    expect(denseKey(key, 5)).toEqual(dense);
  });

  it('refuses a text its slot already holds', () => {
    const index = new TipIndex(4, { capacity: 10, threshold: 0, topK: 3 });
    const key = sparseKey(new Float32Array([1, 0, 0, 0]));
    index.add('s', { id: 1, text: 't', score: 1, action: null, progress: null }, key);
    expect(() => index.add('s', { id: 2, text: 't', score: 2, action: null, progress: null }, key)).toThrow(/already holds/);
  });
});
