import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { tokenSetRatio } from './fuzzy.ts';
import { normalizeColor } from './normalize.ts';
import { computeReward, typeReward } from './reward.ts';
import { loadWorld } from './world.ts';

const world = loadWorld();
const byAsin = world.catalogue.byAsin;
// Goal 1: B09QCP4579, women's shorts, 4 attributes, options {color: black, size: 3x-large}, limit $50.
const goal = world.goals[1];
const product = byAsin.get(goal.asin)!;
const price = world.prices.get(goal.asin)!;
const texts = [product.Title, product.BulletPoints.join(' '), product.Description].map((t) => t.toLowerCase());

describe('WebShop reward on hand-built purchases of real products', () => {
  it('the goal is the one these cases were built for', () => {
    expect(goal.asin).toBe('B09QCP4579');
    expect(goal.goal_options).toEqual({ color: 'black', size: '3x-large' });
    expect(goal.attributes).toHaveLength(4);
    expect(price).toBeLessThanOrEqual(goal.price_upper);
  });

  it('exact match (right product, options, price) gives 1', () => {
    const r = computeReward(product, goal, price, { color: 'black', size: '3x-large' });
    expect(r.reward).toBe(1);
    expect(r.info).toMatchObject({ r_type: 1, r_att: 1, r_option: 1, r_price: true, query_match: true, category_match: true });
    expect(r.info.w_att! + r.info.w_option! + r.info.w_price!).toBeCloseTo(1, 12);
  });

  it('a wrong size is compared exactly and costs one option of seven parts', () => {
    const wrongSize = product.options.size.find((s) => s !== '3x-large' && !texts.some((t) => t.includes(s)))!;
    expect(wrongSize).toBeDefined();
    const r = computeReward(product, goal, price, { color: 'black', size: wrongSize });
    expect(r.reward).toBe((4 + 1 + 1) / 7);
    expect(r.info.r_option).toBe(0.5);
  });

  it('a wrong colour costs one option; an unchosen option counts as missing', () => {
    const wrongColor = product.options.color.find(
      (c) => tokenSetRatio('black', normalizeColor(c)) <= 85 && !texts.some((t) => t.includes(normalizeColor(c))),
    )!;
    expect(wrongColor).toBeDefined();
    expect(computeReward(product, goal, price, { color: wrongColor, size: '3x-large' }).reward).toBe(6 / 7);
    expect(computeReward(product, goal, price, {}).reward).toBe((4 + 0 + 1) / 7);
  });

  it('over the price limit loses the price part', () => {
    const strict = { ...goal, price_upper: 10 };
    expect(price).toBeGreaterThan(10);
    const r = computeReward(product, strict, price, { color: 'black', size: '3x-large' });
    expect(r.reward).toBe(6 / 7);
    expect(r.info.r_price).toBe(false);
  });

  it('a product of another type (no shared nouns, query or category) gives 0', () => {
    const table = byAsin.get('B06Y3VLDFB')!; // a reclaimed-wood console table
    const t = typeReward(table, goal);
    expect(t).toMatchObject({ query_match: false, category_match: false, title_score: 0, r_type: 0 });
    expect(computeReward(table, goal, world.prices.get(table.asin)!, {}).reward).toBe(0);
  });

  it('r_type steps with the title score when query and category differ: 1 above 0.2, 0.5 up to 0.2, 0.1 below 0.1', () => {
    const base = { ...goal, query: 'no such query', product_category: 'Nowhere › Else' };
    // The bought shorts share only "shorts" with these goal names; every word of them is tagged a noun.
    const cases: Array<[string, number, number]> = [
      ['Shorts Table Chair', 3, 1],
      ['Shorts Table Chair Lamp Desk', 5, 0.5],
      ['Shorts Table Chair Lamp Desk Bed Rug Shelf Stool Bench Sofa', 11, 0.1],
    ];
    for (const [name, nouns, rType] of cases) {
      const t = typeReward(product, { ...base, name });
      expect(t.title_score, name).toBeCloseTo(1 / nouns, 12);
      expect(t.r_type, name).toBe(rType);
    }
  });

  it('colour normalisation maps option values to the first base colour they contain', () => {
    expect(normalizeColor('dark navy')).toBe('dark');
    expect(normalizeColor('navy blue')).toBe('blue');
    expect(normalizeColor('standard')).toBe('tan'); // substring match, as in the original
    expect(normalizeColor('3x-large')).toBe('3x-large');
  });

  // Values printed by thefuzz 0.19.0 (difflib) in Python.
  it('token_set_ratio equals thefuzz 0.19.0', () => {
    const cases: Array<[string, string, number]> = [
      ['high waist', 'high-waisted', 91],
      ['machine washable', 'machine wash', 86],
      ['café_latte ™ blend', 'cafe latte blend', 90],
      ['navy blue', 'blue', 100],
      ['x-large', 'xx-large', 93],
      ['long lasting', 'long-lasting', 100],
      ['a', 'b', 0],
    ];
    for (const [a, b, expected] of cases) expect(tokenSetRatio(a, b), `${a} | ${b}`).toBe(expected);
  });
});

describe('reward parity with the Python reference (thefuzz 0.19.0, same nouns)', () => {
  const fixturePath = join(dirname(fileURLToPath(import.meta.url)), 'parity', 'reward-fixture.json');
  const fixture = JSON.parse(readFileSync(fixturePath, 'utf8')) as Array<{
    goalIndex: number; kind: string; purchased: string; price: number; priceUpper: number; options: Record<string, string>; reward: number;
  }>;

  it(`all ${fixture.length} recorded purchases get the reference reward`, () => {
    expect(fixture.length).toBeGreaterThan(400);
    const kinds = new Set(fixture.map((c) => c.kind));
    expect([...kinds]).toEqual(expect.arrayContaining(['exact', 'no-options', 'over-price', 'other-product']));
    for (const c of fixture) {
      const g = { ...world.goals[c.goalIndex], price_upper: c.priceUpper };
      const r = computeReward(byAsin.get(c.purchased)!, g, c.price, c.options);
      expect(r.reward, `goal ${c.goalIndex} ${c.kind} ${c.purchased}`).toBe(c.reward);
    }
  });
});
