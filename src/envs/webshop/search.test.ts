import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { SEARCH_RETURN_N, analyze } from './search.ts';
import { loadWorld } from './world.ts';

const world = loadWorld();

describe('search analyser mimics Lucene 8 EnglishAnalyzer', () => {
  // Expected tokens were printed by Lucene 8.11.2's EnglishAnalyzer for the same text.
  it('tokenises, drops possessives and stop words, stems like Porter', () => {
    const text = "Men's Slim-Fit 2.5oz T-Shirts, 1,000 pcs ★★ comfort：bring the Running shoes ✔️ 小米 o'clock U.S.A. www.example.com";
    expect(analyze(text).join(' ')).toBe(
      "men slim fit 2.5oz t shirt 1,000 pc ★ ★ comfort：br run shoe ✔️ 小 米 o'clock u.s.a www.example.com",
    );
  });
});

describe('product search on the real catalogue', () => {
  it('returns at most 50 products, best first, ties in ASIN order', () => {
    const hits = world.search.search('women shorts');
    expect(hits.length).toBe(SEARCH_RETURN_N);
    for (let i = 1; i < hits.length; i++) {
      expect(hits[i - 1].score).toBeGreaterThanOrEqual(hits[i].score);
      if (hits[i - 1].score === hits[i].score) expect(hits[i - 1].asin < hits[i].asin).toBe(true);
    }
    expect(world.search.search('zzzzqqq')).toEqual([]);
    expect(world.search.search('the of and')).toEqual([]); // only stop words
  });

  it('a repeated query word weighs more, as Lucene boosts it by its count', () => {
    const once = world.search.search('wood pillow', 1000);
    const twice = world.search.search('wood wood pillow', 1000);
    const woodOnly = twice.find((h) => !once.some((o) => o.asin === h.asin && o.score === h.score));
    expect(woodOnly).toBeDefined();
  });

  it("agrees with Lucene's ranking on test-goal instructions", () => {
    const here = dirname(fileURLToPath(import.meta.url));
    const fixture = JSON.parse(readFileSync(join(here, 'parity', 'lucene-top10.json'), 'utf8')) as Array<{
      query: string;
      top10: string[];
    }>;
    let sameTop1 = 0;
    let overlap = 0;
    for (const { query, top10 } of fixture) {
      const ours = world.search.search(query, 10).map((h) => h.asin);
      if (ours[0] === top10[0]) sameTop1++;
      overlap += ours.filter((a) => top10.includes(a)).length / 10;
    }
    expect(sameTop1 / fixture.length).toBeGreaterThanOrEqual(0.95);
    expect(overlap / fixture.length).toBeGreaterThanOrEqual(0.95);
  });
});
