import { describe, expect, it } from 'vitest';
import type { ChatOutcome, ChatRequest } from './client.ts';
import {
  GRAMMAR_EXPLANATION_CHARS,
  GRAMMAR_SCORES,
  grammarSchema,
  judgeGroup,
  judgeRequest,
  parseJudgement,
  type JudgedGroup,
} from './judge.ts';

const group: JudgedGroup = {
  task: 'Turn on the lamp.',
  trajectories: [
    { steps: [{ observation: 'A dark room.', action: 'look' }], finalObservation: 'Still dark.' },
    {
      steps: [
        { observation: 'A dark room.', action: 'go north' },
        { observation: 'A hall.', action: 'turn on lamp' },
      ],
      finalObservation: 'The lamp is on.',
    },
  ],
};
const settings = { rubric: 'Reward lighting the lamp quickly.', maxTokens: 512, maxTrajectoryChars: 4000 };
const good = JSON.stringify({
  scores: [
    { trajectory_id: '2', explanation: 'Lit the lamp.', score: 0.9 },
    { trajectory_id: '1', explanation: 'Only looked.', score: 0.1 },
  ],
});
const answered = (text: string): ChatOutcome => ({
  ok: true,
  text,
  finishReason: 'stop',
  cached: false,
  promptTokens: 1,
  completionTokens: 1,
});

describe('judgeRequest', () => {
  it('shows the task once, every trajectory numbered with its steps, the rubric, and asks for the JSON schema', () => {
    const req = judgeRequest(group, settings);
    const [system, user] = req.messages;
    expect(system.content).toContain('Reward lighting the lamp quickly.');
    expect(user.content.match(/Turn on the lamp\./g)).toHaveLength(1);
    expect(user.content).toContain('<trajectory id="1">\nStep 1\nObservation: A dark room.\nAction: look\nFinal observation: Still dark.');
    expect(user.content).toContain('<trajectory id="2">');
    expect(user.content).toContain('Action: turn on lamp');
    const format = req.extra!.response_format as {
      type: string;
      json_schema: { strict: boolean; schema: { properties: { scores: Record<string, unknown> } } };
    };
    expect(format.type).toBe('json_schema');
    expect(format.json_schema.strict).toBe(true);
    expect(format.json_schema.schema.properties.scores).toMatchObject({ minItems: 2, maxItems: 2 });
  });

  it('keeps the start and end of a trajectory over the limit, and asks again with another seed', () => {
    const long: JudgedGroup = {
      task: 't',
      trajectories: [{ steps: [{ observation: 'x'.repeat(5000), action: 'act' }], finalObservation: 'THE END' }],
    };
    const text = judgeRequest(long, { ...settings, maxTrajectoryChars: 300 }).messages[1].content;
    expect(text).toContain('Step 1');
    expect(text).toContain('THE END');
    expect(text).toMatch(/characters cut/);
    expect(text.length).toBeLessThan(600);
    expect(judgeRequest(group, settings, 0).seed).not.toBe(judgeRequest(group, settings, 1).seed);
  });
});

describe('judgeRequest for servers without json_schema', () => {
  it('falls back to json_object with a grammar-friendly schema (ids in order, listed scores, a bounded explanation), then to none', () => {
    const req = judgeRequest(group, settings);
    expect(req.fallbacks!.forms.map((f) => f.label)).toEqual(['response_format json_object with a schema', 'no response_format']);
    expect(req.fallbacks!.forms[1].extra).toEqual({});
    const format = req.fallbacks!.forms[0].extra.response_format as { type: string; schema: typeof grammar };
    const grammar = grammarSchema(2) as { properties: { scores: { prefixItems: any[]; items: boolean } } };
    expect(format).toEqual({ type: 'json_object', schema: grammar });
    const entries = grammar.properties.scores.prefixItems;
    expect(entries.map((e) => e.properties.trajectory_id)).toEqual([{ const: '1' }, { const: '2' }]);
    expect(grammar.properties.scores.items).toBe(false);
    expect(entries[0].properties.explanation).toEqual({ type: 'string', minLength: 1, maxLength: GRAMMAR_EXPLANATION_CHARS });
    expect(GRAMMAR_SCORES).toHaveLength(21);
    expect(GRAMMAR_SCORES[0]).toBe(0);
    expect(GRAMMAR_SCORES[1]).toBe(0.05);
    expect(GRAMMAR_SCORES[20]).toBe(1);
    // Whatever fits the grammar is an answer the strict reader takes.
    const fitting = JSON.stringify({
      scores: entries.map((e, i) => ({
        trajectory_id: e.properties.trajectory_id.const,
        explanation: 'x'.repeat(GRAMMAR_EXPLANATION_CHARS),
        score: GRAMMAR_SCORES[i * 7],
      })),
    });
    expect(parseJudgement(fitting, 2)).toMatchObject({ ok: true, verdicts: [{ score: 0 }, { score: 0.35 }] });
  });
});

describe('parseJudgement', () => {
  it('reads one verdict per trajectory, in trajectory order whatever order the answer has', () => {
    expect(parseJudgement(good, 2)).toEqual({
      ok: true,
      verdicts: [
        { score: 0.1, reason: 'Only looked.' },
        { score: 0.9, reason: 'Lit the lamp.' },
      ],
    });
  });

  it.each([
    ['not JSON', 'Trajectory 2 is best', /not JSON/],
    ['JSON in a code fence', '```json\n' + good + '\n```', /not JSON/],
    ['a score above 1', good.replace('0.9', '1.5'), /scores\.0\.score/],
    [
      'a missing trajectory',
      JSON.stringify({ scores: [{ trajectory_id: '1', explanation: 'x', score: 0.5 }] }),
      /no score for trajectory 2/,
    ],
    ['an unknown trajectory', good.replace('"2"', '"7"'), /trajectory "7"/],
    ['a trajectory twice', good.replace('"2"', '"1"'), /twice/],
    ['an extra field', good.replace('"score":0.9', '"score":0.9,"rank":1'), /Unrecognized key/],
    ['an empty explanation', good.replace('Lit the lamp.', ' '), /explanation/],
    ['a score as a string', good.replace('0.9', '"0.9"'), /score/],
  ])('refuses %s', (_, text, error) => {
    const r = parseJudgement(text, 2);
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.error).toMatch(error);
  });
});

describe('judgeGroup', () => {
  it('asks again after an unusable answer and takes the first good one', async () => {
    const answers = ['nope', '{"scores": []}', good];
    const seeds: (number | undefined)[] = [];
    const chat = async (req: ChatRequest) => (seeds.push(req.seed), answered(answers.shift()!));
    const r = await judgeGroup(chat, group, { ...settings, maxAttempts: 3 });
    expect(r).toMatchObject({ ok: true, attempts: 3 });
    expect(new Set(seeds).size).toBe(3);
  });

  it('gives up after maxAttempts unusable answers, and at once when the call failed', async () => {
    const garbage = await judgeGroup(async () => answered('garbage'), group, { ...settings, maxAttempts: 2 });
    expect(garbage).toMatchObject({ ok: false, attempts: 2 });
    if (!garbage.ok) expect(garbage.error).toMatch(/not JSON.*after 2 attempts/);
    let calls = 0;
    const down = await judgeGroup(async () => (calls++, { ok: false, error: 'ECONNREFUSED' }), group, { ...settings, maxAttempts: 3 });
    expect(down).toEqual({ ok: false, error: 'ECONNREFUSED', attempts: 1 });
    expect(calls).toBe(1);
  });
});
