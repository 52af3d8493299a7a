/**
 * `POST /v1/responses` over real HTTP, answered through a real TurnBackend over the tiny engine
 * (test/support/turn-backend.ts: ChatML + Hermes tool markup, `engine.generate`, forced calls by the
 * engine's constrained decoding): the Response object and the streamed events match what was sampled;
 * `previous_response_id` and `item_reference` carry an episode's conversation on; the real clients,
 * unmodified (`openai`, `@openai/agents` on its default Responses model, the AI SDK's `generateText` /
 * `streamText` through `createOpenAI(...).responses`), play multi-turn tool episodes; bad input is a 400
 * naming the field.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import { Agent, OpenAIProvider, Runner, setTracingDisabled, tool } from '@openai/agents';
import { createOpenAI } from '@ai-sdk/openai';
import { generateText, jsonSchema, Output, stepCountIs, streamText, tool as aiTool } from 'ai';
import { z } from 'zod';
import { loadConfig } from '../../config/load.ts';
import { environmentCorpus } from '../../envs/index.ts';
import { createEngine, initBackend } from '../../policy/index.ts';
import type { PolicyEngine, TextTokenizer } from '../../policy/types.ts';
import type { TurnResult } from '../types.ts';
import { readResponsesRequest } from './protocol.ts';
import { responseEvents, responseObject, withLogprobs } from './serving.ts';
import { ResponseStore } from './store.ts';
import { TINY_MODEL } from '../../../test/support/tiny.ts';
import { startTurnServer, tinyTurnBackend, type TinyTurnBackend } from '../../../test/support/turn-backend.ts';

let engine: PolicyEngine;
let backend: TinyTurnBackend;
let server: Awaited<ReturnType<typeof startTurnServer>>;
const cfg = loadConfig(null, [...TINY_MODEL, 'seed=9', 'run_dir=/nonexistent']);
beforeAll(async () => {
  await initBackend();
  ({ engine } = await createEngine(cfg, 'fresh', () => environmentCorpus(cfg.env)));
  backend = tinyTurnBackend(engine, { seed: 5, policyVersion: 3 });
  server = await startTurnServer(backend);
}, 120_000);
afterAll(() => server?.close());

const MOVE = {
  type: 'function',
  name: 'move',
  description: 'Walk to a neighbouring room.',
  parameters: {
    type: 'object',
    properties: { direction: { type: 'string', enum: ['north', 'south', 'east'] } },
    required: ['direction'],
    additionalProperties: false,
  },
};

async function post(episode: string, body: unknown) {
  const res = await fetch(`${server.baseURL(episode)}/responses`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify(body),
  });
  return { status: res.status, headers: res.headers, text: await res.text() };
}

/** The events of a Responses stream, checked to be `event:` / `data:` pairs of the same type. */
function events(text: string): any[] {
  return text
    .split('\n\n')
    .filter(Boolean)
    .map((block) => {
      const [ev, data] = block.split('\n');
      const e = JSON.parse(data.slice('data: '.length));
      expect(ev).toBe(`event: ${e.type}`);
      return e;
    });
}

describe('POST /v1/responses, plain', () => {
  it('answers with the sampled text, usage and the policy version', async () => {
    const r = await post('a', { model: 'tiny', input: 'You are in the hall.', max_output_tokens: 8, metadata: { run: 'x' }, store: true });
    expect(r.status).toBe(200);
    expect(r.headers.get('x-empo2-policy-version')).toBe('3');
    const body = JSON.parse(r.text);
    const turn = backend.turns.at(-1)!;
    expect(turn.request.messages).toEqual([{ role: 'user', content: 'You are in the hall.' }]);
    expect(turn.request.messagesField).toBe('input');
    expect(turn.request.maxTokens).toBe(8);
    expect(body).toMatchObject({
      object: 'response',
      model: 'tiny',
      output: [{ type: 'message', role: 'assistant', content: [{ type: 'output_text', text: turn.result.generation.text }] }],
      usage: { input_tokens: turn.result.promptIds.length, output_tokens: turn.result.generation.tokens.length },
      metadata: { run: 'x', empo2_policy_version: '3' },
    });
    expect(turn.result.generation.tokens.length).toBeLessThanOrEqual(8);
    // 8 tokens of an untrained model: the cap cuts it, and the status says so as OpenAI's does.
    if (turn.result.generation.finish === 'length')
      expect(body).toMatchObject({ status: 'incomplete', incomplete_details: { reason: 'max_output_tokens' } });
    else expect(body).toMatchObject({ status: 'completed', incomplete_details: null });
  });

  it('forces a call, takes its output back by previous_response_id, and renders both', async () => {
    const first = JSON.parse(
      (await post('b', { input: 'Go somewhere.', instructions: 'You walk.', tools: [MOVE], tool_choice: 'required' })).text,
    );
    expect(first.status).toBe('completed');
    expect(first.output).toHaveLength(1);
    const call = first.output[0];
    expect(call).toMatchObject({ type: 'function_call', name: 'move', status: 'completed' });
    expect(call.call_id).toMatch(/^call_/);
    expect(['north', 'south', 'east']).toContain(JSON.parse(call.arguments).direction);
    expect(backend.turns.at(-1)!.request.messages[0]).toEqual({ role: 'system', content: 'You walk.' });

    const second = await post('b', {
      previous_response_id: first.id,
      input: [{ type: 'function_call_output', call_id: call.call_id, output: 'You are in the kitchen.' }],
      tools: [MOVE],
      tool_choice: { type: 'function', name: 'move' },
    });
    expect(second.status).toBe(200);
    const turn = backend.turns.at(-1)!;
    // instructions are not carried over (OpenAI's rule): the conversation is the input, the call and its result.
    expect(turn.request.messages).toEqual([
      { role: 'user', content: 'Go somewhere.' },
      { role: 'assistant', content: null, toolCalls: [{ id: call.call_id, name: 'move', arguments: call.arguments }] },
      { role: 'tool', toolCallId: call.call_id, content: 'You are in the kitchen.' },
    ]);
    expect(turn.prompt).toContain(`<tool_response>\nYou are in the kitchen.\n</tool_response>`);
    expect(turn.request.toolChoice).toEqual({ name: 'move' });
  });

  it('reads an item_reference as the output item it names', async () => {
    const first = JSON.parse((await post('c', { input: 'Hi.', max_output_tokens: 4 })).text);
    const msg = first.output[0];
    const r = await post('c', {
      input: [
        { role: 'user', content: 'Hi.' },
        { type: 'item_reference', id: msg.id },
        { role: 'user', content: 'And?' },
      ],
    });
    expect(r.status).toBe(200);
    expect(backend.turns.at(-1)!.request.messages).toEqual([
      { role: 'user', content: 'Hi.' },
      { role: 'assistant', content: msg.content[0].text, toolCalls: [] },
      { role: 'user', content: 'And?' },
    ]);
  });
});

describe('POST /v1/responses, streaming', () => {
  it('sends the events the SDKs read, in order and numbered, adding up to the answer', async () => {
    const r = await post('d', { input: 'You are in the hall.', stream: true, max_output_tokens: 12 });
    expect(r.headers.get('content-type')).toBe('text/event-stream');
    expect(r.headers.get('x-empo2-policy-version')).toBe('3');
    const ev = events(r.text);
    const turn = backend.turns.at(-1)!;
    const text = turn.result.generation.text;
    expect(ev.map((e) => e.sequence_number)).toEqual(ev.map((_, k) => k));
    const deltas = ev.filter((e) => e.type === 'response.output_text.delta');
    expect(deltas.map((e) => e.delta).join('')).toBe(text);
    expect(deltas.length).toBeGreaterThan(1); // token by token
    const last = turn.result.generation.finish === 'length' ? 'response.incomplete' : 'response.completed';
    expect([...new Set(ev.map((e) => e.type))]).toEqual([
      'response.created',
      'response.in_progress',
      'response.output_item.added',
      'response.content_part.added',
      'response.output_text.delta',
      'response.output_text.done',
      'response.content_part.done',
      'response.output_item.done',
      last,
    ]);
    expect(ev[0].response).toMatchObject({ status: 'in_progress', output: [] });
    expect(ev.at(-1).response.output[0].content[0].text).toBe(text);
    expect(ev.find((e) => e.type === 'response.output_text.done').text).toBe(text);
  });

  it('streams a forced call as function_call_arguments events', async () => {
    const ev = events((await post('e', { input: 'Go.', tools: [MOVE], tool_choice: 'required', stream: true })).text);
    expect(ev.map((e) => e.type)).toEqual([
      'response.created',
      'response.in_progress',
      'response.output_item.added',
      'response.function_call_arguments.delta',
      'response.function_call_arguments.done',
      'response.output_item.done',
      'response.completed',
    ]);
    const done = ev[5].item;
    expect(ev[2].item).toMatchObject({ type: 'function_call', id: done.id, call_id: done.call_id, arguments: '', status: 'in_progress' });
    expect(ev[3].delta).toBe(done.arguments);
    expect(ev[4]).toMatchObject({ item_id: done.id, arguments: done.arguments, name: 'move' });
    expect(ev[6].response.output).toEqual([done]);
    expect(backend.turns.at(-1)!.result.toolCalls[0]).toEqual({ id: done.call_id, name: 'move', arguments: done.arguments });
  });
});

describe('bad input: a 400 naming the field', () => {
  const bad = async (episode: string, body: unknown) => {
    const r = await post(episode, body);
    expect(r.status).toBe(400);
    return JSON.parse(r.text).error as { message: string; param: string };
  };

  it('a function_call_output without its call', async () => {
    const e = await bad('f', {
      input: [
        { role: 'user', content: 'x' },
        { type: 'function_call_output', call_id: 'call_nope', output: 'y' },
      ],
    });
    expect(e.param).toBe('input[1].call_id');
    expect(e.message).toContain('call_nope');
  });

  it('a previous_response_id from another episode, and an unknown one', async () => {
    const other = JSON.parse((await post('g', { input: 'Hi.', max_output_tokens: 2 })).text);
    const e = await bad('h', { previous_response_id: other.id, input: 'More.' });
    expect(e.param).toBe('previous_response_id');
    expect(e.message).toContain('not a response of episode h');
    expect((await bad('g', { previous_response_id: 'resp_unknown', input: 'More.' })).param).toBe('previous_response_id');
    expect((await post('g', { previous_response_id: other.id, input: 'More.', max_output_tokens: 2 })).status).toBe(200);
  });

  it('unknown fields, built-in tools, unsupported items and choices', async () => {
    expect((await bad('i', { input: 'x', frobnicate: 1 })).param).toBe('frobnicate');
    expect((await bad('i', { input: [{ role: 'user', content: 'x', colour: 'red' }] })).param).toBe('input[0].colour');
    const web = await bad('i', { input: 'x', tools: [{ type: 'web_search' }] });
    expect(web).toMatchObject({ param: 'tools[0].type' });
    expect(web.message).toContain('"web_search"');
    expect((await bad('i', { input: 'x', tools: [MOVE, { type: 'file_search', vector_store_ids: [] }] })).param).toBe('tools[1].type');
    expect((await bad('i', { input: [{ type: 'computer_call_output', call_id: 'c' }] })).param).toBe('input[0].type');
    expect((await bad('i', { input: [{ role: 'user', content: [{ type: 'input_image', image_url: 'x' }] }] })).param).toBe(
      'input[0].content[0].type',
    );
    expect((await bad('i', { input: 'x', tools: [MOVE], tool_choice: { type: 'function', name: 'fly' } })).param).toBe('tool_choice.name');
    expect((await bad('i', { input: 'x', tool_choice: { type: 'web_search_preview' } })).param).toBe('tool_choice.type');
    expect((await bad('i', { input: 'x', tool_choice: 'required' })).param).toBe('tool_choice');
    expect((await bad('i', { input: 'x', conversation: 'conv_1' })).param).toBe('conversation');
    expect((await bad('i', { input: [{ type: 'item_reference', id: 'msg_nope' }] })).param).toBe('input[0].id');
    expect((await bad('i', { input: [] })).param).toBe('input');
    // Schemas decoding would be constrained to, refused where the constraint cannot take them.
    const loose = { ...MOVE, parameters: { type: 'object', properties: { note: { type: 'string', pattern: '^a+$' } } } };
    expect((await bad('i', { input: 'x', tools: [MOVE, loose], tool_choice: 'required' })).param).toMatch(/^tools\[1\]\.parameters\./);
    expect((await post('i', { input: 'x', tools: [loose], max_output_tokens: 1 })).status).toBe(200); // not forced: not constrained
    const format = { type: 'json_schema', name: 'n', schema: { type: 'object', properties: { a: { type: 'string', pattern: 'x' } } } };
    expect((await bad('i', { input: 'x', text: { format } })).param).toMatch(/^text\.format\.schema\./);
    expect((await bad('i', { tools: [MOVE] })).param).toBe('input');
  });

  it('a previous_response_id the bounded store has let go of', async () => {
    const ids: string[] = [];
    for (let k = 0; k < 9; k++) ids.push(JSON.parse((await post('l', { input: `step ${k}`, max_output_tokens: 1 })).text).id);
    // The test server keeps 8 per episode: the first is gone, the second still chains.
    const e = await bad('l', { previous_response_id: ids[0], input: 'x' });
    expect(e.message).toContain('keeps the last 8 responses');
    expect((await post('l', { previous_response_id: ids[1], input: 'x', max_output_tokens: 1 })).status).toBe(200);
  });

  it('fields that do not change sampling are accepted and ignored', async () => {
    const r = await post('j', {
      input: 'x',
      max_output_tokens: 2,
      store: false,
      user: 'u',
      safety_identifier: 's',
      service_tier: 'auto',
      include: ['reasoning.encrypted_content'],
      reasoning: { effort: 'low' },
      truncation: 'auto',
      prompt_cache_key: 'k',
      temperature: 0.3,
      top_p: 0.9,
      parallel_tool_calls: false,
      text: { format: { type: 'text' }, verbosity: 'low' },
    });
    expect(r.status).toBe(200);
    // store: false keeps it out of the store
    const id = JSON.parse(r.text).id;
    expect((await bad('j', { previous_response_id: id, input: 'y' })).param).toBe('previous_response_id');
  });
});

describe('log-probs of the text (include message.output_text.logprobs)', () => {
  // One character a token; id 0 is the end of the turn, which decodes to nothing.
  const chars: TextTokenizer = {
    encode: (t) => [...t].map((c) => c.codePointAt(0)!),
    decode: (ids) => String.fromCodePoint(...ids.filter((id) => id !== 0)),
    vocabSize: 0x110000,
    tokenToId: (t) => t.codePointAt(0),
  };
  const answer = (sampled: string, end: boolean, content: string | null, calls: number): TurnResult => {
    const tokens = [...chars.encode(sampled), ...(end ? [0] : [])];
    return {
      content,
      toolCalls: Array.from({ length: calls }, (_, k) => ({ id: `call_${k}`, name: 'move', arguments: '{"to":"hall"}' })),
      finishReason: calls > 0 ? 'tool_calls' : 'stop',
      generation: { tokens, logprobs: tokens.map((_, k) => -(k + 1) / 10), text: sampled, finish: 'stop' },
      promptIds: [1, 2],
      policyVersion: 0,
    };
  };
  const made = (result: TurnResult, include: string[]) => {
    const call = readResponsesRequest({ input: 'x', include }, { store: new ResponseStore({ scope: 'test' }), server: 'the test' });
    const full = responseObject({ id: 'resp_1', call, result, model: 'm', createdAt: 0, tokenizer: chars });
    const response = withLogprobs(full, call.logprobs);
    return { response, events: responseEvents(response, { tokenizer: chars, result }) as any[] };
  };

  it("are the text tokens only: with a tool call, not the call's; without, the end of the turn too (with the last delta)", () => {
    const withCall = made(answer('Go.\n<tool_call>{"name": "move"}</tool_call>', true, 'Go.', 1), ['message.output_text.logprobs']);
    const part = (withCall.response.output[0] as any).content[0];
    expect(part.logprobs.map((l: any) => [l.token, l.logprob])).toEqual([
      ['G', -0.1],
      ['o', -0.2],
      ['.', -0.3],
    ]);
    expect(part.logprobs[0]).toEqual({ token: 'G', bytes: [71], logprob: -0.1, top_logprobs: [] });
    const deltas = withCall.events.filter((e) => e.type === 'response.output_text.delta');
    expect(deltas.map((e) => [e.delta, e.logprobs.map((l: any) => l.logprob)])).toEqual([
      ['G', [-0.1]],
      ['o', [-0.2]],
      ['.', [-0.3]],
    ]);

    const plain = made(answer('Hi', true, 'Hi', 0), ['message.output_text.logprobs']);
    const events = plain.events.filter((e) => e.type.startsWith('response.output_text.'));
    expect(events.map((e) => [e.type, e.delta ?? e.text, e.logprobs.map((l: any) => [l.token, l.logprob])])).toEqual([
      ['response.output_text.delta', 'H', [['H', -0.1]]],
      [
        'response.output_text.delta',
        'i',
        [
          ['i', -0.2],
          ['', -0.3],
        ],
      ],
      [
        'response.output_text.done',
        'Hi',
        [
          ['H', -0.1],
          ['i', -0.2],
          ['', -0.3],
        ],
      ],
    ]);
    const added = plain.events.find((e) => e.type === 'response.content_part.added');
    expect(added.part.logprobs).toEqual([]);
  });

  it('are left out (empty) unless asked for', () => {
    const { response, events } = made(answer('Hi', true, 'Hi', 0), ['reasoning.encrypted_content']);
    expect((response.output[0] as any).content[0].logprobs).toEqual([]);
    for (const e of events.filter((e) => e.type.startsWith('response.output_text.'))) expect(e.logprobs).toEqual([]);
  });
});

describe('the real clients, unmodified', () => {
  it('openai: responses.create and responses.stream', async () => {
    const client = new OpenAI({ baseURL: server.baseURL('k'), apiKey: 'none', maxRetries: 0 });
    const r = await client.responses.create({ model: 'tiny', input: 'Go.', tools: [MOVE as any], tool_choice: 'required' });
    const call = r.output[0];
    expect(call.type).toBe('function_call');
    const stream = client.responses.stream({
      model: 'tiny',
      previous_response_id: r.id,
      input: [{ type: 'function_call_output', call_id: (call as any).call_id, output: 'Kitchen.' }],
      max_output_tokens: 6,
    });
    let text = '';
    stream.on('response.output_text.delta', (e) => (text += e.delta));
    const final = await stream.finalResponse();
    expect(final.output_text).toBe(text);
    expect(text).toBe(backend.turns.at(-1)!.result.generation.text);
  });

  it('@openai/agents on its default (Responses) model: a 3-call tool episode, plain and streamed', async () => {
    setTracingDisabled(true);
    for (const stream of [false, true]) {
      // The provider's default model is its Responses model; a provider per run, as the default one keeps its first client.
      // A cast only: @openai/agents-openai pins its own copy of the openai package, the same client at run time.
      const client = new OpenAI({ baseURL: server.baseURL(`agents-${stream}`), apiKey: 'none', maxRetries: 0 });
      const runner = new Runner({ modelProvider: new OpenAIProvider({ openAIClient: client as any }), tracingDisabled: true });
      const visited: string[] = [];
      const move = tool({
        name: 'move',
        description: 'Walk to a neighbouring room.',
        parameters: z.object({ direction: z.enum(['north', 'south', 'east']) }),
        execute: ({ direction }) => {
          visited.push(direction);
          return `You walk ${direction} into room ${visited.length}.`;
        },
      });
      const agent = new Agent({
        name: 'walker',
        instructions: 'Walk three rooms.',
        model: 'tiny',
        tools: [move],
        modelSettings: { toolChoice: 'required' },
        // The tiny model calls only when forced: keep forcing, and stop after the third room.
        resetToolChoice: false,
        toolUseBehavior: () =>
          visited.length >= 3
            ? { isFinalOutput: true, isInterrupted: undefined, finalOutput: `visited ${visited.join(', ')}` }
            : { isFinalOutput: false, isInterrupted: undefined },
      });
      const before = backend.turns.length;
      const result = stream
        ? await runner.run(agent, 'Start in the hall.', { stream: true })
        : await runner.run(agent, 'Start in the hall.');
      if (stream) {
        // drain the streamed run
        for await (const _ of result as AsyncIterable<unknown>) void _;
        await (result as { completed: Promise<void> }).completed;
      }
      expect(result.finalOutput).toBe(`visited ${visited.join(', ')}`);
      expect(server.bodies.get(`agents-${stream}`)!.map((b) => b.stream)).toEqual([stream, stream, stream]);
      expect(visited).toHaveLength(3);
      const turns = backend.turns.slice(before);
      expect(turns).toHaveLength(3);
      // Each turn's conversation holds every earlier call with its result, in order.
      const last = turns[2].request.messages;
      expect(last[0]).toEqual({ role: 'system', content: 'Walk three rooms.' });
      const results = last.filter((m) => m.role === 'tool').map((m) => m.content);
      expect(results).toEqual(['You walk ' + visited[0] + ' into room 1.', 'You walk ' + visited[1] + ' into room 2.']);
      const calls = last.flatMap((m) => (m.role === 'assistant' ? m.toolCalls : []));
      expect(calls.map((c) => c.id)).toEqual(turns.slice(0, 2).map((t) => t.result.toolCalls[0].id));
      expect(calls.map((c) => JSON.parse(c.arguments).direction)).toEqual(visited.slice(0, 2));
    }
  });

  it('@openai/agents with previousResponseId: the server keeps the conversation, the client sends only new items', async () => {
    const client = new OpenAI({ baseURL: server.baseURL('agents-chain'), apiKey: 'none', maxRetries: 0 });
    const runner = new Runner({ modelProvider: new OpenAIProvider({ openAIClient: client as any }), tracingDisabled: true });
    let calls = 0;
    const look = tool({
      name: 'look',
      description: 'Look around.',
      parameters: z.object({ at: z.enum(['floor', 'ceiling']) }),
      execute: ({ at }) => `You see the ${at}, look ${++calls}.`,
    });
    const agent = new Agent({
      name: 'looker',
      model: 'tiny',
      tools: [look],
      modelSettings: { toolChoice: 'required' },
      resetToolChoice: false,
      toolUseBehavior: () =>
        calls % 2 === 0
          ? { isFinalOutput: true, isInterrupted: undefined, finalOutput: `looked ${calls}` }
          : { isFinalOutput: false, isInterrupted: undefined },
    });
    const first = await runner.run(agent, 'Look twice.');
    expect(first.finalOutput).toBe('looked 2');
    const before = backend.turns.length;
    const second = await runner.run(agent, 'Look twice more.', { previousResponseId: first.lastResponseId });
    expect(second.finalOutput).toBe('looked 4');
    const bodies = server.bodies.get('agents-chain')!.slice(2);
    expect(bodies[0]).toMatchObject({ previous_response_id: first.lastResponseId });
    // The second turn of the chained run sends only the call's output, against the response before it.
    expect(bodies[1].previous_response_id).toBeTruthy();
    expect((bodies[1].input as { type: string }[]).map((i) => i.type)).toEqual(['function_call_output']);
    // ...and the server rendered the whole conversation: both runs' calls and results, in order (the first run
    // ended on its second call's result, which its model never saw: that call stays without one).
    const messages = backend.turns.at(-1)!.request.messages;
    expect(backend.turns.length - before).toBe(2);
    expect(messages.filter((m) => m.role === 'tool').map((m) => m.content)).toEqual([
      expect.stringMatching(/look 1\.$/),
      expect.stringMatching(/look 3\.$/),
    ]);
    expect(messages.flatMap((m) => (m.role === 'assistant' ? m.toolCalls : []))).toHaveLength(3);
    expect(messages.filter((m) => m.role === 'user').map((m) => m.content)).toEqual(['Look twice.', 'Look twice more.']);
  });

  it('the AI SDK: generateText and streamText with tools through createOpenAI(...).responses', async () => {
    for (const streaming of [false, true]) {
      const provider = createOpenAI({ baseURL: server.baseURL(`ai-${streaming}`), apiKey: 'none' });
      const visited: string[] = [];
      const tools = {
        move: aiTool({
          description: 'Walk to a neighbouring room.',
          inputSchema: jsonSchema<{ direction: string }>(MOVE.parameters as any),
          execute: async ({ direction }) => {
            visited.push(direction);
            return `You walk ${direction}.`;
          },
        }),
      };
      const before = backend.turns.length;
      const options = {
        model: provider.responses('tiny'),
        system: 'Walk.',
        prompt: 'Start in the hall.',
        tools,
        toolChoice: 'required' as const,
        stopWhen: stepCountIs(3),
        maxRetries: 0,
      };
      let steps;
      if (streaming) {
        const s = streamText(options);
        const types: string[] = [];
        for await (const part of s.fullStream) {
          if (part.type === 'error') throw part.error;
          types.push(part.type);
        }
        expect(types.filter((t) => t === 'tool-call')).toHaveLength(3);
        expect(types.filter((t) => t === 'tool-result')).toHaveLength(3);
        steps = await s.steps;
      } else steps = (await generateText(options)).steps;
      expect(steps).toHaveLength(3);
      expect(server.bodies.get(`ai-${streaming}`)!.map((b) => b.stream ?? false)).toEqual([streaming, streaming, streaming]);
      expect(visited).toHaveLength(3);
      const turns = backend.turns.slice(before);
      expect(steps.map((s) => s.toolCalls[0].toolCallId)).toEqual(turns.map((t) => t.result.toolCalls[0].id));
      const results = turns[2].request.messages.filter((m) => m.role === 'tool').map((m) => m.content);
      expect(results).toEqual(visited.slice(0, 2).map((d) => `You walk ${d}.`));
    }
  });

  it('structured outputs: text.format json_schema from @openai/agents outputType and the AI SDK Output.object', async () => {
    const schema = z.object({ verdict: z.enum(['open', 'locked']), doors: z.enum(['one', 'two']) });
    const client = new OpenAI({ baseURL: server.baseURL('structured'), apiKey: 'none', maxRetries: 0 });
    const runner = new Runner({ modelProvider: new OpenAIProvider({ openAIClient: client as any }), tracingDisabled: true });
    const agent = new Agent({ name: 'judge', model: 'tiny', instructions: 'Judge the door.', outputType: schema });
    const result = await runner.run(agent, 'Is the door open?');
    expect(schema.parse(result.finalOutput)).toEqual(result.finalOutput);
    const sent = server.bodies.get('structured')!.at(-1)!.text as { format: { type: string; name: string } };
    expect(sent.format).toMatchObject({ type: 'json_schema' });
    expect(backend.turns.at(-1)!.request.format).toMatchObject({ type: 'json_schema', name: sent.format.name });
    expect(JSON.parse(backend.turns.at(-1)!.result.content!)).toEqual(result.finalOutput);

    const provider = createOpenAI({ baseURL: server.baseURL('structured-ai'), apiKey: 'none' });
    const { output } = await generateText({
      model: provider.responses('tiny'),
      prompt: 'Is the door open?',
      output: Output.object({ schema }),
      maxRetries: 0,
    });
    expect(schema.parse(output)).toEqual(output);
    expect(backend.turns.at(-1)!.request.format.type).toBe('json_schema');
  });
});
