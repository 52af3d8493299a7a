/**
 * Calls an agent makes at once within one episode (issue #88, item 2), with real clients and the tiny
 * model: an agent that sends 3 calls at once with the `openai` npm client, and `@openai/agents` with a
 * parallel input guardrail, train with no 409 and no failed episode; calls held in flight together are
 * recorded as steps in the order they arrived, each with the prompt it saw and its own sampled tokens; a
 * call beyond `maxConcurrentCalls` gets a 429 naming the limit and the key and the episode goes on; a call
 * its client cancels leaves no hole; concurrent calls count against `maxCalls`; and with a chat template
 * each branch of concurrent conversations is extended token for token.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { trainAgent, type AgentInput } from '../src/index.ts';
import { loadConfig } from '../src/config/load.ts';
import type { Config } from '../src/config/schema.ts';
import { environmentCorpus } from '../src/envs/index.ts';
import { openAgentPlay, type AgentPlayOptions } from '../src/gateway/index.ts';
import { createEngine, initBackend } from '../src/policy/index.ts';
import type { GenerateOptions, Generation, PolicyEngine } from '../src/policy/types.ts';
import type { Episode } from '../src/run/records.ts';
import { rolloutSettings } from '../src/trainer/rollout.ts';
import { wordReward, type WordTask } from '../examples/agent-openai/agent.ts';
import { saveTinyInstructModel } from './support/instruct-model.ts';
import { TINY_MODEL } from './support/tiny.ts';

let root: string;
beforeAll(() => {
  root = mkdtempSync(join(tmpdir(), 'empo2-gateway-concurrent-'));
});
afterAll(() => rmSync(root, { recursive: true, force: true }));

const TASKS: WordTask[] = [{ word: 'apple' }, { word: 'river' }, { word: 'stone' }];
const SET = [
  ...TINY_MODEL,
  'seed=5',
  'train.iterations=1',
  'train.eval_every=0',
  'algo.name=empo2',
  'algo.p=1',
  'algo.q=0.5',
  'rollout.tasks_per_batch=2',
  'rollout.group_size=2',
  'rollout.max_tokens=8',
  'env.eval_variations=1',
  'trajectories.train_per_iteration=4',
];

interface RecordedEpisode {
  description: string;
  score: number;
  steps: { observation: string; action: string }[];
}

/** Trains one iteration behind `agent`: no episode may fail; returns the train line and the recorded training episodes. */
async function trainBehind(name: string, agent: (input: AgentInput<WordTask>) => Promise<number>) {
  const lines: string[] = [];
  const result = await trainAgent<WordTask>({
    agent,
    tasks: TASKS,
    set: [...SET, `run_dir=${join(root, name)}`],
    timeoutSeconds: 120,
    log: (l) => lines.push(l),
  });
  const read = (file: string) =>
    readFileSync(join(result.runDir, file), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
  expect(lines.filter((l) => l.includes('failed and is left out of the update'))).toEqual([]);
  const trainLine = read('metrics.jsonl').find((m) => m.type === 'train');
  expect(trainLine.failed ?? 0).toBe(0);
  expect(Object.values(trainLine.modes as Record<string, number>).reduce((a, b) => a + b, 0)).toBe(4);
  expect(trainLine.sequences).toBeGreaterThan(0);
  expect(result.finalEval?.summary.episodes).toBeGreaterThan(0);
  return { trainLine, episodes: read('trajectories/train.jsonl') as RecordedEpisode[] };
}

/** What a call of the openai client ended with: its answer, or the HTTP status and message of its error. */
async function settle<T>(p: Promise<T>): Promise<{ ok: true; value: T } | { ok: false; status: number | undefined; message: string }> {
  try {
    return { ok: true, value: await p };
  } catch (e) {
    return { ok: false, status: (e as { status?: number }).status, message: (e as Error).message };
  }
}

describe('calls at once within one episode, with real clients', () => {
  it('an agent that sends 3 calls at once with the openai client trains with no 409 and no failed episode', async () => {
    const errors: string[] = [];
    const agent = async ({ baseURL, apiKey, model, task, signal }: AgentInput<WordTask>) => {
      const client = new OpenAI({ baseURL, apiKey, maxRetries: 0 });
      let best = 0;
      for (const turn of [0, 1]) {
        const answers = await Promise.all(
          [0, 1, 2].map((k) =>
            settle(
              client.chat.completions.create(
                { model, messages: [{ role: 'user', content: `Say "${task.word}" (turn ${turn}, call ${k}).` }], max_tokens: 8 },
                { signal },
              ),
            ),
          ),
        );
        for (const a of answers) {
          if (!a.ok) errors.push(`${a.status}: ${a.message}`);
          else best = Math.max(best, wordReward(a.value.choices[0].message.content ?? '', task.word));
        }
      }
      return best;
    };
    const { episodes } = await trainBehind('openai-3-at-once', agent);
    expect(errors).toEqual([]);
    expect(episodes).toHaveLength(4);
    for (const e of episodes) {
      const word = JSON.parse(e.description).word;
      // All six calls are steps; the second turn's calls, sent after the first turn's were answered, come after them.
      const observations = e.steps.map((s) => s.observation);
      expect(observations).toHaveLength(6);
      expect([...observations.slice(0, 3)].sort()).toEqual([0, 1, 2].map((k) => `Say "${word}" (turn 0, call ${k}).`));
      expect([...observations.slice(3)].sort()).toEqual([0, 1, 2].map((k) => `Say "${word}" (turn 1, call ${k}).`));
    }
  }, 300_000);

  it('@openai/agents with a parallel input guardrail trains with no 409 and no failed episode', async () => {
    const { Agent, run, setTracingDisabled, OpenAIChatCompletionsModel } = await import('@openai/agents');
    setTracingDisabled(true);
    const sent: string[][] = [];
    const agent = async ({ baseURL, apiKey, model, task, signal }: AgentInput<WordTask>) => {
      const order: string[] = [];
      // Agents that start a little apart, as real ones do: an episode's two calls then wait in a batch together.
      await pause(60 * sent.push(order));
      // A custom client whose fetch notes which agent each request came from (its system prompt), in the order sent.
      const client = new OpenAI({
        baseURL,
        apiKey,
        maxRetries: 0,
        fetch: async (url, init) => {
          order.push(JSON.parse(String(init?.body)).messages[0].content);
          return fetch(url, init);
        },
      });
      // @openai/agents pins its own copy of the openai package: the same client, another declaration of its type.
      const policy = new OpenAIChatCompletionsModel(client as never, model);
      const guard = new Agent({
        name: 'guard',
        instructions: 'Is this about a word? Answer yes or no.',
        model: policy,
        modelSettings: { maxTokens: 4 },
      });
      const main = new Agent({
        name: 'player',
        instructions: 'You are playing a word game. Answer with one word.',
        model: policy,
        modelSettings: { maxTokens: 8 },
        inputGuardrails: [
          {
            name: 'on-topic',
            runInParallel: true,
            execute: async ({ input, context }) => {
              const verdict = await run(guard, input, { context, signal });
              return { tripwireTriggered: false, outputInfo: verdict.finalOutput };
            },
          },
        ],
      });
      const result = await run(main, `Say the word "${task.word}".`, { signal });
      return wordReward(String(result.finalOutput ?? ''), task.word);
    };
    const { episodes } = await trainBehind('openai-agents-guardrail', agent);
    expect(sent.length).toBeGreaterThanOrEqual(4);
    for (const order of sent)
      expect([...order].sort()).toEqual(['Is this about a word? Answer yes or no.', 'You are playing a word game. Answer with one word.']);
    // Both calls of every episode are its steps; both saw the same user message, so they share an anchor state.
    for (const e of episodes) {
      expect(e.steps).toHaveLength(2);
      expect(e.steps.map((s) => s.observation)).toEqual([
        `Say the word "${JSON.parse(e.description).word}".`,
        `Say the word "${JSON.parse(e.description).word}".`,
      ]);
    }
  }, 300_000);
});

/**
 * The engine as the gateway sees it: every generate call's prompts, and a hold on the first one until the
 * test releases it, so that the calls sent meanwhile are provably in flight together.
 */
function held(inner: PolicyEngine) {
  const seen: number[][][] = [];
  let release!: () => void;
  const released = new Promise<void>((r) => (release = r));
  let started!: () => void;
  const firstStarted = new Promise<void>((r) => (started = r));
  const engine = new Proxy(inner, {
    get: (target, key) => {
      if (key === 'generate')
        return async (prompts: number[][], opts: GenerateOptions): Promise<Generation[]> => {
          seen.push(prompts);
          if (seen.length === 1) {
            started();
            await released;
          }
          return inner.generate(prompts, opts);
        };
      const v: unknown = Reflect.get(target, key);
      return typeof v === 'function' ? v.bind(target) : v;
    },
  });
  return { engine, seen, release, firstStarted };
}

/** The answer's prompt and response token ids (the gateway's `prompt_token_ids`, `token_ids`). */
function tokensOf(c: OpenAI.Chat.ChatCompletion): { prompt: number[]; response: number[] } {
  const choice = c.choices[0] as unknown as { prompt_token_ids: number[]; token_ids: number[] };
  return { prompt: choice.prompt_token_ids, response: choice.token_ids };
}

/** The answer of a settled call; its error, naming the call's status, where it failed. */
function answered<T>(r: Awaited<ReturnType<typeof settle<T>>>): T {
  if (!r.ok) throw new Error(`the call failed: ${r.status} ${r.message}`);
  return r.value;
}

const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('calls at once within one episode, step by step', () => {
  let cfg: Config;
  let engine: PolicyEngine;
  beforeAll(async () => {
    cfg = loadConfig(null, [...TINY_MODEL, 'seed=9', 'rollout.max_tokens=6', 'run_dir=/nonexistent']);
    await initBackend();
    ({ engine } = await createEngine(cfg, 'fresh', () => environmentCorpus(cfg.env)));
  }, 120_000);

  /** Plays one episode of `agent` on `eng` through a fresh gateway; returns the episode as the player recorded it. */
  async function playOne(
    eng: PolicyEngine,
    agent: (input: AgentInput) => Promise<number>,
    o: Partial<AgentPlayOptions<unknown>> = {},
    c: Config = cfg,
  ): Promise<Episode> {
    const play = await openAgentPlay(c, { agent, taskOf: () => 'task', log: () => {}, ...o });
    try {
      const { episodes } = await play.player(eng, [{ task: 'agent', variation: 0, group: 0 }], {
        settingsFor: () => rolloutSettings(c, false, 77),
        evaluation: false,
      });
      expect(play.gateway.openRequests()).toBe(0);
      return episodes[0];
    } finally {
      await play.close();
    }
  }

  const ask = (client: OpenAI, model: string, content: string, signal?: AbortSignal) =>
    client.chat.completions.create({ model, messages: [{ role: 'user', content }], return_token_ids: true } as never, {
      signal,
    }) as Promise<OpenAI.Chat.ChatCompletion>;

  it('records calls held in flight together as steps in order of arrival, each with its prompt and its own tokens', async () => {
    const h = held(engine);
    const answers: Record<string, { prompt: number[]; response: number[] }> = {};
    const episode = await playOne(h.engine, async ({ baseURL, apiKey, model }) => {
      const client = new OpenAI({ baseURL, apiKey, maxRetries: 0 });
      const a = settle(ask(client, model, 'call A: you are in the hall.'));
      await h.firstStarted; // A is being sampled, held: B and C arrive while it is in flight
      const b = settle(ask(client, model, 'call B: you are in the kitchen.'));
      await pause(300);
      const c = settle(ask(client, model, 'call C: you are in the garden.'));
      await pause(300);
      h.release();
      for (const [name, p] of [
        ['A', a],
        ['B', b],
        ['C', c],
      ] as const)
        answers[name] = tokensOf(answered(await p));
      return 1;
    });
    expect(episode.outcome).toBe('success');
    expect(episode.steps.map((s) => s.observation)).toEqual([
      'call A: you are in the hall.',
      'call B: you are in the kitchen.',
      'call C: you are in the garden.',
    ]);
    ['A', 'B', 'C'].forEach((name, t) => {
      expect(episode.steps[t].prompt).toEqual(answers[name].prompt);
      expect(episode.steps[t].response).toEqual(answers[name].response);
      expect(engine.tokenizer.decode(episode.steps[t].prompt)).toContain(`call ${name}:`);
    });
    // B and C waited together and were sampled as two rows of one step, in the order they came.
    expect(h.seen.map((rows) => rows.length)).toEqual([1, 2]);
    expect(h.seen[1]).toEqual([answers.B.prompt, answers.C.prompt]);
  }, 120_000);

  it('answers a call beyond maxConcurrentCalls with a 429 naming the limit and the key; the episode goes on', async () => {
    const h = held(engine);
    const seen: Record<string, unknown> = {};
    const episode = await playOne(
      h.engine,
      async ({ baseURL, apiKey, model }) => {
        const client = new OpenAI({ baseURL, apiKey, maxRetries: 0 });
        const a = ask(client, model, 'call A');
        await h.firstStarted;
        const b = ask(client, model, 'call B');
        await pause(200);
        const c = await settle(ask(client, model, 'call C'));
        seen.c = c;
        h.release();
        await Promise.all([a, b]);
        await ask(client, model, 'call D');
        return 1;
      },
      { maxConcurrentCalls: 2 },
    );
    const c = seen.c as { ok: false; status: number; message: string };
    expect(c.ok).toBe(false);
    expect(c.status).toBe(429);
    expect(c.message).toContain('2 calls in flight');
    expect(c.message).toContain('maxConcurrentCalls');
    expect(c.message).toContain('--agent-max-concurrent-calls');
    expect(episode.outcome).toBe('success');
    expect(episode.steps.map((s) => s.observation)).toEqual(['call A', 'call B', 'call D']);
  }, 120_000);

  it('a call its client cancels leaves no hole; concurrent calls count against maxCalls', async () => {
    const h = held(engine);
    const episode = await playOne(h.engine, async ({ baseURL, apiKey, model }) => {
      const client = new OpenAI({ baseURL, apiKey, maxRetries: 0 });
      const a = ask(client, model, 'call A');
      await h.firstStarted;
      const cancel = new AbortController();
      const b = settle(ask(client, model, 'call B', cancel.signal));
      await pause(200);
      const c = ask(client, model, 'call C');
      await pause(200);
      cancel.abort();
      await b;
      await pause(200);
      h.release();
      await Promise.all([a, c]);
      return 1;
    });
    expect(episode.outcome).toBe('success');
    expect(episode.steps.map((s) => s.observation)).toEqual(['call A', 'call C']);

    const statuses: (number | undefined)[] = [];
    const over = await playOne(
      engine,
      async ({ baseURL, apiKey, model }) => {
        const client = new OpenAI({ baseURL, apiKey, maxRetries: 0 });
        for (const r of await Promise.all(['one', 'two', 'three'].map((w) => settle(ask(client, model, `call ${w}`)))))
          statuses.push(r.ok ? 200 : r.status);
        return 1;
      },
      { maxCalls: 2 },
    );
    expect(statuses.filter((s) => s === 429)).toHaveLength(1);
    expect(over.outcome).toBe('failed');
    expect(over.failure).toBe('went over its budget of 2 calls');
  }, 120_000);

  it('with a chat template, each of two concurrent conversations extends its own branch token for token', async () => {
    const dir = join(root, 'instruct');
    await saveTinyInstructModel(dir);
    const icfg = loadConfig(null, [`model.path=${dir}`, 'seed=9', 'rollout.max_tokens=6', 'run_dir=/nonexistent']);
    const { engine: ieng } = await createEngine(icfg, 'fresh');
    const h = held(ieng);
    const said: Record<string, { prompt: number[]; response: number[] }> = {};
    const episode = await playOne(
      h.engine,
      async ({ baseURL, apiKey, model }) => {
        const client = new OpenAI({ baseURL, apiKey, maxRetries: 0 });
        const chat = async (name: string, messages: OpenAI.Chat.ChatCompletionMessageParam[]) => {
          const r = (await client.chat.completions.create({
            model,
            messages,
            return_token_ids: true,
          } as never)) as OpenAI.Chat.ChatCompletion;
          said[name] = tokensOf(r);
          return r.choices[0].message.content ?? '';
        };
        const x: OpenAI.Chat.ChatCompletionMessageParam[] = [
          { role: 'system', content: 'You are the player.' },
          { role: 'user', content: 'You are in the hall.' },
        ];
        const y: OpenAI.Chat.ChatCompletionMessageParam[] = [
          { role: 'system', content: 'You check the player.' },
          { role: 'user', content: 'Is the hall a room?' },
        ];
        const first = chat('x1', x);
        await h.firstStarted;
        const second = chat('y1', y);
        await pause(200);
        h.release();
        const [ax, ay] = await Promise.all([first, second]);
        await Promise.all([
          chat('x2', [...x, { role: 'assistant', content: ax }, { role: 'user', content: 'You see a door.' }]),
          chat('y2', [...y, { role: 'assistant', content: ay }, { role: 'user', content: 'Is a door a room?' }]),
        ]);
        return 1;
      },
      {},
      icfg,
    );
    expect(episode.steps).toHaveLength(4);
    for (const [next, prev] of [
      ['x2', 'x1'],
      ['y2', 'y1'],
    ]) {
      const branch = [...said[prev].prompt, ...said[prev].response];
      expect(said[next].prompt.slice(0, branch.length)).toEqual(branch);
    }
  }, 180_000);
});
