import { describe, expect, it } from 'vitest';
import { HashedNgramEmbedder, words } from './hashed.ts';

const dot = (a: Float32Array, b: Float32Array) => a.reduce((sum, x, i) => sum + x * b[i], 0);
const norm = (a: Float32Array) => Math.sqrt(dot(a, a));

const KITCHEN = 'You are in the kitchen. You see: a fridge, a stove (turned off), a sink and 3 red apples on the counter.';
const KITCHEN_REWORDED = 'In the kitchen you can see a sink, a fridge, a stove that is turned off, and three red apples on a counter.';
const SHOP = 'Instruction: i need a long clip-in hair extension which is natural looking, and price lower than 40.00 dollars';

describe('words', () => {
  it('lower-cases and splits on everything that is not a letter, digit or mark', () => {
    expect(words('  Hello, WORLD!  clip-in 40.00\tx_y ')).toEqual(['hello', 'world', 'clip', 'in', '40', '00', 'x', 'y']);
    expect(words('')).toEqual([]);
    expect(words('... !!! ---')).toEqual([]);
  });

  it('treats composed and decomposed accents, ligatures and full-width letters alike', () => {
    expect(words('Cafe\u0301 NAÏVE')).toEqual(words('Café naïve'));
    expect(words('ﬁle ＡＢＣ')).toEqual(['file', 'abc']);
    expect(words('東京 tower')).toEqual(['東京', 'tower']);
  });
});

describe('HashedNgramEmbedder', () => {
  const embedder = new HashedNgramEmbedder();

  it('returns unit vectors of the requested size, deterministically', async () => {
    const [a, b] = await embedder.embed([KITCHEN, KITCHEN]);
    expect(a.length).toBe(1024);
    expect(norm(a)).toBeCloseTo(1, 5);
    expect(dot(a, b)).toBeCloseTo(1, 6);
    // A separate instance (fresh internal state) gives the same bits.
    const [c] = await new HashedNgramEmbedder().embed([KITCHEN]);
    expect(Array.from(c)).toEqual(Array.from(a));
    expect(embedder.name).toBe('hashed-ngram-1024');
  });

  it('respects dim, including sizes that are not powers of two', async () => {
    for (const dim of [1, 7, 300, 4096]) {
      const e = new HashedNgramEmbedder({ dim });
      const [v] = await e.embed([SHOP]);
      expect(v.length).toBe(dim);
      expect(e.dim).toBe(dim);
      expect(norm(v)).toBeCloseTo(1, 5);
    }
  });

  it('scores reworded text above unrelated text', async () => {
    const [kitchen, reworded, shop] = await embedder.embed([KITCHEN, KITCHEN_REWORDED, SHOP]);
    const related = dot(kitchen, reworded);
    const unrelated = dot(kitchen, shop);
    expect(related).toBeGreaterThan(0.7);
    expect(unrelated).toBeLessThan(0.2);
    expect(related).toBeGreaterThan(unrelated + 0.3);
  });

  it('ignores case and punctuation differences', async () => {
    const [a, b] = await embedder.embed(['Open the DOOR to the hallway!', 'open the door, to the hallway']);
    expect(dot(a, b)).toBeCloseTo(1, 6);
  });

  it('sees word order through bigrams', async () => {
    const [a, b] = await embedder.embed(['move the red box onto the blue table', 'move the blue box onto the red table']);
    const similarity = dot(a, b);
    expect(similarity).toBeLessThan(0.999);
    expect(similarity).toBeGreaterThan(0.7);
  });

  it('uses sublinear term frequency', async () => {
    // With raw tf the repeated word would dominate; with 1 + ln tf it stays one feature among many.
    const [once, many, other] = await embedder.embed([
      'apple banana cherry',
      'apple apple apple apple apple apple apple apple banana cherry',
      'banana cherry',
    ]);
    expect(dot(once, many)).toBeGreaterThan(0.8);
    expect(dot(many, other)).toBeGreaterThan(0.35);
  });

  it('weights each feature by exactly 1 + ln(tf)', async () => {
    const unigrams = new HashedNgramEmbedder({ bigramWeight: 0, charTrigramWeight: 0, dim: 1 << 20 });
    const [v] = await unigrams.embed(['apple banana banana banana']);
    const magnitudes = Array.from(v)
      .filter((x) => x !== 0)
      .map(Math.abs)
      .sort((a, b) => a - b);
    expect(magnitudes).toHaveLength(2);
    expect(magnitudes[1] / magnitudes[0]).toBeCloseTo(1 + Math.log(3), 5);
  });

  it('handles texts with thousands of distinct features, and is unaffected by what it embedded before', async () => {
    const huge = Array.from({ length: 5000 }, (_, i) => `w${i.toString(36)}x${(i * 7919).toString(36)}`).join(' ');
    const used = new HashedNgramEmbedder();
    const [before] = await used.embed([KITCHEN]);
    const [big] = await used.embed([huge]);
    const [after] = await used.embed([KITCHEN]);
    const [fresh] = await new HashedNgramEmbedder().embed([huge]);
    expect(norm(big)).toBeCloseTo(1, 5);
    expect(Array.from(big)).toEqual(Array.from(fresh));
    expect(Array.from(after)).toEqual(Array.from(before));
  });

  it('maps text with no words to the zero vector', async () => {
    const vectors = await embedder.embed(['', '   ', '?!.,;', KITCHEN]);
    for (const v of vectors.slice(0, 3)) expect(v.every((x) => x === 0)).toBe(true);
    expect(norm(vectors[3])).toBeCloseTo(1, 5);
    expect(await embedder.embed([])).toEqual([]);
  });

  it('keeps feature kinds apart: the word "abc" and the trigram "abc" differ', async () => {
    const onlyWords = new HashedNgramEmbedder({ bigramWeight: 0, charTrigramWeight: 0 });
    const onlyTrigrams = new HashedNgramEmbedder({ unigramWeight: 0, bigramWeight: 0 });
    expect(onlyWords.name).toBe('hashed-ngram-1024-w1-0-0');
    const [w] = await onlyWords.embed(['a']);
    const [t] = await onlyTrigrams.embed(['a']); // only the trigram "<a>"
    expect(w.filter((x) => x !== 0).length).toBe(1);
    expect(t.filter((x) => x !== 0).length).toBe(1);
    expect(Math.abs(dot(w, t))).toBeLessThan(1);
  });

  it('rejects bad options and bad input with a clear message', async () => {
    expect(() => new HashedNgramEmbedder({ dim: 0 })).toThrow(/dim must be an integer/);
    expect(() => new HashedNgramEmbedder({ dim: 2.5 })).toThrow(/dim must be an integer/);
    expect(() => new HashedNgramEmbedder({ bigramWeight: -1 })).toThrow(/bigramWeight must be a finite number/);
    expect(() => new HashedNgramEmbedder({ unigramWeight: 0, bigramWeight: 0, charTrigramWeight: 0 })).toThrow(/at least one/);
    await expect(embedder.embed(['ok', 3 as unknown as string])).rejects.toThrow(/texts\[1\] is number/);
  });
});
