/**
 * Goals as WebShop builds them (engine/goal.py): synthetic goals, one per product with a synthetic
 * instruction x each combination of its options, or human goals from a human-instruction file; a
 * price limit drawn from the ten-dollar steps above the product's price; then the fixed shuffle
 * `random.seed(233); random.shuffle(goals)`. All random draws go through a CPython-identical
 * generator, so with goalSeed S the goals equal what WebShop produces after `random.seed(S)`.
 */
import type { Catalogue, HumanInstruction, Product } from './data.ts';
import { PyRandom } from './pyrandom.ts';

export type GoalSource = 'synthetic' | 'human';

export interface Goal {
  asin: string;
  category: string;
  query: string;
  /** The target product's name; the type reward compares nouns of this with the bought product's name. */
  name: string;
  product_category: string;
  instruction_text: string;
  attributes: string[];
  price_upper: number;
  /** Synthetic goals: option name -> value; human goals: a list of option values. */
  goal_options: Record<string, string> | string[];
  weight: number;
  source: GoalSource;
}

/** Price limits are multiples of ten dollars below 1000 (WebShop's PRICE_RANGE). */
const PRICE_RANGE = Array.from({ length: 99 }, (_, i) => 10.0 * (i + 1));
/** WebShop's "no limit" value when the price is too high for two steps above it. */
export const NO_PRICE_LIMIT = 1000000;
/** The fixed seed WebShop shuffles its goal list with. */
export const GOAL_SHUFFLE_SEED = 233;

/** generate_product_prices: a fixed price, or one drawn uniformly from the [low, high] range. */
export function generateProductPrices(products: Product[], rng: PyRandom): Map<string, number> {
  const prices = new Map<string, number>();
  for (const p of products) {
    let price: number;
    if (p.pricing.length === 0) price = 100.0;
    else if (p.pricing.length === 1) price = p.pricing[0];
    else price = rng.uniform(p.pricing[0], p.pricing[1]);
    prices.set(p.asin, price);
  }
  return prices;
}

function drawPriceLimit(price: number, rng: PyRandom): { upper: number; text: string } {
  const range = PRICE_RANGE.filter((p) => p > price).slice(0, 4);
  if (range.length < 2) return { upper: NO_PRICE_LIMIT, text: '' };
  const [a, b] = rng.sample(range, 2);
  const upper = Math.max(a, b);
  return { upper, text: `, and price lower than ${upper.toFixed(2)} dollars` };
}

/** Cartesian product in itertools.product order (last list varies fastest). */
function cartesian(lists: string[][]): string[][] {
  let out: string[][] = [[]];
  for (const list of lists) {
    const next: string[][] = [];
    for (const prefix of out) for (const v of list) next.push([...prefix, v]);
    out = next;
  }
  return out;
}

/** Python's str.strip(chars) for one character. */
function stripChar(s: string, ch: string): string {
  let start = 0;
  let end = s.length;
  while (start < end && s[start] === ch) start++;
  while (end > start && s[end - 1] === ch) end--;
  return s.slice(start, end);
}

export function syntheticGoals(catalogue: Catalogue, prices: Map<string, number>, rng: PyRandom): Goal[] {
  const goals: Goal[] = [];
  const attributeCounts = new Map<string, number>();
  for (const product of catalogue.products) {
    const entry = catalogue.attributes[product.asin];
    const instruction = entry?.instruction;
    if (instruction === undefined || instruction === null) continue;
    const attributes = entry?.instruction_attributes ?? [];
    if (attributes.length === 0) {
      throw new Error(`attribute file: product ${product.asin} has an instruction but no instruction_attributes`);
    }
    const { upper, text: priceText } = drawPriceLimit(prices.get(product.asin)!, rng);
    const optionNames = Object.keys(product.options).sort();
    for (const combination of cartesian(optionNames.map((n) => product.options[n]))) {
      const goalOptions: Record<string, string> = {};
      combination.forEach((value, i) => (goalOptions[optionNames[i]] = value));
      const optionText = Object.entries(goalOptions)
        .map(([k, v]) => `${k}: ${v}`)
        .join(', and ');
      goals.push({
        asin: product.asin,
        category: product.category,
        query: product.query,
        name: product.Title,
        product_category: product.product_category,
        instruction_text: `${instruction}${optionText ? ` with ${optionText}` : ''}${priceText}`,
        attributes,
        price_upper: upper,
        goal_options: goalOptions,
        weight: 0,
        source: 'synthetic',
      });
      for (const a of attributes) attributeCounts.set(a, (attributeCounts.get(a) ?? 0) + 1);
    }
  }
  // Rarer attributes weigh more when goals are sampled at random (WebShop's goal weights).
  for (const g of goals) {
    g.weight = g.attributes.reduce((sum, a) => sum + 1 / attributeCounts.get(a)!, 0) / g.attributes.length;
  }
  return goals;
}

export function humanGoals(
  catalogue: Catalogue,
  human: Map<string, HumanInstruction[]>,
  prices: Map<string, number>,
  rng: PyRandom,
): Goal[] {
  const goals: Goal[] = [];
  for (const product of catalogue.products) {
    const list = human.get(product.asin);
    if (!list) continue;
    for (const ins of list) {
      if (ins.instruction_attributes.length === 0) continue; // WebShop skips these
      const { upper, text: priceText } = drawPriceLimit(prices.get(product.asin)!, rng);
      goals.push({
        asin: product.asin,
        category: product.category,
        query: product.query,
        name: product.name,
        product_category: product.product_category,
        instruction_text: stripChar(ins.instruction, '.') + priceText,
        attributes: ins.instruction_attributes,
        price_upper: upper,
        goal_options: ins.instruction_options,
        weight: 1,
        source: 'human',
      });
    }
  }
  return goals;
}

export interface GoalSet {
  goals: Goal[];
  /** Price paid for each product (drawn once per process in WebShop; once per goalSeed here). */
  prices: Map<string, number>;
}

/**
 * The goal list in WebShop's final order. goalSeed plays the role of the seed WebShop's process
 * had when it loaded products: it fixes the prices of range-priced products and the price limits.
 */
export function buildGoals(catalogue: Catalogue, source: GoalSource, goalSeed: number, human?: Map<string, HumanInstruction[]>): GoalSet {
  const rng = new PyRandom(goalSeed);
  const prices = generateProductPrices(catalogue.products, rng);
  let goals: Goal[];
  if (source === 'human') {
    if (!human) throw new Error('human goals need a human-instruction file (items_human_ins.json)');
    goals = humanGoals(catalogue, human, prices, rng);
  } else {
    goals = syntheticGoals(catalogue, prices, rng);
  }
  if (goals.length === 0) {
    throw new Error(`no ${source} goals: none of the ${catalogue.products.length} products has an instruction`);
  }
  new PyRandom(GOAL_SHUFFLE_SEED).shuffle(goals);
  return { goals, prices };
}

export interface SplitSizes {
  /** Goals [0, test) are the test split (default 500, the convention of recent papers). */
  test: number;
  /** The last `dev` goals are the dev split; train is what lies between. */
  dev: number;
}

export function defaultSplitSizes(total: number): SplitSizes {
  const test = Math.min(500, Math.floor(total / 2));
  const dev = Math.min(500, Math.floor((total - test) / 10));
  return { test, dev };
}

/** Disjoint index ranges: test = first `test`, dev = last `dev`, train = the rest. */
export function splitIndices(total: number, split: 'train' | 'dev' | 'test', sizes: SplitSizes): number[] {
  if (sizes.test < 0 || sizes.dev < 0 || sizes.test + sizes.dev > total) {
    throw new Error(`split sizes test=${sizes.test} dev=${sizes.dev} do not fit in ${total} goals`);
  }
  const range = (a: number, b: number) => Array.from({ length: Math.max(0, b - a) }, (_, i) => a + i);
  if (split === 'test') return range(0, sizes.test);
  if (split === 'dev') return range(total - sizes.dev, total);
  if (split === 'train') return range(sizes.test, total - sizes.dev);
  throw new Error(`unknown split "${split}" (expected train, dev or test)`);
}
