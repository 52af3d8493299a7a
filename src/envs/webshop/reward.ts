/**
 * WebShop's reward (engine/goal.py, the version with exact size matching): for a purchase of
 * product p with chosen options at price x against goal g,
 *   reward = r_type * (attributes matched + options matched + [x <= price limit])
 *                   / (#goal attributes + #goal options + 1)
 * where r_type in {0, 0.1, 0.5, 1} checks that p is the same kind of product (same search query,
 * two shared category levels, or shared nouns in the names).
 */
import type { Product } from './data.ts';
import type { Goal } from './goals.ts';
import { tokenSetRatio } from './fuzzy.ts';
import { normalizeColor } from './normalize.ts';
import { nounWords } from './nouns.ts';

/** Options compared exactly rather than fuzzily. */
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
  /** 0..1 (can exceed 1 only in the original's corner case of more chosen options than goal options). */
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

export function optionReward(
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
    // Like the original, an unmatched option still counts when the product text mentions it.
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
): RewardResult {
  if (!(goal.price_upper > 0)) {
    throw new Error(`goal for ${goal.asin} has price limit ${goal.price_upper}; WebShop needs a positive limit`);
  }
  const type = typeReward(purchased, goal);
  const r_price = price <= goal.price_upper;
  const { r_att, num_attr_matches } = attributeReward(purchased, goal);
  const goalValues = goalOptionValues(goal);
  const { r_option, num_option_matches } = optionReward(purchased, goalValues, chosen);
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
