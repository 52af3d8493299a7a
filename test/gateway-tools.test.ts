/**
 * Tool calling through the training gateway with the tiny model and real, unmodified clients: the `openai`
 * npm client (plain, and streaming through its own stream accumulator), LangChain.js's
 * `ChatOpenAI.bindTools` and `withStructuredOutput`, an `@openai/agents` Agent on Chat Completions, and a
 * Python agent with the `openai` pip package run as a process, each playing a multi-turn tool episode (two
 * tool calls and their results). Calls are forced with `tool_choice` (decoding constrained to a valid call
 * of the tools' schemas) or with the gateway's `allowed_texts` (constrained decoding with the real engine).
 *
 * Exactness: the clients send the assistant's calls back re-serialised (keys reordered, arguments
 * re-spaced, pydantic's model_dump), and every step's prompt still extends the previous step's tip-free
 * prompt and sampled ids token for token; with the memory's tips shown in every call, cutting the tip span
 * out gives the ids of the same episode played without tips. An edited history is recorded as not
 * token-exact, a malformed call as text with its reason and the format reward. Each answer carries the
 * policy version. Bad input gets a 400 naming the field.
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
import { join } from 'node:path';
import { runAgentProcess } from '../src/gateway/index.ts';
import { pythonGate, REPO_ROOT, venvPython } from './support/python.ts';
import { TINY_MODEL } from './support/tiny.ts';

let engine: PolicyEngine;
const SET = [...TINY_MODEL, 'seed=9', 'rollout.max_tokens=120', 'run_dir=/nonexistent'];
const cfg = loadConfig(null, SET);
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

/** Plays one episode behind `agent`, with the tips of `memory` when given (and config overrides `set`); returns the recorded episode. */
async function playOne(
  agent: (input: AgentInput) => Promise<number>,
  memory?: RolloutMemory,
  set: string[] = [],
  policyVersion?: number,
): Promise<Episode> {
  const runCfg = set.length ? loadConfig(null, [...SET, ...set]) : cfg;
  const play = await openAgentPlay(runCfg, { agent, taskOf: () => 'task', log: () => {} });
  // The trainer tells the gateway which weights sample (TrainOptions.onPhase); every answer says it.
  if (policyVersion !== undefined) play.onPhase({ phase: 'rollout', iteration: policyVersion + 1, policyVersion });
  try {
    const settings = rolloutSettings(runCfg, false, 31);
    const { episodes } = await play.player(engine, [{ task: 'agent', variation: 0, group: 0 }], {
      settingsFor: () => settings,
      evaluation: false,
      ...(memory ? { memory } : {}),
    });
    // The player returns once its episodes have no request open; the HTTP side closes a moment later (a 5 MB body's too).
    for (let t = 0; t < 100 && play.gateway.openRequests() > 0; t++) await new Promise((r) => setTimeout(r, 20));
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

  it('forces calls with tool_choice (a named function with a free string, then "required"), streamed to the openai client', async () => {
    const note: OpenAI.Chat.Completions.ChatCompletionTool = {
      type: 'function',
      function: {
        name: 'note',
        parameters: { type: 'object', properties: { text: { type: 'string', maxLength: 6 } }, required: ['text'] },
      },
    };
    const seen: OpenAI.Chat.Completions.ChatCompletionMessage[] = [];
    const episode = await playOne(async ({ baseURL, apiKey, model }) => {
      const client = new OpenAI({ baseURL, apiKey, maxRetries: 0 });
      const messages: OpenAI.Chat.Completions.ChatCompletionMessageParam[] = [{ role: 'user', content: 'Write a note, then move.' }];
      const choices: OpenAI.Chat.Completions.ChatCompletionToolChoiceOption[] = [
        { type: 'function', function: { name: 'note' } },
        'required',
      ];
      for (const [k, tool_choice] of choices.entries()) {
        const s = client.chat.completions.stream({ model, messages, tools: [note, ...TOOLS], tool_choice });
        const message = (await s.finalChatCompletion()).choices[0].message;
        seen.push(message);
        messages.push(reserialised(message));
        messages.push({ role: 'tool', tool_call_id: message.tool_calls![0].id, content: k === 0 ? 'Noted.' : 'Moved.' });
      }
      return 1;
    });
    const [first, second] = seen.map((m) => m.tool_calls![0]) as OpenAI.Chat.Completions.ChatCompletionMessageFunctionToolCall[];
    expect(first.function.name).toBe('note');
    expect(Object.keys(JSON.parse(first.function.arguments))).toEqual(['text']);
    expect(JSON.parse(first.function.arguments).text.length).toBeLessThanOrEqual(6);
    // "required": a valid call of one of the tools (the enums' values, a short note).
    const args = JSON.parse(second.function.arguments) as Record<string, unknown>;
    if (second.function.name === 'note') expect(String(args.text).length).toBeLessThanOrEqual(6);
    else
      expect(['move {"room":"hall"}', 'move {"room":"kitchen"}', 'move {"room":"garden"}', 'look {}']).toContain(
        `${second.function.name} ${second.function.arguments}`,
      );
    expect(episode.steps.map((st) => st.call?.malformedToolCall)).toEqual([undefined, undefined]);
    expectExact(episode);
  }, 120_000);

  it('LangChain.js ChatOpenAI.bindTools plays a tool episode with forced calls (enum arguments: sampled as allowed texts)', async () => {
    const { ChatOpenAI } = await import('@langchain/openai');
    const { HumanMessage, ToolMessage } = await import('@langchain/core/messages');
    type BaseMessage = import('@langchain/core/messages').BaseMessage;
    const calls: { name: string; args: Record<string, unknown> }[] = [];
    let final = '';
    const episode = await playOne(async ({ baseURL, apiKey, model }) => {
      const llm = new ChatOpenAI({ model, apiKey, configuration: { baseURL }, maxRetries: 0 });
      const history: BaseMessage[] = [new HumanMessage('Find the hat.')];
      for (const name of ['move', 'look']) {
        const ai = await llm.bindTools(TOOLS, { tool_choice: name }).invoke(history);
        const call = ai.tool_calls![0];
        calls.push({ name: call.name, args: call.args });
        history.push(ai, new ToolMessage({ content: name === 'move' ? 'You are in the garden.' : 'A hat.', tool_call_id: call.id! }));
      }
      const last = await new ChatOpenAI({
        model,
        apiKey,
        configuration: { baseURL },
        maxRetries: 0,
        modelKwargs: { allowed_texts: ['Found it.'] },
      })
        .bindTools(TOOLS)
        .invoke(history);
      final = String(last.content);
      return 1;
    });
    expect(calls.map((c) => c.name)).toEqual(['move', 'look']);
    expect(['hall', 'kitchen', 'garden']).toContain(calls[0].args.room);
    expect(calls[1].args).toEqual({});
    expect(final).toBe('Found it.');
    expect(episode.steps).toHaveLength(3);
    expectExact(episode);
  }, 120_000);

  it("with the memory's tips in every call: the tip span cut out gives the ids of the same episode played without tips", async () => {
    const agent = async ({ baseURL, apiKey, model }: AgentInput) => {
      const client = new OpenAI({ baseURL, apiKey, maxRetries: 0 });
      const messages: OpenAI.Chat.Completions.ChatCompletionMessageParam[] = [{ role: 'user', content: 'Find the yellow hat.' }];
      const plan = [forced('move', { room: 'garden' }), forced('look', {}), forced('move', { room: 'hall' })];
      for (const [k, allowed] of plan.entries()) {
        const body = {
          model,
          messages,
          tools: TOOLS,
          allowed_texts: allowed,
        } as OpenAI.Chat.Completions.ChatCompletionCreateParamsNonStreaming;
        const message = (await client.chat.completions.create(body)).choices[0].message;
        messages.push(reserialised(message));
        messages.push({ role: 'tool', tool_call_id: message.tool_calls![0].id, content: `result ${k}` });
      }
      return 1;
    };
    const withTips = await playOne(agent, TIPS);
    const without = await playOne(agent);
    expect(withTips.steps.every((st) => st.tipSpan !== null)).toBe(true);
    expect(withTips.steps.map((st) => st.tips?.[0]?.text)).toEqual([
      'last time, in "Find the yellow hat.", looking first helped',
      'last time, in "result 0", looking first helped',
      'last time, in "result 1", looking first helped',
    ]);
    expect(withTips.steps.map((st) => removeTips(st.prompt, st.tipSpan))).toEqual(without.steps.map((st) => st.prompt));
    expect(withTips.steps.map((st) => st.response)).toEqual(without.steps.map((st) => st.response));
    expectExact(withTips);
    expectExact(without);
  }, 120_000);

  it('records a history the agent edited as not token-exact, and a malformed call as text with its reason and the format reward', async () => {
    const bad = '<tool_call>\n{"name": "move", "arguments": {"room": }\n</tool_call>';
    const seen: OpenAI.Chat.Completions.ChatCompletionMessage[] = [];
    const episode = await playOne(
      async ({ baseURL, apiKey, model }) => {
        const client = new OpenAI({ baseURL, apiKey, maxRetries: 0 });
        const messages: OpenAI.Chat.Completions.ChatCompletionMessageParam[] = [{ role: 'user', content: 'Go.' }];
        const ask = async (allowed: string[]) => {
          const body = {
            model,
            messages,
            tools: TOOLS,
            allowed_texts: allowed,
          } as OpenAI.Chat.Completions.ChatCompletionCreateParamsNonStreaming;
          const r = await client.chat.completions.create(body);
          seen.push(r.choices[0].message);
          return r.choices[0];
        };
        const first = await ask(forced('move', { room: 'hall' }));
        // The agent changes the call's arguments before sending it back: that turn was never sampled.
        const edited = reserialised(first.message) as { tool_calls: { function: { arguments: string } }[] };
        edited.tool_calls[0].function.arguments = '{"room": "garden"}';
        messages.push(edited as never, { role: 'tool', tool_call_id: first.message.tool_calls![0].id, content: 'ok' });
        const second = await ask([bad]);
        expect(second.finish_reason).toBe('stop');
        return 1;
      },
      undefined,
      ['rollout.malformed_tool_call_reward=-0.25'],
    );
    expect(seen[1]).toMatchObject({ content: bad });
    expect(seen[1].tool_calls ?? []).toEqual([]);
    expect(episode.steps[0].call).toEqual({ tokenExact: true });
    expect(episode.steps[1].call?.tokenExact).toBe(false);
    expect(episode.steps[1].call?.malformedToolCall).toMatch(/^tool call 1: not JSON/);
    // The format reward on the malformed step, the agent's reward (1 = 100) on the last as always.
    expect(episode.steps.map((st) => st.reward)).toEqual([0, 100 - 0.25]);
  }, 120_000);

  it('refuses bad tool requests with a 400 naming the field, and a 5 MB tool result by the prompt limits', async () => {
    const seen: Record<string, { status: number; error: { message: string; param: string | null } }> = {};
    await playOne(async ({ baseURL, apiKey, model }) => {
      const post = async (name: string, body: Record<string, unknown>) => {
        const res = await fetch(`${baseURL}/chat/completions`, {
          method: 'POST',
          headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${apiKey}` },
          body: JSON.stringify({ model, ...body }),
        });
        seen[name] = { status: res.status, error: ((await res.json()) as { error: never }).error };
      };
      const user = { role: 'user', content: 'Go.' };
      const call = {
        role: 'assistant',
        content: null,
        tool_calls: [{ id: 'call_a', type: 'function', function: { name: 'look', arguments: '{}' } }],
      };
      await post('builtin', { messages: [user], tools: [{ type: 'file_search', vector_store_ids: [] }] });
      await post('properties', {
        messages: [user],
        tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object', properties: [] } } }],
      });
      await post('propertyType', {
        messages: [user],
        tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object', properties: { x: { type: 'text' } } } } }],
      });
      await post('name', { messages: [user], tools: [{ type: 'function', function: { name: 'has space' } }] });
      await post('notObject', { messages: [user], tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'array' } } }] });
      await post('choice', { messages: [user], tools: TOOLS, tool_choice: { type: 'function', function: { name: 'fly' } } });
      await post('unknownCall', { messages: [user, call, { role: 'tool', tool_call_id: 'call_b', content: 'x' }], tools: TOOLS });
      await post('arguments', {
        messages: [user, { ...call, tool_calls: [{ ...call.tool_calls[0], function: { name: 'look', arguments: '{"a":' } }] }],
        tools: TOOLS,
      });
      await post('ignored', {
        messages: [user],
        store: true,
        metadata: { a: '1' },
        user: 'u',
        service_tier: 'auto',
        allowed_texts: ['ok'],
      });
      await post('huge', { messages: [user, call, { role: 'tool', tool_call_id: 'call_a', content: 'x'.repeat(5 << 20) }], tools: TOOLS });
      return 1;
    });
    const param = (name: string) => [seen[name].status, seen[name].error?.param];
    expect(param('builtin')).toEqual([400, 'tools[0].type']);
    expect(seen.builtin.error.message).toContain('"file_search" tools are not supported by the empo2 gateway');
    expect(param('properties')).toEqual([400, 'tools[0].function.parameters.properties']);
    expect(param('propertyType')).toEqual([400, 'tools[0].function.parameters.properties.x.type']);
    expect(param('name')).toEqual([400, 'tools[0].function.name']);
    expect(param('notObject')).toEqual([400, 'tools[0].function.parameters.type']);
    expect(param('choice')).toEqual([400, 'tool_choice.function.name']);
    expect(seen.choice.error.message).toContain('no tool "fly" in "tools" (move, look)');
    expect(param('unknownCall')).toEqual([400, 'messages[2].tool_call_id']);
    expect(param('arguments')).toEqual([400, 'messages[1].tool_calls[0].function.arguments']);
    expect(seen.ignored.status).toBe(200);
    // The existing limits: more bytes than the context could hold, refused before tokenising; the episode ends.
    expect(param('huge')).toEqual([400, 'messages']);
    expect(seen.huge.error.message).toMatch(/has ended/);
  }, 120_000);

  it('answers response_format json_schema (the openai client, LangChain withStructuredOutput) with JSON of the schema', async () => {
    const { ChatOpenAI } = await import('@langchain/openai');
    const { z } = await import('zod');
    const schema = {
      type: 'object',
      properties: {
        room: { type: 'string', enum: ['hall', 'kitchen'] },
        found: { type: 'boolean' },
        note: { type: 'string', maxLength: 5 },
      },
      required: ['room', 'found', 'note'],
      additionalProperties: false,
    };
    const seen: {
      openai?: unknown;
      langchain?: unknown;
      refused?: { status: number; param: string | null };
      version?: (string | null | undefined)[];
    } = {};
    await playOne(
      async ({ baseURL, apiKey, model }) => {
        const client = new OpenAI({ baseURL, apiKey, maxRetries: 0 });
        const { data: r, response } = await client.chat.completions
          .create({
            model,
            messages: [{ role: 'user', content: 'Where is the hat?' }],
            response_format: { type: 'json_schema', json_schema: { name: 'answer', schema, strict: true } },
          })
          .withResponse();
        seen.openai = JSON.parse(r.choices[0].message.content!);
        seen.version = [r.system_fingerprint, response.headers.get('x-empo2-policy-version')];
        const llm = new ChatOpenAI({ model, apiKey, configuration: { baseURL }, maxRetries: 0 });
        const structured = llm.withStructuredOutput(z.object({ room: z.enum(['hall', 'kitchen']), found: z.boolean() }), {
          name: 'answer',
        });
        seen.langchain = await structured.invoke('Where is the hat?');
        const bad = await fetch(`${baseURL}/chat/completions`, {
          method: 'POST',
          headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${apiKey}` },
          body: JSON.stringify({
            model,
            messages: [{ role: 'user', content: 'x' }],
            response_format: {
              type: 'json_schema',
              json_schema: { name: 'a', schema: { type: 'object', properties: { x: { type: 'string', pattern: '^a+$' } } } },
            },
          }),
        });
        seen.refused = { status: bad.status, param: ((await bad.json()) as { error: { param: string | null } }).error.param };
        return 1;
      },
      undefined,
      [],
      3,
    );
    expect(seen.version).toEqual(['empo2-policy-3', '3']);
    const answer = seen.openai as { room: string; found: boolean; note: string };
    expect(Object.keys(answer)).toEqual(['room', 'found', 'note']);
    expect(['hall', 'kitchen']).toContain(answer.room);
    expect(typeof answer.found).toBe('boolean');
    expect(answer.note.length).toBeLessThanOrEqual(5);
    expect(['hall', 'kitchen']).toContain((seen.langchain as { room: string }).room);
    expect(seen.refused).toEqual({ status: 400, param: 'response_format.json_schema.schema.properties.x.pattern' });
  }, 120_000);

  const gate = pythonGate(['openai']);
  it.skipIf(!gate.available)(
    `a Python agent with the openai pip package calls tools, as a process (${gate.label})`,
    async () => {
      const lines: string[] = [];
      const command = `${venvPython()} ${join(REPO_ROOT, 'test', 'support', 'python-tool-agent.py')}`;
      const episode = await playOne((input) => runAgentProcess({ command, log: (l) => lines.push(l) }, input) as Promise<number>);
      const seen = JSON.parse(lines.find((l) => l.includes('"first"'))!.replace(/^[^{]*/, '')) as Record<string, string[]>;
      expect(seen.first.slice(0, 2)).toEqual(['tool_calls', 'move']);
      expect(['{"room":"hall"}', '{"room":"kitchen"}']).toContain(seen.first[2]);
      expect(seen.second[0]).toBe('tool_calls');
      expect(['move {"room":"hall"}', 'move {"room":"kitchen"}', 'look {}']).toContain(`${seen.second[1]} ${seen.second[2]}`);
      expect(episode.score).toBe(100);
      expectExact(episode);
    },
    120_000,
  );

  it('an @openai/agents Agent on Chat Completions (OpenAIChatCompletionsModel) runs two tool calls and their results', async () => {
    const { Agent, run, tool, OpenAIChatCompletionsModel, setTracingDisabled } = await import('@openai/agents');
    const { z } = await import('zod');
    setTracingDisabled(true);
    const ran: string[] = [];
    const episode = await playOne(async ({ baseURL, apiKey, model }) => {
      const move = tool({
        name: 'move',
        description: 'Go to a room.',
        parameters: z.object({ room: z.enum(['hall', 'kitchen']) }),
        execute: async ({ room }) => {
          ran.push(`move ${room}`);
          return `You are in the ${room}.`;
        },
      });
      const look = tool({
        name: 'look',
        description: 'Look around.',
        parameters: z.object({}),
        execute: async () => {
          ran.push('look');
          return 'A hat.';
        },
      });
      let results = 0;
      const agent = new Agent({
        name: 'finder',
        instructions: 'Find the hat.',
        // The SDK pins its own copy of `openai`; the client is the same at run time.
        model: new OpenAIChatCompletionsModel(
          new OpenAI({ baseURL, apiKey, maxRetries: 0 }) as unknown as ConstructorParameters<typeof OpenAIChatCompletionsModel>[0],
          model,
        ),
        tools: [move, look],
        modelSettings: { toolChoice: 'required' },
        resetToolChoice: false,
        // Two tool results end the run (the tiny model would call forced tools for ever).
        toolUseBehavior: (_ctx, toolResults) => {
          results += toolResults.length;
          return results >= 2
            ? { isFinalOutput: true, isInterrupted: undefined, finalOutput: 'done' }
            : { isFinalOutput: false, isInterrupted: undefined };
        },
      });
      const r = await run(agent, 'Where is the hat?');
      expect(r.finalOutput).toBe('done');
      return 1;
    });
    expect(ran).toHaveLength(2);
    expect(episode.steps).toHaveLength(2);
    expect(episode.steps.map((st) => st.call?.malformedToolCall)).toEqual([undefined, undefined]);
    expectExact(episode);
  }, 120_000);

  it('returns parallel calls in one answer, and only the first with parallel_tool_calls false', async () => {
    const two = [`${forced('look', {})[0]}\n${forced('move', { room: 'hall' })[0]}`];
    const seen: OpenAI.Chat.Completions.ChatCompletionMessage[] = [];
    const episode = await playOne(async ({ baseURL, apiKey, model }) => {
      const client = new OpenAI({ baseURL, apiKey, maxRetries: 0 });
      const messages: OpenAI.Chat.Completions.ChatCompletionMessageParam[] = [{ role: 'user', content: 'Look and go.' }];
      // The third call's prompt holds the second answer as sampled, both calls in it, though one went back.
      for (const parallel of [true, false, true]) {
        const body = { model, messages, tools: TOOLS, parallel_tool_calls: parallel, allowed_texts: two };
        const message = (await client.chat.completions.create(body as OpenAI.Chat.Completions.ChatCompletionCreateParamsNonStreaming))
          .choices[0].message;
        seen.push(message);
        messages.push(
          reserialised(message),
          ...message.tool_calls!.map((c) => ({ role: 'tool' as const, tool_call_id: c.id, content: 'ok' })),
        );
      }
      return 1;
    });
    expect(
      seen.map((m) => m.tool_calls!.map((c) => (c as OpenAI.Chat.Completions.ChatCompletionMessageFunctionToolCall).function.name)),
    ).toEqual([['look', 'move'], ['look'], ['look', 'move']]);
    expectExact(episode);
  }, 120_000);
});
