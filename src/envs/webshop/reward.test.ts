import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { tokenSetRatio } from './fuzzy.ts';
import { normalizeColor } from './normalize.ts';
import { computeReward, parseRewardRevision, REWARD_REVISIONS, typeReward, type RewardRevision } from './reward.ts';
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

  it('v2-6ba9969 compares a size exactly: a wrong size costs one option of seven parts', () => {
    const wrongSize = product.options.size.find((s) => s !== '3x-large' && !texts.some((t) => t.includes(s)))!;
    expect(wrongSize).toBeDefined();
    const r = computeReward(product, goal, price, { color: 'black', size: wrongSize }, 'v2-6ba9969');
    expect(r.reward).toBe((4 + 1 + 1) / 7);
    expect(r.info.r_option).toBe(0.5);
  });

  it('master compares a size fuzzily with the goal\'s (name, value) pair: "large" matches "3x-large", "small" does not', () => {
    // str(('size', '3x-large')) -> tokens {size, 3x, large}: "large" is a subset, so token_set_ratio is 100.
    expect(computeReward(product, goal, price, { color: 'black', size: 'large' }).reward).toBe(1);
    expect(computeReward(product, goal, price, { color: 'black', size: 'large' }, 'v2-6ba9969').reward).toBe(6 / 7);
    const small = computeReward(product, goal, price, { color: 'black', size: 'small' });
    expect(small.reward).toBe(6 / 7);
    expect(small.info.r_option).toBe(0.5);
  });

  it('master: a chosen value the goal does not name is not rescued by the product text', () => {
    // Goal 20 wants color "r.brown2070": the chosen value normalises to "brown", the goal pair stays
    // ('color', 'r.brown2070'), the two share no word; v2-6ba9969 normalises both sides to "brown".
    const g = world.goals[20];
    const p = byAsin.get(g.asin)!;
    expect(g.goal_options).toEqual({ color: 'r.brown2070', size: '7' });
    const chosen = { color: 'r.brown2070', size: '7' };
    expect(computeReward(p, g, world.prices.get(g.asin)!, chosen).info.r_option).toBe(0.5);
    expect(computeReward(p, g, world.prices.get(g.asin)!, chosen, 'v2-6ba9969').info.r_option).toBe(1);
  });

  it('a wrong colour costs one option; an unchosen option counts as missing', () => {
    const wrongColor = product.options.color.find(
      (c) => tokenSetRatio('black', normalizeColor(c)) <= 85 && !texts.some((t) => t.includes(normalizeColor(c))),
    )!;
    expect(wrongColor).toBeDefined();
    for (const revision of REWARD_REVISIONS) {
      expect(computeReward(product, goal, price, { color: wrongColor, size: '3x-large' }, revision).reward, revision).toBe(6 / 7);
      expect(computeReward(product, goal, price, {}, revision).reward, revision).toBe((4 + 0 + 1) / 7);
    }
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

describe('human goal with options ["pink"]: the goal product with colour and size chosen', () => {
  // Human goal 6 (B08G14B779, pink cupcake toppers): the product offers a colour and a size, the
  // goal names only "pink". v2-6ba9969 counts per chosen option and lets the size count through
  // the product text, 2 matches for 1 goal option; master counts per goal option.
  const human = loadWorld({ goals: 'human' });
  const g = human.goals.find((x) => JSON.stringify(x.goal_options) === '["pink"]' && human.catalogue.byAsin.get(x.asin)!.options.size)!;
  const p = human.catalogue.byAsin.get(g.asin)!;
  const chosen = { color: 'pink', size: p.options.size[0] };

  it('scores 1 with the default (master) reward, never above', () => {
    expect(Object.keys(p.options).sort()).toEqual(['color', 'size']);
    const r = computeReward(p, g, human.prices.get(g.asin)!, chosen);
    expect(r.reward).toBe(1);
    expect(r.info.r_option).toBe(1);
  });

  it("scores 4/3 with v2-6ba9969, as that commit's get_reward does (recorded in the parity fixture)", () => {
    expect(computeReward(p, g, human.prices.get(g.asin)!, chosen, 'v2-6ba9969').reward).toBeCloseTo(4 / 3, 12);
  });
});

describe("reward parity with WebShop's original get_reward, both revisions (same nouns)", () => {
  const fixturePath = join(dirname(fileURLToPath(import.meta.url)), 'parity', 'reward-fixture.json');
  const fixture = JSON.parse(readFileSync(fixturePath, 'utf8')) as Array<{
    source: 'synthetic' | 'human';
    goalIndex: number;
    kind: string;
    purchased: string;
    price: number;
    priceUpper: number;
    options: Record<string, string>;
    reward: Record<RewardRevision, number>;
  }>;
  const worlds = { synthetic: world, human: loadWorld({ goals: 'human' }) };

  it("the fixture covers both goal sources, the revisions' disagreements and rewards above 1", () => {
    expect(fixture.length).toBeGreaterThan(2000);
    expect(new Set(fixture.map((c) => c.source))).toEqual(new Set(['synthetic', 'human']));
    expect([...new Set(fixture.map((c) => c.kind))]).toEqual(
      expect.arrayContaining(['exact', 'no-options', 'wrong-size', 'wrong-color', 'over-price', 'other-product']),
    );
    expect(fixture.filter((c) => c.reward.master !== c.reward['v2-6ba9969']).length).toBeGreaterThan(1000);
    expect(Math.max(...fixture.map((c) => c.reward.master))).toBe(1);
    expect(Math.max(...fixture.map((c) => c.reward['v2-6ba9969']))).toBeGreaterThan(1);
  });

  for (const revision of REWARD_REVISIONS) {
    it(`${revision}: every recorded purchase gets the original's reward`, () => {
      let mismatches = 0;
      const examples: string[] = [];
      for (const c of fixture) {
        const w = worlds[c.source];
        const g = { ...w.goals[c.goalIndex], price_upper: c.priceUpper };
        const r = computeReward(w.catalogue.byAsin.get(c.purchased)!, g, c.price, c.options, revision).reward;
        if (Math.abs(r - c.reward[revision]) > 1e-12) {
          mismatches++;
          if (examples.length < 5) examples.push(`${c.source} goal ${c.goalIndex} ${c.kind} ${c.purchased}: ${r} vs ${c.reward[revision]}`);
        }
      }
      expect(examples).toEqual([]);
      expect(mismatches).toBe(0);
    });
  }

  it('an unknown revision name is refused, naming the setting and the known names', () => {
    expect(() => parseRewardRevision('v2')).toThrow('webshop rewardRevision must be one of master, v2-6ba9969; got "v2"');
    expect(() => parseRewardRevision(3, 'env.options.rewardRevision')).toThrow(/^env\.options\.rewardRevision must be one of/);
    expect(parseRewardRevision(undefined)).toBe('master');
  });
});
