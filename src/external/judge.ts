/**
 * The judge reward (`env.reward: judge`, docs/EXTERNAL.md): an OpenAI-compatible model reads a group's
 * trajectories of one task together and scores each 0 to 1 relative to the others, with a short reason.
 * GRPO only needs the group's scores relative to each other, and ranking a few attempts side by side is
 * easier for a judge than grading one on an absolute scale.
 *
 * The semantics follow OpenPipe ART's RULER (src/art/rewards/ruler.py, the litellm version of mid-2025
 * with `TrajectoryScore {trajectory_id, explanation, score}`, read through the code index): the group
 * is scored in one request, the shared goal stated once, trajectories numbered from 1, one score and
 * explanation per trajectory, success above failure, efficiency above detours, differences in score as
 * large as the differences in quality, partial credit for progress. The wording here is our own.
 *
 * The answer is asked for as JSON under a JSON schema (`response_format: json_schema`) and read strictly:
 * the whole text must be that JSON object, with exactly one entry per trajectory, checked with zod.
 * Anything else is an error message the caller retries, then skips.
 *
 * Servers that do not take `response_format: json_schema` get weaker forms (the client's fallbacks): first
 * `{type: json_object, schema}`, the form llama-cpp-python's server constrains its output with (its
 * grammar, built from the schema, cannot bound a number, so this schema lists the scores a judge may give,
 * 0 to 1 in steps of 0.05, fixes the trajectories' order and bounds the explanation's length), then no
 * response_format at all (the instructions still ask for the JSON). The answer is read as strictly.
 */
import { z } from 'zod';
import type { ChatOutcome, ChatRequest } from './client.ts';

/** One trajectory as the judge reads it: what the agent saw and did, and where it ended. */
export interface JudgedTrajectory {
  steps: readonly { observation: string; action: string }[];
  finalObservation: string;
}

/** A group: trajectories of the same task (and variation), judged against each other. */
export interface JudgedGroup {
  task: string;
  trajectories: readonly JudgedTrajectory[];
}

export interface JudgeVerdict {
  /** 0 to 1, relative to the rest of the group. */
  score: number;
  reason: string;
}

export interface JudgeRequestSettings {
  /** What the user wants rewarded (null: the judge reads the goal from the task). */
  rubric: string | null;
  maxTokens: number;
  /** Longest text of one trajectory; a longer one keeps its start and end. */
  maxTrajectoryChars: number;
}

const INSTRUCTIONS = [
  'You grade attempts by an AI agent. Every attempt below was given the same task; compare them with each other and give each a score from 0 to 1.',
  'How to grade:',
  '- An attempt that reaches the goal scores clearly higher than one that does not.',
  '- Of two attempts that reach the goal, the one with fewer wasted or repeated steps scores higher.',
  '- Make the gap between two scores match the gap in quality: close attempts get close scores, a much better attempt a much higher one.',
  '- An attempt that makes real progress without finishing may get partial credit.',
  'Answer with JSON only: {"scores": [{"trajectory_id": "1", "explanation": "...", "score": 0.0}, ...]}, one entry per attempt, ids as given, a one- or two-sentence explanation each.',
].join('\n');

/** The schema of the answer, sent as response_format (servers that support it constrain the output to it). */
export function answerSchema(n: number): Record<string, unknown> {
  return {
    type: 'object',
    properties: {
      scores: {
        type: 'array',
        minItems: n,
        maxItems: n,
        items: {
          type: 'object',
          properties: {
            trajectory_id: { type: 'string', enum: ids(n) },
            explanation: { type: 'string' },
            score: { type: 'number', minimum: 0, maximum: 1 },
          },
          required: ['trajectory_id', 'explanation', 'score'],
          additionalProperties: false,
        },
      },
    },
    required: ['scores'],
    additionalProperties: false,
  };
}

/** Scores a grammar can enforce where it cannot bound a number: 0, 0.05, ..., 1. */
export const GRAMMAR_SCORES = Array.from({ length: 21 }, (_, i) => Number((i / 20).toFixed(2)));
/** Longest explanation the grammar form allows (one or two sentences), so that a small model cannot ramble until max_tokens. */
export const GRAMMAR_EXPLANATION_CHARS = 150;

/**
 * The answer's schema for servers that turn a schema into a grammar (llama.cpp): the same JSON, with each
 * trajectory's entry in its place (ids 1..n in order, once each), the score one of GRAMMAR_SCORES, and the
 * explanation at most GRAMMAR_EXPLANATION_CHARS characters.
 */
export function grammarSchema(n: number): Record<string, unknown> {
  const entry = (id: string) => ({
    type: 'object',
    properties: {
      trajectory_id: { const: id },
      explanation: { type: 'string', minLength: 1, maxLength: GRAMMAR_EXPLANATION_CHARS },
      score: { enum: GRAMMAR_SCORES },
    },
    required: ['trajectory_id', 'explanation', 'score'],
    additionalProperties: false,
  });
  return {
    type: 'object',
    properties: { scores: { type: 'array', prefixItems: ids(n).map(entry), items: false, minItems: n, maxItems: n } },
    required: ['scores'],
    additionalProperties: false,
  };
}

const ids = (n: number) => Array.from({ length: n }, (_, i) => String(i + 1));

/** The request that asks for a group's scores; `attempt` > 0 asks again after an unusable answer (a new seed, so no cached answer). */
export function judgeRequest(group: JudgedGroup, s: JudgeRequestSettings, attempt = 0): ChatRequest {
  const n = group.trajectories.length;
  const rubric = s.rubric?.trim() ? `\nWhat to reward in this task, from the user:\n${s.rubric.trim()}` : '';
  const shown = group.trajectories
    .map((t, i) => `<trajectory id="${i + 1}">\n${clip(trajectoryText(t), s.maxTrajectoryChars)}\n</trajectory>`)
    .join('\n\n');
  return {
    messages: [
      { role: 'system', content: INSTRUCTIONS + rubric },
      { role: 'user', content: `<task>\n${group.task}\n</task>\n\n${n} attempts:\n\n${shown}` },
    ],
    maxTokens: s.maxTokens,
    seed: attempt,
    extra: { response_format: { type: 'json_schema', json_schema: { name: 'trajectory_scores', strict: true, schema: answerSchema(n) } } },
    fallbacks: {
      id: 'judge response_format',
      label: 'response_format json_schema',
      forms: [
        {
          label: 'response_format json_object with a schema',
          extra: { response_format: { type: 'json_object', schema: grammarSchema(n) } },
        },
        { label: 'no response_format', extra: {} },
      ],
    },
  };
}

/** A trajectory as numbered steps of observation and action, then where it ended. */
export function trajectoryText(t: JudgedTrajectory): string {
  const steps = t.steps.map((st, i) => `Step ${i + 1}\nObservation: ${st.observation.trim()}\nAction: ${st.action.trim()}`);
  return [...steps, `Final observation: ${t.finalObservation.trim()}`].join('\n');
}

/** Start and end of a long text, the middle marked as cut (the goal and the outcome matter most). */
function clip(text: string, max: number): string {
  if (text.length <= max) return text;
  const marker = `\n[... ${text.length - max} characters cut ...]\n`;
  const head = Math.ceil((max - marker.length) / 2);
  return text.slice(0, Math.max(0, head)) + marker + text.slice(text.length - Math.max(0, max - marker.length - head));
}

const Answer = z
  .object({
    scores: z.array(
      z.object({ trajectory_id: z.string(), explanation: z.string().trim().min(1), score: z.number().min(0).max(1) }).strict(),
    ),
  })
  .strict();

/** A judge's answer as one verdict per trajectory, in order; or what is wrong with it. */
export function parseJudgement(text: string, n: number): { ok: true; verdicts: JudgeVerdict[] } | { ok: false; error: string } {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    return { ok: false, error: `the answer is not JSON: ${quote(text)}` };
  }
  const parsed = Answer.safeParse(json);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    return { ok: false, error: `the answer does not fit the schema at ${issue.path.join('.') || '(top)'}: ${issue.message}` };
  }
  const byId = new Map<string, JudgeVerdict>();
  for (const s of parsed.data.scores) {
    if (!ids(n).includes(s.trajectory_id))
      return { ok: false, error: `the answer scores trajectory "${s.trajectory_id}", not one of 1..${n}` };
    if (byId.has(s.trajectory_id)) return { ok: false, error: `the answer scores trajectory ${s.trajectory_id} twice` };
    byId.set(s.trajectory_id, { score: s.score, reason: s.explanation.trim() });
  }
  const missing = ids(n).filter((id) => !byId.has(id));
  if (missing.length) return { ok: false, error: `the answer has no score for trajectory ${missing.join(', ')} of ${n}` };
  return { ok: true, verdicts: ids(n).map((id) => byId.get(id)!) };
}

const quote = (text: string) => JSON.stringify(text.length > 120 ? `${text.slice(0, 120)}...` : text);

export type GroupJudgement = { ok: true; verdicts: JudgeVerdict[]; attempts: number } | { ok: false; error: string; attempts: number };

/**
 * A group's verdicts: asked up to `maxAttempts` times while the answer is unusable. A call that failed
 * after the client's own retries (the server down, 5xx) is not asked again: the group is skipped.
 */
export async function judgeGroup(
  chat: (req: ChatRequest) => Promise<ChatOutcome>,
  group: JudgedGroup,
  s: JudgeRequestSettings & { maxAttempts: number },
): Promise<GroupJudgement> {
  let error = 'not asked';
  for (let attempt = 0; attempt < s.maxAttempts; attempt++) {
    const answer = await chat(judgeRequest(group, s, attempt));
    if (!answer.ok) return { ok: false, error: answer.error, attempts: attempt + 1 };
    const parsed = parseJudgement(answer.text, group.trajectories.length);
    if (parsed.ok) return { ok: true, verdicts: parsed.verdicts, attempts: attempt + 1 };
    error = parsed.error;
  }
  return { ok: false, error: `${error} (after ${s.maxAttempts} attempts)`, attempts: s.maxAttempts };
}
