import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { loadCatalogue, loadHumanInstructions, resolveDataDir } from './data.ts';
import { NO_PRICE_LIMIT, buildGoals, splitIndices } from './goals.ts';

describe('WebShop goals on the real 1000-product catalogue', () => {
  const catalogue = loadCatalogue();
  const { goals, prices } = buildGoals(catalogue, 'synthetic', 0);

  it('builds one synthetic goal per instructed product and option combination', () => {
    const instructed = catalogue.products.filter((p) => catalogue.attributes[p.asin]?.instruction);
    expect(instructed.length).toBe(415);
    const combos = instructed.reduce((n, p) => n + Object.values(p.options).reduce((m, v) => m * v.length, 1), 0);
    expect(goals.length).toBe(combos);
    expect(goals.length).toBe(6910);
  });

  // Expected goals were printed by a Python replica of WebShop's pipeline after random.seed(0).
  it("equals WebShop's goal list (order, instruction text, price limits) for goal seed 0", () => {
    expect([goals[0].asin, goals[0].instruction_text, goals[0].price_upper]).toEqual([
      'B0743JKHBV',
      'Find me double sided, machine washable decorative pillows with printing technology with size: 28" x 28", and price lower than 30.00 dollars',
      30,
    ]);
    expect([goals[1].asin, goals[1].instruction_text, goals[1].price_upper]).toEqual([
      'B09QCP4579',
      "Find me butt lifting, light weight women's shorts with high waist, tummy control with color: black, and size: 3x-large, and price lower than 50.00 dollars",
      50,
    ]);
    expect(goals[2].instruction_text).toBe(
      'Find me ready hang wall art with solid wood for living room with color: turtles and african american couple, and size: 8x10 inch, and price lower than 50.00 dollars',
    );
    expect([goals[6909].asin, goals[6909].price_upper]).toEqual(['B09NPML43M', 40]);
    expect(prices.get('B08ZRR3DZT')).toBe(26.74537481220038);
    expect(prices.get('B07MGB73NJ')).toBe(24.569544029403023);
  });

  it('draws price limits from the ten-dollar steps just above the price', () => {
    for (const g of goals) {
      const price = prices.get(g.asin)!;
      if (g.price_upper === NO_PRICE_LIMIT) {
        expect(price).toBeGreaterThan(970);
        expect(g.instruction_text).not.toContain('price lower than');
      } else {
        expect(g.price_upper % 10).toBe(0);
        expect(g.price_upper).toBeGreaterThan(price);
        expect(g.price_upper).toBeLessThanOrEqual(Math.floor(price / 10) * 10 + 40);
        expect(g.instruction_text.endsWith(`, and price lower than ${g.price_upper.toFixed(2)} dollars`)).toBe(true);
      }
    }
  });

  it('is deterministic given the seed and changes with it', () => {
    const again = buildGoals(catalogue, 'synthetic', 0).goals;
    expect(again.map((g) => g.instruction_text)).toEqual(goals.map((g) => g.instruction_text));
    const other = buildGoals(catalogue, 'synthetic', 1).goals;
    expect(other.map((g) => g.asin)).toEqual(goals.map((g) => g.asin)); // order depends only on the count
    expect(other.some((g, i) => g.price_upper !== goals[i].price_upper)).toBe(true);
  });

  it('reads human goals (task-list form) for the products in the catalogue', () => {
    const human = loadHumanInstructions(join(resolveDataDir(), 'human_goals_webshop_tasks.json'));
    expect(human.size).toBeGreaterThan(1000);
    const { goals: hg } = buildGoals(catalogue, 'human', 0, human);
    expect(hg.length).toBeGreaterThan(0);
    expect(hg.length).toBeLessThanOrEqual(13);
    for (const g of hg) {
      expect(catalogue.byAsin.has(g.asin)).toBe(true);
      expect(Array.isArray(g.goal_options)).toBe(true);
      expect(g.attributes.length).toBeGreaterThan(0);
      expect(g.instruction_text.startsWith('.')).toBe(false);
      expect(g.instruction_text).not.toMatch(/\.\s*$/);
    }
    expect(() => buildGoals(catalogue, 'human', 0)).toThrow(/human-instruction file/);
  });

  it('splits are disjoint and cover every goal: test first 500, dev last 500, train between', () => {
    const sizes = { test: 500, dev: 500 };
    const test = splitIndices(6910, 'test', sizes);
    const dev = splitIndices(6910, 'dev', sizes);
    const train = splitIndices(6910, 'train', sizes);
    expect(test).toEqual(Array.from({ length: 500 }, (_, i) => i));
    expect(dev[0]).toBe(6410);
    expect(train.length).toBe(5910);
    expect(new Set([...test, ...dev, ...train]).size).toBe(6910);
    expect(() => splitIndices(10, 'test', { test: 8, dev: 8 })).toThrow(/do not fit/);
  });
});
