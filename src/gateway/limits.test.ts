/**
 * Prompts the model cannot read, and engine failures, end only the episode that sent them: in one
 * lockstep batch with healthy episodes, a prompt 2.5× the tiny model's context (chat and text) and a
 * 10 MB message get a 400 naming the context in tokens (the 10 MB one without being tokenised), their
 * episodes fail with that reason, nothing over the context reaches the engine, and the healthy episodes
 * play on without waiting for them (the batch waits 10 minutes for an episode that has not called). A
 * `generate` that throws for one prompt of a batch fails that call and its episode alone.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../config/load.ts';
import { environmentCorpus } from '../envs/index.ts';
import { createEngine, initBackend } from '../policy/index.ts';
import type { GenerateOptions, Generation, PolicyEngine, TextTokenizer } from '../policy/types.ts';
import type { Episode } from '../run/records.ts';
import { rolloutSettings } from '../trainer/rollout.ts';
import { TINY_MODEL } from '../../test/support/tiny.ts';
import { openAgentPlay, type AgentInput } from './index.ts';

let engine: PolicyEngine;
const cfg = loadConfig(null, [...TINY_MODEL, 'seed=5', 'rollout.max_tokens=6', 'run_dir=/nonexistent']);
beforeAll(async () => {
  await initBackend();
  ({ engine } = await createEngine(cfg, 'fresh', () => environmentCorpus(cfg.env)));
}, 120_000);

const WORDS = 'the red box is next to the green door in the kitchen ';

/** The engine as the gateway sees it, recording the longest text tokenised and every generate call's prompt lengths. */
function watched(inner: PolicyEngine, poison: string | null = null) {
  const seen = { longestEncoded: 0, calls: [] as number[][] };
  const tok = inner.tokenizer;
  const tokenizer: TextTokenizer & { tokenBytes?: (id: number) => Uint8Array } = {
    encode: (text) => ((seen.longestEncoded = Math.max(seen.longestEncoded, text.length)), tok.encode(text)),
    decode: (ids) => tok.decode(ids),
    vocabSize: tok.vocabSize,
    tokenToId: (t) => tok.tokenToId(t),
  };
  const bytesOf = (tok as { tokenBytes?: (id: number) => Uint8Array }).tokenBytes;
  if (bytesOf) tokenizer.tokenBytes = (id) => bytesOf.call(tok, id);
  const engine = {
    tokenizer,
    contextLength: inner.contextLength,
    async generate(prompts: number[][], opts: GenerateOptions): Promise<Generation[]> {
      seen.calls.push(prompts.map((p) => p.length));
      if (poison !== null && prompts.some((p) => tok.decode(p).includes(poison))) throw new Error(`cannot sample "${poison}"`);
      return inner.generate(prompts, opts);
    },
    releaseCache: (keys: readonly string[]) => inner.releaseCache?.(keys),
    prefillCounts: () => inner.prefillCounts?.() ?? { prefilledTokens: 0, reusedTokens: 0 },
  } as unknown as PolicyEngine;
  return { engine, seen };
}

interface Answer {
  status: number;
  json: any;
}

async function post(input: AgentInput, path: string, body: object): Promise<Answer> {
  const res = await fetch(`${input.baseURL}${path}`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${input.apiKey}` },
    body: JSON.stringify({ model: input.model, ...body }),
  });
  return { status: res.status, json: await res.json() };
}

const ask = (input: AgentInput, content: string) => post(input, '/chat/completions', { messages: [{ role: 'user', content }] });

/** Two calls (the second extends the first with its answer), then reward 1. */
async function healthy(input: AgentInput): Promise<number> {
  const first = await ask(input, `Task ${String(input.task)}: find the yellow hat.`);
  if (first.status !== 200) throw new Error(`gateway ${first.status}: ${first.json.error?.message}`);
  const messages = [
    { role: 'user', content: `Task ${String(input.task)}: find the yellow hat.` },
    { role: 'assistant', content: first.json.choices[0].message.content },
    { role: 'user', content: 'You are in the hall.' },
  ];
  const second = await post(input, '/chat/completions', { messages });
  if (second.status !== 200) throw new Error(`gateway ${second.status}: ${second.json.error?.message}`);
  return 1;
}

/** Plays one batch of `agents` (one episode each, in one lockstep batch that waits 10 minutes for a missing call). */
async function playBatch(inner: PolicyEngine, agents: ((input: AgentInput) => Promise<number>)[]): Promise<Episode[]> {
  const play = await openAgentPlay(cfg, {
    agent: (input) => agents[input.task as number](input),
    taskOf: (job) => job.variation,
    batchWaitMs: 600_000,
    log: () => {},
  });
  try {
    const settings = rolloutSettings(cfg, false, 77);
    const jobs = agents.map((_, k) => ({ task: 'agent', variation: k, group: k }));
    const { episodes } = await play.player(inner, jobs, { settingsFor: () => settings, evaluation: false });
    expect(play.gateway.openRequests()).toBe(0);
    return episodes;
  } finally {
    await play.close();
  }
}

describe('prompts that cannot fit in the context', () => {
  it('get a 400 naming the context and fail their own episode, untokenised when too many bytes; the batch plays on', async () => {
    const context = engine.contextLength!;
    expect(context).toBe(4096);
    const overLong = WORDS.repeat(Math.ceil((2.5 * context * 1.75) / WORDS.length)); // the tiny tokenizer: 1.7 bytes a token
    const overLongTokens = engine.tokenizer.encode(overLong).length;
    expect(overLongTokens).toBeGreaterThan(2 * context);
    const huge = WORDS.repeat(Math.ceil((10 << 20) / WORDS.length));
    const answers: Record<string, Answer> = {};
    const refused = (name: string, send: (input: AgentInput) => Promise<Answer>) => async (input: AgentInput) => {
      answers[name] = await send(input);
      return 1; // the agent goes on as if nothing happened: the gateway's record must say why the episode failed
    };
    const { engine: watchedEngine, seen } = watched(engine);
    const episodes = await playBatch(watchedEngine, [
      healthy,
      refused('chat', (input) => ask(input, overLong)),
      healthy,
      refused('huge', (input) => ask(input, huge)),
      refused('text', (input) => post(input, '/completions', { prompt: overLong })),
      healthy,
    ]);

    for (const k of [0, 2, 5]) expect([episodes[k].outcome, episodes[k].steps.length]).toEqual(['success', 2]);
    for (const name of ['chat', 'huge', 'text']) {
      const { status, json } = answers[name];
      expect(status, name).toBe(400);
      expect(json.error.message, name).toMatch(/context.* 4096 tokens/);
      expect(json.error.message, name).toMatch(/Episode ep\d+-[0-9a-f]+ has ended\.$/);
      expect(json.error.code, name).toBe('context_length_exceeded');
      expect(json.error.param, name).toBe(name === 'text' ? 'prompt' : 'messages');
    }
    const overLongChat = answers.chat.json.error.message;
    expect(overLongChat).toMatch(
      /^This model's maximum context length is 4096 tokens\. However, you requested \d+ tokens \(\d+ in the messages, 6 in the completion\)\./,
    );
    expect(answers.text.json.error.message).toContain(`(${overLongTokens} in the prompt, 6 in the completion)`);
    expect(answers.huge.json.error.message).toMatch(
      new RegExp(
        `^"messages" is ${Buffer.byteLength(huge)} bytes, at least \\d+ tokens .*cannot fit in the model's context of 4096 tokens`,
      ),
    );

    const failed = [1, 3, 4].map((k) => episodes[k]);
    for (const e of failed) {
      expect(e.outcome).toBe('failed');
      expect(e.steps).toHaveLength(0);
      expect(e.failure).toMatch(/^a call's prompt was refused: .*context.* 4096 tokens/);
      expect(e.failure).not.toContain('made no call');
    }
    expect(failed[0].failure).toBe(`a call's prompt was refused: ${overLongChat.replace(/ Episode .* has ended\.$/, '')}`);
    // The 10 MB message was measured, not tokenised; nothing longer than the context reached the engine.
    expect(seen.longestEncoded).toBeLessThan(100_000);
    expect(Math.max(...seen.calls.flat())).toBeLessThanOrEqual(context - 6);
  }, 120_000);
});

describe('an engine that fails on one prompt', () => {
  it('fails that call and its episode alone; the batch-mates get their answers', async () => {
    const answers: Answer[] = [];
    const poisoned = async (input: AgentInput) => {
      answers.push(await ask(input, 'POISON'));
      return 1;
    };
    const { engine: watchedEngine, seen } = watched(engine, 'POISON');
    const episodes = await playBatch(watchedEngine, [healthy, healthy, poisoned, healthy]);

    for (const k of [0, 1, 3]) expect([episodes[k].outcome, episodes[k].steps.length]).toEqual(['success', 2]);
    expect(answers).toHaveLength(1);
    expect(answers[0].status).toBe(500);
    expect(answers[0].json.error.message).toMatch(/^the engine failed on its call: cannot sample "POISON"; episode ep\d+-\w+ has ended$/);
    expect(episodes[2].outcome).toBe('failed');
    expect(episodes[2].failure).toBe('the engine failed on its call: cannot sample "POISON"');
    // The first step: the four together (it threw), then each alone; the second step: the three healthy ones.
    expect(seen.calls.map((c) => c.length)).toEqual([4, 1, 1, 1, 1, 3]);
  }, 120_000);
});
