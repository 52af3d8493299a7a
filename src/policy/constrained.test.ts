import { describe, expect, it } from 'vitest';
import { buildTries, TokenTrie } from './constrained.ts';

const sorted = (xs: number[]) => [...xs].sort((a, b) => a - b);

describe('TokenTrie', () => {
  // Sequences (9 = end token): [1 2 9], [1 3 9], [4 9].
  const trie = new TokenTrie([
    [1, 2, 9],
    [1, 3, 9],
    [4, 9],
  ]);

  it('allowedAfter on a hand example: root, inside, and at the end token', () => {
    expect(sorted(trie.allowedAfter([]))).toEqual([1, 4]);
    expect(sorted(trie.allowedAfter([1]))).toEqual([2, 3]);
    expect(trie.allowedAfter([1, 2])).toEqual([9]);
    expect(trie.allowedAfter([4])).toEqual([9]);
  });

  it('nothing is allowed after the end token or off the trie', () => {
    expect(trie.allowedAfter([1, 2, 9])).toEqual([]);
    expect(trie.allowedAfter([5])).toEqual([]);
    expect(trie.allowedAfter([1, 4])).toEqual([]);
  });

  // A word-level encoder stands in for the tokenizer: each word is one id.
  const words = new Map<string, number>();
  const encode = (text: string) =>
    text.split(' ').map((w) => {
      if (!words.has(w)) words.set(w, 10 + words.size);
      return words.get(w)!;
    });
  const END = 2;

  it('fromTexts: a text that is a prefix of another may end or go on (shared prefix "go")', () => {
    const t = TokenTrie.fromTexts(['go', 'go north', 'go north east', 'take key'], encode, END);
    const [go, north, east, take, key] = ['go', 'north', 'east', 'take', 'key'].map((w) => words.get(w)!);
    expect(sorted(t.allowedAfter([]))).toEqual(sorted([go, take]));
    expect(sorted(t.allowedAfter([go]))).toEqual(sorted([END, north]));
    expect(sorted(t.allowedAfter([go, north]))).toEqual(sorted([END, east]));
    expect(t.allowedAfter([go, north, east])).toEqual([END]);
    expect(t.allowedAfter([take])).toEqual([key]);
    expect(t.allowedAfter([take, key])).toEqual([END]);
    expect(t.allowedAfter([take, key, END])).toEqual([]);
  });

  it('duplicate texts collapse onto one path', () => {
    const t = TokenTrie.fromTexts(['look', 'look'], encode, END);
    expect(t.allowedAfter([])).toEqual([words.get('look')]);
    expect(t.allowedAfter([words.get('look')!])).toEqual([END]);
  });

  it('every path from the root to a leaf spells exactly one allowed text followed by the end token', () => {
    const texts = ['open red box', 'open red drawer', 'open blue box', 'inventory'];
    const t = TokenTrie.fromTexts(texts, encode, END);
    const paths: number[][] = [];
    const walk = (prefix: number[]) => {
      const next = t.allowedAfter(prefix);
      if (next.length === 0) paths.push(prefix);
      for (const id of next) walk([...prefix, id]);
    };
    walk([]);
    const expected = texts.map((s) => [...encode(s), END].join(','));
    expect(paths.map((p) => p.join(',')).sort()).toEqual(expected.sort());
  });
});

describe('buildTries', () => {
  const encode = (text: string) => [...text].map((c) => c.charCodeAt(0));

  it('builds one trie per distinct list, shared by the rows given it, and null for rows without texts', async () => {
    let encoded = 0;
    const shared = ['go', 'look'];
    const tries = await buildTries([shared, null, shared, [], ['take']], (t) => (encoded++, encode(t)), 0);
    expect(tries[0]).toBe(tries[2]);
    expect(tries[1]).toBeNull();
    expect(tries[3]).toBeNull();
    expect(tries[4]!.allowedAfter([])).toEqual(encode('t'));
    expect(encoded).toBe(3);
  });

  it('lets other work run while it tokenises a slow list, and stops once aborted', async () => {
    // An encoder that takes 1 ms a text: 300 texts are 0.3 s of work.
    const slow = (t: string) => {
      const until = performance.now() + 1;
      while (performance.now() < until);
      return encode(t);
    };
    const texts = Array.from({ length: 300 }, (_, i) => `action ${i}`);
    let ticks = 0;
    const timer = setInterval(() => ticks++, 1);
    try {
      await buildTries([texts], slow, 0);
    } finally {
      clearInterval(timer);
    }
    expect(ticks).toBeGreaterThan(5);
    const stop = new AbortController();
    setTimeout(() => stop.abort(new Error('the client has gone')), 20);
    await expect(buildTries([texts], slow, 0, stop.signal)).rejects.toThrow('the client has gone');
  });
});
