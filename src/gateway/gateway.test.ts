/**
 * The gateway's protocol over real HTTP with the tiny engine: a chat call's tokens and log-probs are the
 * engine's own for the step's seed and are recorded as the episode's step; streaming chunks (chat and text)
 * in OpenAI's format add up to the same answer; /models; the key alone routes to its episode; wrong keys,
 * unknown episodes, built-in tool types, tool results without their call and unknown fields are refused
 * with errors that say what is wrong.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../config/load.ts';
import { environmentCorpus } from '../envs/index.ts';
import { createEngine, initBackend } from '../policy/index.ts';
import type { PolicyEngine } from '../policy/types.ts';
import { rolloutSettings } from '../trainer/rollout.ts';
import { TINY_MODEL } from '../../test/support/tiny.ts';
import { openAgentPlay, type AgentInput } from './index.ts';

let engine: PolicyEngine;
const cfg = loadConfig(null, [...TINY_MODEL, 'seed=9', 'rollout.max_tokens=6', 'run_dir=/nonexistent']);
beforeAll(async () => {
  await initBackend();
  ({ engine } = await createEngine(cfg, 'fresh', () => environmentCorpus(cfg.env)));
}, 120_000);

const MESSAGES = [{ role: 'user', content: 'Task: Find the yellow hat.\nYou are in the hall.' }];

async function call(url: string, key: string, body: unknown, method = 'POST') {
  const res = await fetch(url, {
    method,
    headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${key}` },
    body: method === 'POST' ? JSON.stringify(body) : undefined,
  });
  return { status: res.status, text: await res.text() };
}

/** Events of a server-sent stream, [DONE] excluded. */
function events(text: string): any[] {
  const data = text
    .split('\n\n')
    .filter((l) => l.startsWith('data: '))
    .map((l) => l.slice(6));
  expect(data.at(-1)).toBe('[DONE]');
  return data.slice(0, -1).map((d) => JSON.parse(d));
}

/** Plays one episode whose agent is `agent` and returns the episode the player recorded. */
async function playOne(agent: (input: AgentInput) => Promise<number>) {
  const play = await openAgentPlay(cfg, { agent, taskOf: () => 'task', log: () => {} });
  try {
    const settings = rolloutSettings(cfg, false, 77);
    const { episodes } = await play.player(engine, [{ task: 'agent', variation: 0, group: 0 }], {
      settingsFor: () => settings,
      evaluation: false,
    });
    expect(play.gateway.openRequests()).toBe(0);
    return episodes[0];
  } finally {
    await play.close();
  }
}

describe('the gateway protocol', () => {
  it('answers a chat call with the engine sample of the step, recorded as the episode step; streams add up to it', async () => {
    const seen: any = {};
    const episode = await playOne(async ({ baseURL, apiKey, model }) => {
      seen.models = JSON.parse((await call(`${baseURL}/models`, apiKey, null, 'GET')).text);
      seen.plain = JSON.parse(
        (await call(`${baseURL}/chat/completions`, apiKey, { model, messages: MESSAGES, logprobs: true, return_token_ids: true })).text,
      );
      const chatStream = await call(`${baseURL}/chat/completions`, apiKey, {
        model,
        messages: MESSAGES,
        stream: true,
        stream_options: { include_usage: true },
      });
      seen.chatChunks = events(chatStream.text);
      const textStream = await call(`${baseURL}/completions`, apiKey, { model, prompt: 'You are in the hall.', stream: true, logprobs: 0 });
      seen.textChunks = events(textStream.text);
      // The key alone, on the gateway's /v1, names the episode.
      const root = baseURL.replace(/\/episodes\/[^/]+\/v1$/, '/v1');
      seen.byKey = (await call(`${root}/models`, apiKey, null, 'GET')).status;
      return 1;
    });
    expect(seen.models.data[0].id).toBe('empo2-tiny');
    expect(seen.byKey).toBe(200);
    const c = seen.plain.choices[0];
    const tok = engine.tokenizer;
    const prompt = tok.encode(`<|im_start|>user\n${MESSAGES[0].content}`).concat(tok.encode('<|im_end|>\n<|im_start|>assistant\n'));
    expect(c.prompt_token_ids).toEqual(prompt);
    const settings = rolloutSettings(cfg, false, 77);
    const [g] = await engine.generate([prompt], {
      temperature: settings.temperature,
      topP: settings.topP,
      maxTokens: 6,
      seed: 77 * 100_003,
    });
    expect(c.token_ids).toEqual(g.tokens);
    expect(c.logprobs.content.map((x: any) => x.logprob)).toEqual(g.logprobs);
    expect(c.message).toEqual({ role: 'assistant', content: g.text });
    expect(episode.steps[0]).toMatchObject({ prompt, response: g.tokens, logprobs: g.logprobs, tipSpan: null, action: g.text.trim() });
    expect(episode.steps).toHaveLength(3);
    expect(episode.score).toBe(100);
    // Chat stream: the role first, one delta per token, the finish reason, the usage, then [DONE].
    const chunks = seen.chatChunks;
    expect(chunks[0].choices[0].delta.role).toBe('assistant');
    expect(chunks.every((k: any) => k.object === 'chat.completion.chunk')).toBe(true);
    const streamed = chunks.flatMap((k: any) => k.choices.map((ch: any) => ch.delta.content ?? '')).join('');
    expect(streamed.trim()).toBe(episode.steps[1].action);
    expect(chunks.at(-1).usage.completion_tokens).toBe(episode.steps[1].response.length);
    expect(chunks.at(-2).choices[0].finish_reason).toMatch(/stop|length/);
    const text = seen.textChunks.map((k: any) => k.choices[0].text).join('');
    expect(text.trim()).toBe(episode.steps[2].action);
    expect(seen.textChunks[0].object).toBe('text_completion');
  });

  it('refuses built-in tools, results without their call, unknown fields, wrong keys and unknown episodes, saying what is wrong', async () => {
    const seen: Record<string, { status: number; text: string }> = {};
    await playOne(async ({ baseURL, apiKey, model }) => {
      seen.tools = await call(`${baseURL}/chat/completions`, apiKey, {
        model,
        messages: MESSAGES,
        tools: [{ type: 'web_search_preview' }],
      });
      seen.toolMessage = await call(`${baseURL}/chat/completions`, apiKey, {
        model,
        messages: [...MESSAGES, { role: 'tool', content: 'x', tool_call_id: 'call_1' }],
      });
      seen.unknown = await call(`${baseURL}/chat/completions`, apiKey, { model, messages: MESSAGES, frobnicate: 1 });
      seen.wrongKey = await call(`${baseURL}/chat/completions`, 'nope', { model, messages: MESSAGES });
      seen.noEpisode = await call(baseURL.replace(/episodes\/[^/]+/, 'episodes/ep-none'), apiKey, { model, messages: MESSAGES });
      seen.wrongModel = await call(`${baseURL}/chat/completions`, apiKey, { model: 'gpt-4o', messages: MESSAGES });
      await call(`${baseURL}/chat/completions`, apiKey, { model, messages: MESSAGES });
      return 0.5;
    });
    expect(seen.tools.status).toBe(400);
    expect(JSON.parse(seen.tools.text).error).toMatchObject({ param: 'tools[0].type' });
    expect(JSON.parse(seen.tools.text).error.message).toContain('"web_search_preview" tools are not supported by the empo2 gateway');
    expect(seen.toolMessage.status).toBe(400);
    expect(JSON.parse(seen.toolMessage.text).error).toMatchObject({ param: 'messages[1].tool_call_id' });
    expect(seen.unknown.status).toBe(400);
    expect(seen.unknown.text).toContain('frobnicate');
    expect(seen.wrongKey.status).toBe(401);
    expect(seen.noEpisode.status).toBe(404);
    expect(seen.wrongModel.status).toBe(404);
    expect(seen.wrongModel.text).toContain('empo2-tiny');
  });
});
