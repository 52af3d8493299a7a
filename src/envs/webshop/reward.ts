/**
 * WebShop's reward (engine/goal.py): for a purchase of product p with chosen options at price x
 * against goal g,
 *   reward = r_type * (attributes matched + options matched + [x <= price limit])
 *                   / (#goal attributes + #goal options + 1)
 * where r_type in {0, 0.1, 0.5, 1} checks that p is the same kind of product (same search query,
 * two shared category levels, or shared nouns in the names).
 *
 * Two revisions of the original differ only in how options are matched (see REWARD_REVISIONS);
 * both are checked against the original functions in parity/.
 */
import type { Product } from './data.ts';
import type { Goal } from './goals.ts';
import { tokenSetRatio } from './fuzzy.ts';
import { COLOR_SET, normalizeColor } from './normalize.ts';
import { nounWords } from './nouns.ts';

/**
 * Revisions of WebShop's goal.py this port reproduces:
 *  - `master`: princeton-nlp/WebShop's master branch, unchanged since the paper; what the paper-era
 *    code, verl-agent and AgentGym run, so what published WebShop numbers mean;
 *  - `v2-6ba9969`: commit 6ba9969 "Finer matching for options" of the unmerged v2 branch (exact
 *    size matching, per-chosen-option counting with a product-text fallback). It can score above
 *    1, as the original commit does, when more options are chosen than the goal names.
 */
export const REWARD_REVISIONS = ['master', 'v2-6ba9969'] as const;
export type RewardRevision = (typeof REWARD_REVISIONS)[number];
export const DEFAULT_REWARD_REVISION: RewardRevision = 'master';

/** Checks a revision name from options or a config; `where` names the setting in the error. */
export function parseRewardRevision(value: unknown, where = 'webshop rewardRevision'): RewardRevision {
  if (value === undefined) return DEFAULT_REWARD_REVISION;
  if (typeof value === 'string' && (REWARD_REVISIONS as readonly string[]).includes(value)) return value as RewardRevision;
  throw new Error(`${where} must be one of ${REWARD_REVISIONS.join(', ')}; got ${JSON.stringify(value)}`);
}

/** v2-6ba9969: options compared exactly rather than fuzzily. */
const EXACT_MATCH_OPTIONS = ['size'];
/** token_set_ratio must exceed this for a fuzzy match. */
const FUZZY_THRESHOLD = 85;

export interface TypeReward {
  r_type: number;
  query_match: boolean;
  category_match: boolean;
  title_score: number;
}

export interface RewardInfo extends TypeReward {
  r_att: number;
  w_att: number;
  r_option?: number;
  w_option?: number;
  r_price?: boolean;
  w_price?: number;
}

export interface RewardResult {
  /** 0..1 (v2-6ba9969 only: above 1 when more options are chosen than the goal names, as in that commit). */
  reward: number;
  info: RewardInfo;
  num_attr_matches: number;
  num_option_matches: number;
}

function categoryLevels(productCategory: string): Set<string> {
  return new Set(productCategory.split('›').map((x) => x.trim()));
}

export function typeReward(purchased: Product, goal: Goal): TypeReward {
  const query_match = purchased.query === goal.query;
  const goalLevels = categoryLevels(goal.product_category);
  let shared = 0;
  for (const level of categoryLevels(purchased.product_category)) if (goalLevels.has(level)) shared++;
  const category_match = shared >= 2;

  const purchasedNouns = new Set(nounWords(purchased.name));
  const desiredNouns = nounWords(goal.name);
  let title_score: number;
  if (desiredNouns.length === 0) {
    title_score = 0.2;
  } else {
    let common = 0;
    for (const w of new Set(desiredNouns)) if (purchasedNouns.has(w)) common++;
    title_score = common / desiredNouns.length;
  }

  let r_type = 1.0;
  if (!(query_match || category_match || title_score > 0.2)) r_type = 0.5;
  if (title_score < 0.1) r_type = 0.1;
  if (title_score === 0.0) r_type = 0.0;
  return { r_type, query_match, category_match, title_score };
}

/** Text the reward searches when an attribute or option is not found otherwise. */
function productTexts(p: Product): string[] {
  return [p.Title.toLowerCase(), p.BulletPoints.join(' ').toLowerCase(), p.Description.toLowerCase()];
}

export function attributeReward(purchased: Product, goal: Goal): { r_att: number; num_attr_matches: number } {
  const texts = productTexts(purchased);
  let matches = 0;
  for (const goalAttr of goal.attributes) {
    const matched = purchased.Attributes.some((p) => tokenSetRatio(p, goalAttr) > FUZZY_THRESHOLD);
    if (matched || texts.some((t) => t.includes(goalAttr))) matches++;
  }
  return { r_att: matches / goal.attributes.length, num_attr_matches: matches };
}

export function goalOptionValues(goal: Goal): string[] {
  return Array.isArray(goal.goal_options) ? goal.goal_options : Object.values(goal.goal_options);
}

/**
 * Python's repr of a string, as far as it matters once thefuzz has turned every non-word character
 * into a space: the letters and digits of escapes (\n, \x85, \u2028, ...) survive that clean-up.
 */
function pythonRepr(s: string): string {
  let out = '';
  for (const ch of s) {
    const code = ch.codePointAt(0)!;
    if (ch === '\\') out += '\\\\';
    else if (ch === '\n') out += '\\n';
    else if (ch === '\r') out += '\\r';
    else if (ch === '\t') out += '\\t';
    else if (ch !== ' ' && /[\p{C}\p{Z}]/u.test(ch)) {
      const hex = code.toString(16);
      out += code < 0x100 ? `\\x${hex.padStart(2, '0')}` : code < 0x10000 ? `\\u${hex.padStart(4, '0')}` : `\\U${hex.padStart(8, '0')}`;
    } else out += ch;
  }
  return `'${out}'`;
}

/**
 * master: goal options of a synthetic goal reach the matcher as (name, value) pairs (goal.py passes
 * `goal_options.items()`); human goals' options are plain values. normalize_color's `in` test is
 * then tuple membership, so a pair becomes a colour only when its name or value IS a colour word,
 * and thefuzz compares the pair's text, str((name, value)), with the chosen value.
 */
function masterGoalOptions(goal: Goal): string[] {
  if (Array.isArray(goal.goal_options)) return goal.goal_options.map(normalizeColor);
  return Object.entries(goal.goal_options).map(([name, value]) => {
    const colour = COLOR_SET.find((c) => c === name || c === value);
    return colour ?? `(${pythonRepr(name)}, ${pythonRepr(value)})`;
  });
}

/**
 * master's get_option_reward: for each goal option, does any chosen value fuzzily match it
 * (token_set_ratio > 85)? At most one match per goal option, so r_option <= 1; no exact matching
 * and no product-text fallback.
 */
export function optionRewardMaster(
  goal: Goal,
  chosen: Record<string, string>,
): { r_option: number | undefined; num_option_matches: number } {
  const goalOptions = masterGoalOptions(goal);
  const chosenValues = Object.values(chosen).map(normalizeColor);
  let matches = 0;
  for (const g of goalOptions) {
    if (chosenValues.some((p) => tokenSetRatio(p, g) > FUZZY_THRESHOLD)) matches++;
  }
  return { r_option: goalOptions.length > 0 ? matches / goalOptions.length : undefined, num_option_matches: matches };
}

/**
 * v2-6ba9969's get_option_reward: for each chosen option, exact match for size, fuzzy otherwise,
 * against the goal's colour-normalised values; an unmatched chosen value still counts when the
 * product text contains it. Counting per chosen option lets matches exceed the goal's options.
 */
export function optionRewardV2(
  purchased: Product,
  goalOptions: string[],
  chosen: Record<string, string>,
): { r_option: number | undefined; num_option_matches: number } {
  const goalValues = goalOptions.map(normalizeColor);
  const texts = productTexts(purchased);
  let matches = 0;
  for (const [name, rawValue] of Object.entries(chosen)) {
    const value = normalizeColor(rawValue);
    let matched: boolean;
    if (EXACT_MATCH_OPTIONS.includes(name.toLowerCase())) {
      matched = goalValues.includes(value);
    } else {
      matched = goalValues.some((g) => tokenSetRatio(g, value) > FUZZY_THRESHOLD);
    }
    if (matched || texts.some((t) => t.includes(value))) matches++;
  }
  return {
    r_option: goalValues.length > 0 ? matches / goalValues.length : undefined,
    num_option_matches: matches,
  };
}

/** get_reward(purchased_product, goal, price, options). */
export function computeReward(
  purchased: Product,
  goal: Goal,
  price: number,
  chosen: Record<string, string>,
  revision: RewardRevision = DEFAULT_REWARD_REVISION,
): RewardResult {
  if (!(goal.price_upper > 0)) {
    throw new Error(`goal for ${goal.asin} has price limit ${goal.price_upper}; WebShop needs a positive limit`);
  }
  const type = typeReward(purchased, goal);
  const r_price = price <= goal.price_upper;
  const { r_att, num_attr_matches } = attributeReward(purchased, goal);
  const goalValues = goalOptionValues(goal);
  const { r_option, num_option_matches } =
    revision === 'master' ? optionRewardMaster(goal, chosen) : optionRewardV2(purchased, goalValues, chosen);
  const denominator = goal.attributes.length + goalValues.length + 1;
  let reward = (num_attr_matches + num_option_matches + (r_price ? 1 : 0)) / denominator;
  reward *= type.r_type;
  const info: RewardInfo = { ...type, r_att, w_att: goal.attributes.length / denominator };
  if (r_option !== undefined) {
    info.r_option = r_option;
    info.w_option = goalValues.length / denominator;
  }
  info.r_price = r_price;
  info.w_price = 1 / denominator;
  return { reward, info, num_attr_matches, num_option_matches };
}
