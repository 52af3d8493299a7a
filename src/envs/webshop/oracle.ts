/**
 * The scripted oracle of the issue: search with the goal's instruction, open the goal's product if
 * it is on a results page, choose the goal's options, buy. It shows what search quality alone
 * allows; it never peeks at anything an agent could not type except the target ASIN.
 */
import type { Env, StepResult } from '../types.ts';
import type { Goal } from './goals.ts';
import { WEBSHOP_TASK } from './env.ts';

export interface OracleResult {
  goalIndex: number;
  found: boolean;
  /** 1-based rank of the goal product in the results, if it was found. */
  rank: number | null;
  reward: number;
  steps: number;
  last: StepResult | null;
}

export async function runOracle(env: Env, goal: Goal, goalIndex: number): Promise<OracleResult> {
  await env.reset(WEBSHOP_TASK, goalIndex);
  let steps = 0;
  let last: StepResult | null = null;
  const act = async (a: string) => {
    steps++;
    last = await env.step(a);
    return last;
  };
  let r = await act(`search[${goal.instruction_text}]`);
  const target = `click[${goal.asin.toLowerCase()}]`;
  let page = 1;
  while (!r.validActions.includes(target) && r.validActions.includes('click[next >]') && !r.done) {
    r = await act('click[next >]');
    page++;
  }
  if (!r.validActions.includes(target)) return { goalIndex, found: false, rank: null, reward: 0, steps, last };
  const position = r.observation
    .split(' [SEP] ')
    .filter((s) => /^[A-Z0-9]{10}$/.test(s))
    .indexOf(goal.asin);
  const rank = (page - 1) * 10 + position + 1;
  r = await act(target);
  const values = Array.isArray(goal.goal_options) ? goal.goal_options : Object.values(goal.goal_options);
  for (const v of values) {
    if (r.done) break;
    if (r.validActions.includes(`click[${v}]`)) r = await act(`click[${v}]`);
  }
  if (!r.done) r = await act('click[buy now]');
  const reward = typeof r.info?.webshopReward === 'number' ? (r.info.webshopReward as number) : 0;
  return { goalIndex, found: true, rank, reward, steps, last };
}
