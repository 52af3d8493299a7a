/**
 * Tool calling through the training gateway with the tiny model and real clients: the unmodified `openai`
 * npm client (plain, and streaming through its own stream accumulator) and LangChain.js's
 * `ChatOpenAI.bindTools` play multi-turn tool episodes (two tool calls and their results, then an answer);
 * the calls are forced with the gateway's `allowed_texts` (constrained decoding with the real engine).
 *
 * Exactness: the client sends the assistant's calls back re-serialised (keys reordered, arguments
 * re-spaced), and every step's prompt still extends the previous step's tip-free prompt and sampled ids
 * token for token; with the memory's tips shown in every call, cutting the tip span out gives the tip-free
 * ids. Each answer carries the policy version. Bad input gets a 400 naming the field.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import { loadConfig } from '../src/config/load.ts';
import { environmentCorpus } from '../src/envs/index.ts';
import { createEngine, initBackend } from '../src/policy/index.ts';
import type { PolicyEngine } from '../src/policy/types.ts';
import type { Episode } from '../src/run/records.ts';
import { rolloutSettings, type RolloutMemory } from '../src/trainer/rollout.ts';
import { removeTips } from '../src/trainer/prompt.ts';
import { openAgentPlay, type AgentInput } from '../src/gateway/index.ts';
import { TINY_MODEL } from './support/tiny.ts';

let engine: PolicyEngine;
const cfg = loadConfig(null, [...TINY_MODEL, 'seed=9', 'rollout.max_tokens=120', 'run_dir=/nonexistent']);
beforeAll(async () => {
  await initBackend();
  ({ engine } = await createEngine(cfg, 'fresh', () => environmentCorpus(cfg.env)));
}, 120_000);

const TOOLS: OpenAI.Chat.Completions.ChatCompletionTool[] = [
  {
    type: 'function',
    function: {
      name: 'move',
      description: 'Go to a room.',
      parameters: { type: 'object', properties: { room: { type: 'string', enum: ['hall', 'kitchen', 'garden'] } }, required: ['room'] },
    },
  },
  { type: 'function', function: { name: 'look', parameters: { type: 'object', properties: {} } } },
];

/** The only text the model may answer: one Hermes tool call (what the json-constraint work will build from the schema). */
const forced = (name: string, args: object) => [`<tool_call>\n{"name": "${name}", "arguments": ${JSON.stringify(args)}}\n</tool_call>`];

/** A memory that shows one tip in every call, keyed on the state it is asked about. */
const TIPS: RolloutMemory = {
  uses: () => true,
  tips: async (queries) =>
    queries.map((q) => [
      { text: `last time, in "${q.state.slice(0, 24)}", looking first helped`, score: 50, similarity: 0.9, action: null },
    ]),
};

/** Plays one episode behind `agent`, with the tips of `memory` when given; returns the recorded episode. */
async function playOne(agent: (input: AgentInput) => Promise<number>, memory?: RolloutMemory): Promise<Episode> {
  const play = await openAgentPlay(cfg, { agent, taskOf: () => 'task', log: () => {} });
  try {
    const settings = rolloutSettings(cfg, false, 31);
    const { episodes } = await play.player(engine, [{ task: 'agent', variation: 0, group: 0 }], {
      settingsFor: () => settings,
      evaluation: false,
      ...(memory ? { memory } : {}),
    });
    expect(play.gateway.openRequests()).toBe(0);
    return episodes[0];
  } finally {
    await play.close();
  }
}

/** An assistant message as a client that re-serialises it sends it back: keys reordered, arguments re-spaced. */
function reserialised(m: OpenAI.Chat.Completions.ChatCompletionMessage): OpenAI.Chat.Completions.ChatCompletionMessageParam {
  return {
    tool_calls: (m.tool_calls ?? []).map((c) => {
      if (c.type !== 'function') throw new Error('expected a function call');
      const args = JSON.parse(c.function.arguments) as Record<string, unknown>;
      const reordered = Object.fromEntries(Object.entries(args).reverse());
      return { function: { arguments: JSON.stringify(reordered, null, 3), name: c.function.name }, type: 'function', id: c.id };
    }),
    content: m.content,
    role: 'assistant',
  } as OpenAI.Chat.Completions.ChatCompletionMessageParam;
}

/** Each step's prompt extends the previous step's tip-free prompt and its sampled ids, token for token. */
function expectExact(episode: Episode): void {
  for (let t = 1; t < episode.steps.length; t++) {
    const before = episode.steps[t - 1];
    const sampled = [...removeTips(before.prompt, before.tipSpan), ...before.response];
    expect(removeTips(episode.steps[t].prompt, episode.steps[t].tipSpan).slice(0, sampled.length)).toEqual(sampled);
    expect(episode.steps[t].call?.tokenExact).toBe(true);
  }
}

describe('tool calls through the gateway', () => {
  it('the openai npm client plays a tool episode (two calls and their results), plain and streaming, token-exact', async () => {
    for (const stream of [false, true]) {
      const seen: { finish: string[]; fingerprints: (string | undefined)[]; headers: (string | null)[]; ids: number[][] } = {
        finish: [],
        fingerprints: [],
        headers: [],
        ids: [],
      };
      const episode = await playOne(async ({ baseURL, apiKey, model }) => {
        const client = new OpenAI({ baseURL, apiKey, maxRetries: 0 });
        const messages: OpenAI.Chat.Completions.ChatCompletionMessageParam[] = [
          { role: 'system', content: 'You find things.' },
          { role: 'user', content: 'Find the yellow hat. You are in the hall.' },
        ];
        const plan = [forced('move', { room: 'kitchen' }), forced('look', {}), ['The hat is in the kitchen.']];
        const results = ['You are in the kitchen.', 'You see a yellow hat.'];
        for (const [k, allowed] of plan.entries()) {
          const body = {
            model,
            messages,
            tools: TOOLS,
            allowed_texts: allowed,
          } as OpenAI.Chat.Completions.ChatCompletionCreateParamsNonStreaming;
          let message: OpenAI.Chat.Completions.ChatCompletionMessage;
          let finish: string;
          if (stream) {
            const s = client.chat.completions.stream(body as unknown as OpenAI.Chat.Completions.ChatCompletionCreateParamsStreaming);
            const done = await s.finalChatCompletion();
            message = done.choices[0].message;
            finish = done.choices[0].finish_reason;
            seen.fingerprints.push(done.system_fingerprint);
          } else {
            const { data, response } = await client.chat.completions.create(body).withResponse();
            message = data.choices[0].message;
            finish = data.choices[0].finish_reason;
            seen.fingerprints.push(data.system_fingerprint);
            seen.headers.push(response.headers.get('x-empo2-policy-version'));
            seen.ids.push((data.choices[0] as unknown as { token_ids: number[] }).token_ids);
          }
          seen.finish.push(finish);
          if (k === plan.length - 1) {
            expect(message.content).toBe('The hat is in the kitchen.');
            break;
          }
          expect(message.tool_calls).toHaveLength(1);
          messages.push(reserialised(message));
          messages.push({ role: 'tool', tool_call_id: message.tool_calls![0].id, content: results[k] });
        }
        return 1;
      });
      expect(seen.finish).toEqual(['tool_calls', 'tool_calls', 'stop']);
      expect(seen.fingerprints).toEqual(['empo2-policy-0', 'empo2-policy-0', 'empo2-policy-0']);
      if (!stream) {
        expect(seen.headers).toEqual(['0', '0', '0']);
        expect(episode.steps.map((st) => st.response)).toEqual(seen.ids);
      }
      expect(episode.steps.map((st) => st.action)).toEqual(['move {"room":"kitchen"}', 'look {}', 'The hat is in the kitchen.']);
      // The state of a step after a tool result is that result (the last observation).
      expect(episode.steps.map((st) => st.observation)).toEqual([
        'Find the yellow hat. You are in the hall.',
        'You are in the kitchen.',
        'You see a yellow hat.',
      ]);
      expectExact(episode);
    }
  }, 120_000);
});
