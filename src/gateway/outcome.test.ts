/**
 * Rewards out of range (issue #90): a reward is in [0, 1], a score in [0, 100], a step's score in
 * [0, 100] and its reward (the change in score) in [-100, 100]. 1e300, -5, NaN, an infinity or a score of
 * 150, returned, in `steps`, printed by a process agent or POSTed to empo2/reward, fail only their
 * episode, with a message naming the value; the other episodes train and the scores stay in range.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { TINY_MODEL } from '../../test/support/tiny.ts';
import { trainAgent } from '../api/train-agent.ts';
import { parseRewardLine } from './agent-process.ts';
import { outcomeFailure, outcomeProblem } from './outcome.ts';
import type { AgentInput, AgentOutcome } from './player.ts';

const root = mkdtempSync(join(tmpdir(), 'empo2-outcome-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

describe('outcomeProblem', () => {
  it('takes rewards in [0, 1], scores in [0, 100] and steps in range', () => {
    for (const r of [{ reward: 0 }, { reward: 1 }, { reward: 0.37 }, { score: 0 }, { score: 100 }, { reward: 1, score: 55 }])
      expect(outcomeProblem(r)).toBeNull();
    expect(
      outcomeProblem({
        score: 40,
        steps: [
          { reward: 60, score: 60 },
          { reward: -20, score: 40 },
        ],
      }),
    ).toBeNull();
    expect(outcomeProblem({ score: 0, steps: [{ reward: -100, score: 0 }] })).toBeNull();
  });

  it('names the field and the value of anything else', () => {
    const cases: [object, string][] = [
      [{ reward: 1e300 }, 'reward 1e+300, out of range: a reward (1 is success) is a number in [0, 1]'],
      [{ reward: -5 }, 'reward -5, out of range'],
      [{ reward: Number.NaN }, 'reward NaN, out of range'],
      [{ reward: Infinity }, 'reward Infinity, out of range'],
      [{ reward: -Infinity }, 'reward -Infinity, out of range'],
      [{ reward: '0.5' }, 'reward "0.5", not a number'],
      [{ score: 150 }, 'score 150, out of range: a score is a number in [0, 100]'],
      [{ reward: 1, score: -0.5 }, 'score -0.5, out of range'],
      [
        { reward: 1, steps: [{ reward: 1e300, score: 100 }] },
        "steps[0].reward 1e+300, out of range: a step's reward (the change in score) is a number in [-100, 100]",
      ],
      [
        {
          reward: 1,
          steps: [
            { reward: 0, score: 0 },
            { reward: 5, score: -5 },
          ],
        },
        "steps[1].score -5, out of range: a step's score is a number in [0, 100]",
      ],
      [{ reward: 1, steps: [{ reward: Number.NaN, score: 0 }] }, 'steps[0].reward NaN'],
      [{ reward: 1, steps: [{ reward: 0, score: Infinity }] }, 'steps[0].score Infinity'],
      [{ reward: 1, steps: [{ reward: 0, score: 150 }] }, 'steps[0].score 150'],
      [{ reward: 1, steps: 'all' }, 'steps "all", not a list'],
      [{ reward: 1, steps: [null] }, 'steps[0] null, not {reward, score}'],
      [{}, 'neither a reward (1 is success) nor a score (0-100)'],
    ];
    for (const [r, message] of cases) expect(outcomeProblem(r)?.message, JSON.stringify(r)).toContain(message);
    expect(outcomeProblem({ score: 150 })?.field).toBe('score');
    expect(outcomeProblem({ reward: 1, steps: [null] })?.field).toBe('steps');
  });

  it('says what was reported and how', () => {
    expect(outcomeFailure({ reward: -5 }, false)).toBe(
      'the agent reported reward -5, out of range: a reward (1 is success) is a number in [0, 1]',
    );
    expect(outcomeFailure({ score: 150 }, true)).toMatch(/^the agent reported score 150, out of range: .* \(by POST empo2\/reward\)$/);
    expect(outcomeFailure('1', false)).toBe('the agent reported "1", not a reward (a number, 1 is success) nor {reward} or {score}');
    expect(outcomeFailure({ reward: 0.5 }, false)).toBeNull();
  });
});

describe('parseRewardLine', () => {
  it('reads nan and inf as Python prints them, so that the episode fails naming them', () => {
    expect(parseRewardLine('reward: 1e300')).toBe(1e300);
    expect(parseRewardLine('reward: 1e+300')).toBe(1e300);
    expect(parseRewardLine('reward: -5')).toBe(-5);
    expect(parseRewardLine('reward: nan')).toBeNaN();
    expect(parseRewardLine('reward = inf')).toBe(Infinity);
    expect(parseRewardLine('REWARD: -Infinity')).toBe(-Infinity);
    expect(parseRewardLine('reward: .5')).toBe(0.5);
    expect(parseRewardLine('reward: 1.')).toBe(1);
    expect(parseRewardLine('reward: lots')).toBeUndefined();
  });
});

/** What a case's agent reports, and the message its episode must fail with. */
interface Case {
  how: 'return' | 'steps' | 'post';
  outcome: AgentOutcome;
  /** The JSON body POSTed, for `post` (JSON cannot hold NaN; 1e999 reads as Infinity). */
  body?: string;
  message: string;
}

const RETURNED: Case[] = [
  { how: 'return', outcome: 1e300, message: 'the agent reported reward 1e+300, out of range' },
  { how: 'return', outcome: -5, message: 'the agent reported reward -5, out of range' },
  { how: 'return', outcome: Number.NaN, message: 'the agent reported reward NaN, out of range' },
  { how: 'return', outcome: Infinity, message: 'the agent reported reward Infinity, out of range' },
  { how: 'return', outcome: { score: 150 }, message: 'the agent reported score 150, out of range' },
];
const STEPS: Case[] = [
  { how: 'steps', outcome: { reward: 1, steps: [{ reward: 1e300, score: 100 }] }, message: 'the agent reported steps[0].reward 1e+300' },
  { how: 'steps', outcome: { reward: 1, steps: [{ reward: -5, score: -5 }] }, message: 'the agent reported steps[0].score -5' },
  { how: 'steps', outcome: { reward: 1, steps: [{ reward: Number.NaN, score: 0 }] }, message: 'the agent reported steps[0].reward NaN' },
  { how: 'steps', outcome: { reward: 1, steps: [{ reward: 0, score: Infinity }] }, message: 'the agent reported steps[0].score Infinity' },
  { how: 'steps', outcome: { score: 100, steps: [{ reward: 150, score: 150 }] }, message: 'the agent reported steps[0].score 150' },
];
const POSTED: Case[] = [
  { how: 'post', outcome: undefined, body: '{"reward": 1e300}', message: 'the agent reported reward 1e+300, out of range' },
  { how: 'post', outcome: undefined, body: '{"reward": -5}', message: 'the agent reported reward -5, out of range' },
  { how: 'post', outcome: undefined, body: '{"reward": 1e999}', message: 'the agent reported reward Infinity, out of range' },
  { how: 'post', outcome: undefined, body: '{"score": 150}', message: 'the agent reported score 150, out of range' },
  {
    how: 'post',
    outcome: undefined,
    body: '{"reward": 1, "steps": [{"reward": -1e999, "score": 0}]}',
    message: 'steps[0].reward -Infinity',
  },
];
const CASES = [...RETURNED, ...STEPS, ...POSTED];

async function call(
  input: AgentInput,
  path: string,
  body: string,
): Promise<{ status: number; json: { error?: { message: string; param?: string } } }> {
  const res = await fetch(`${input.baseURL}/${path}`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${input.apiKey}` },
    body,
    signal: input.signal,
  });
  return { status: res.status, json: (await res.json()) as { error?: { message: string } } };
}

describe('an agent reporting rewards out of range', () => {
  it('fails only that episode, naming the value, returned, in steps or POSTed; the rest train', async () => {
    const answers = new Map<string, { status: number; message?: string; param?: string }>();
    let played = 0;
    const agent = async (input: AgentInput<string>): Promise<AgentOutcome> => {
      const chat = await call(
        input,
        'chat/completions',
        JSON.stringify({ model: input.model, messages: [{ role: 'user', content: input.task }], max_tokens: 3 }),
      );
      if (chat.status !== 200) throw new Error(`gateway answered ${chat.status}`);
      const c = input.task === 'held-out' ? undefined : CASES[played++];
      if (!c) return 0.5;
      if (c.how !== 'post') return c.outcome;
      const posted = await call(input, 'empo2/reward', c.body!);
      answers.set(c.body!, { status: posted.status, message: posted.json.error?.message, param: posted.json.error?.param });
      return undefined;
    };
    const lines: string[] = [];
    const result = await trainAgent<string>({
      agent,
      tasks: ['a', 'b', 'c', 'd'],
      evalTasks: ['held-out'],
      set: [
        ...TINY_MODEL,
        `run_dir=${join(root, 'run')}`,
        'train.iterations=1',
        'algo.name=grpo',
        'rollout.tasks_per_batch=4',
        'rollout.group_size=5',
        'rollout.max_tokens=3',
        'env.eval_variations=1',
      ],
      batchWaitMs: 100,
      log: (l) => lines.push(l),
    });
    const failed = lines.filter((l) => l.includes('failed and is left out of the update'));
    expect(failed).toHaveLength(CASES.length);
    for (const c of CASES)
      expect(
        failed.filter((l) => l.includes(c.message) && l.includes('(by POST empo2/reward)') === (c.how === 'post')),
        c.message,
      ).toHaveLength(1);
    // The agent is told at once, naming the field and its value.
    const told = POSTED.map((c) => answers.get(c.body!));
    expect(told.map((a) => a?.status)).toEqual(POSTED.map(() => 400));
    expect(told.map((a) => a?.param)).toEqual(['reward', 'reward', 'reward', 'score', 'steps']);
    expect(told[0]?.message).toBe(
      'reward 1e+300, out of range: a reward (1 is success) is a number in [0, 1]; the episode fails unless a valid report replaces it',
    );
    const trainLine = readFileSync(join(result.runDir, 'metrics.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { type: string; failed: number; mean_score: number; success_rate: number })
      .find((m) => m.type === 'train')!;
    expect(trainLine.failed).toBe(CASES.length);
    expect(trainLine.mean_score).toBe(50);
    expect(trainLine.success_rate).toBe(0);
    expect(result.finalEval?.summary.mean_score).toBe(50);
    expect(result.finalEval?.summary.success_rate).toBe(0);
  }, 240_000);
});
