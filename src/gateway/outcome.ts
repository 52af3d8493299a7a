/**
 * What an agent may report at the end of an episode, checked before it becomes the episode's reward:
 * a reward in [0, 1] (1 is success) or a score in [0, 100] (empo2's environments' scale), and per call
 * (`steps`) a score in [0, 100] and a reward, the change in score, in [-100, 100]. A value outside
 * these (1e300, -5, NaN, an infinity) is a bug in the agent: taken, it would scale the update and the
 * evaluation (a reward of 1e300 gave a score of 1e302 and 100% success), so the episode fails instead,
 * with a message naming the value. The same check answers a POST to empo2/reward (./server.ts).
 */

/** A reward, a score and per-call steps, as returned, printed or POSTed (fields not yet known to be numbers). */
export interface ReportedOutcome {
  reward?: unknown;
  score?: unknown;
  steps?: unknown;
}

/** What is wrong with an outcome: the field (`reward`, `score`, `steps`) and a message naming its value. */
export interface OutcomeProblem {
  field: 'reward' | 'score' | 'steps';
  message: string;
}

export const REWARD_RANGE = [0, 1] as const;
export const SCORE_RANGE = [0, 100] as const;
/** A step's reward is a change in score, so it can go down as far as a score can go up. */
export const STEP_REWARD_RANGE = [-100, 100] as const;

const shown = (v: unknown) => (typeof v === 'number' ? String(v) : (JSON.stringify(v) ?? String(v)));

/** What is wrong with `value` as `name` in [lo, hi], or null when nothing is. */
function outOfRange(name: string, value: unknown, [lo, hi]: readonly [number, number], what: string): string | null {
  const range = `${what} is a number in [${lo}, ${hi}]`;
  if (typeof value !== 'number') return `${name} ${shown(value)}, not a number: ${range}`;
  if (!Number.isFinite(value) || value < lo || value > hi) return `${name} ${shown(value)}, out of range: ${range}`;
  return null;
}

/** What is wrong with the per-call rewards and scores, or null when nothing is. */
function stepsProblem(steps: unknown): string | null {
  if (!Array.isArray(steps)) return `steps ${shown(steps)}, not a list of {reward, score}, one per call`;
  for (let t = 0; t < steps.length; t++) {
    const st = steps[t] as { reward?: unknown; score?: unknown } | null;
    if (typeof st !== 'object' || st === null) return `steps[${t}] ${shown(st)}, not {reward, score}`;
    const bad =
      outOfRange(`steps[${t}].score`, st.score, SCORE_RANGE, "a step's score") ??
      outOfRange(`steps[${t}].reward`, st.reward, STEP_REWARD_RANGE, "a step's reward (the change in score)");
    if (bad) return bad;
  }
  return null;
}

/**
 * What is wrong with an agent's outcome (a reward in [0, 1] or a score in [0, 100], steps in range),
 * naming the field and its value; null when it can be taken.
 */
export function outcomeProblem(r: ReportedOutcome): OutcomeProblem | null {
  if (r.reward === undefined && r.score === undefined)
    return { field: 'reward', message: 'neither a reward (1 is success) nor a score (0-100)' };
  const reward = r.reward === undefined ? null : outOfRange('reward', r.reward, REWARD_RANGE, 'a reward (1 is success)');
  if (reward) return { field: 'reward', message: reward };
  const score = r.score === undefined ? null : outOfRange('score', r.score, SCORE_RANGE, 'a score');
  if (score) return { field: 'score', message: score };
  const steps = r.steps === undefined ? null : stepsProblem(r.steps);
  return steps ? { field: 'steps', message: steps } : null;
}

/**
 * Why an episode whose agent reported `r` fails, or null when `r` can be taken; `posted`: it came by
 * POST empo2/reward rather than returned (or printed).
 */
export function outcomeFailure(r: unknown, posted: boolean): string | null {
  const by = posted ? ' (by POST empo2/reward)' : '';
  if (typeof r !== 'object' || r === null || Array.isArray(r))
    return `the agent reported ${shown(r)}${by}, not a reward (a number, 1 is success) nor {reward} or {score}`;
  const bad = outcomeProblem(r);
  return bad === null ? null : `the agent reported ${bad.message}${by}`;
}
