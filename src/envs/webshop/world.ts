/**
 * Everything an episode reads, built once per process and option set: catalogue, search index,
 * goals in WebShop's order, prices and splits.
 */

import {
  HUMAN_GOAL_CANDIDATES,
  findDataFile,
  loadCatalogue,
  loadHumanInstructions,
  resolveDataDir,
  type Catalogue,
  type CatalogueOptions,
} from './data.ts';
import { buildGoals, defaultSplitSizes, splitIndices, type Goal, type GoalSource, type SplitSizes } from './goals.ts';
import { ProductSearch } from './search.ts';
import type { Split } from '../types.ts';

export interface WorldOptions extends CatalogueOptions {
  /** Synthetic goals (default; built from items_ins_v2) or human goals (needs a human-goal file). */
  goals?: GoalSource;
  /** Human-goal file name or path (default items_human_ins.json, else human_goals_webshop_tasks.json). */
  humanGoalsFile?: string;
  /** Seed of the price draws (range-priced products and price limits); WebShop's process seed. Default 0. */
  goalSeed?: number;
  /** Split sizes; default test 500 and dev min(500, 10% of the rest). */
  splitSizes?: Partial<SplitSizes>;
}

export interface World {
  catalogue: Catalogue;
  search: ProductSearch;
  goals: Goal[];
  prices: Map<string, number>;
  splitSizes: SplitSizes;
  goalSource: GoalSource;
  splits: Record<Split, number[]>;
  /** Milliseconds spent building this world (0 when it came from the cache). */
  buildMs: number;
}

const worlds = new Map<string, World>();
const searches = new WeakMap<Catalogue, ProductSearch>();

export function loadWorld(opts: WorldOptions = {}): World {
  const started = performance.now();
  const goalSource = opts.goals ?? 'synthetic';
  if (goalSource !== 'synthetic' && goalSource !== 'human') {
    throw new Error(`webshop goals must be "synthetic" or "human", got "${String(goalSource)}"`);
  }
  const goalSeed = opts.goalSeed ?? 0;
  if (!Number.isSafeInteger(goalSeed)) throw new Error(`webshop goalSeed must be an integer, got ${goalSeed}`);
  const dir = resolveDataDir(opts.dataDir);
  const humanPath = goalSource === 'human' ? findDataFile(dir, opts.humanGoalsFile, HUMAN_GOAL_CANDIDATES, 'human-goal file') : undefined;
  const catalogue = loadCatalogue(opts);
  const key = JSON.stringify([catalogue.files, opts.numProducts ?? null, goalSource, humanPath ?? null, goalSeed, opts.splitSizes ?? null]);
  const cached = worlds.get(key);
  if (cached) return { ...cached, buildMs: 0 };

  let search = searches.get(catalogue);
  if (!search) {
    search = new ProductSearch(catalogue);
    searches.set(catalogue, search);
  }
  const human = humanPath ? loadHumanInstructions(humanPath) : undefined;
  const { goals, prices } = buildGoals(catalogue, goalSource, goalSeed, human);
  const defaults = defaultSplitSizes(goals.length);
  const splitSizes = { test: opts.splitSizes?.test ?? defaults.test, dev: opts.splitSizes?.dev ?? defaults.dev };
  const splits = {
    train: splitIndices(goals.length, 'train', splitSizes),
    dev: splitIndices(goals.length, 'dev', splitSizes),
    test: splitIndices(goals.length, 'test', splitSizes),
  };
  const world: World = { catalogue, search, goals, prices, splitSizes, goalSource, splits, buildMs: performance.now() - started };
  worlds.set(key, world);
  return world;
}
