/**
 * `POST responses` through the training gateway with the tiny model and real clients, unmodified:
 * `@openai/agents` on its default (Responses) model and the AI SDK's `generateText` / `streamText` through
 * `createOpenAI(...).responses` each play a tool episode of three forced calls and their results, plain and
 * streamed; every call is one recorded step whose state is the last observation (the last
 * `function_call_output`), whose action is the call, and whose prompt extends the previous step's sampled
 * ids token for token. The calls are forced by the clients' own `toolChoice: 'required'` (the gateway
 * constrains decoding to a valid call of the tool's schema; the untrained model picks the room).
 * `previous_response_id` chains within an episode and is refused from another; bad input is a 400 naming
 * the field.
 */
import { beforeAll, describe, expect, it, vi } from 'vitest';
import OpenAI from 'openai';
import { Agent, OpenAIProvider, Runner, tool } from '@openai/agents';
import { createOpenAI } from '@ai-sdk/openai';
import { generateText, jsonSchema, Output, stepCountIs, streamText, tool as aiTool } from 'ai';
import { z } from 'zod';
import { loadConfig } from '../src/config/load.ts';
import { environmentCorpus } from '../src/envs/index.ts';
import { createEngine, initBackend } from '../src/policy/index.ts';
import type { PolicyEngine } from '../src/policy/types.ts';
import type { Episode } from '../src/run/records.ts';
import { rolloutSettings } from '../src/trainer/rollout.ts';
import { removeTips } from '../src/trainer/prompt.ts';
import { join } from 'node:path';
import { openAgentPlay, runAgentProcess, type AgentInput } from '../src/gateway/index.ts';
import { pythonGate, REPO_ROOT, venvPython } from './support/python.ts';
import { TINY_MODEL } from './support/tiny.ts';

let engine: PolicyEngine;
const cfg = loadConfig(null, [...TINY_MODEL, 'seed=9', 'rollout.max_tokens=120', 'run_dir=/nonexistent']);
beforeAll(async () => {
  await initBackend();
  ({ engine } = await createEngine(cfg, 'fresh', () => environmentCorpus(cfg.env)));
}, 120_000);

const ROOMS = ['hall', 'kitchen', 'garden'] as const;
const MOVE_SCHEMA = {
  type: 'object',
  properties: { room: { type: 'string', enum: [...ROOMS] } },
  required: ['room'],
  additionalProperties: false,
};

/** Plays `agents.length` episodes together, the k-th behind `agents[k]`; returns the recorded episodes. */
async function play(...agents: ((input: AgentInput) => Promise<number>)[]): Promise<Episode[]> {
  const episodeOf = new Map<string, number>();
  const p = await openAgentPlay(cfg, {
    agent: (input) => {
      if (!episodeOf.has(input.episode.id)) episodeOf.set(input.episode.id, episodeOf.size);
      return agents[episodeOf.get(input.episode.id)!](input);
    },
    taskOf: () => 'task',
    log: () => {},
  });
  try {
    const settings = rolloutSettings(cfg, false, 31);
    const jobs = agents.map((_, k) => ({ task: 'agent', variation: 0, group: k }));
    const { episodes } = await p.player(engine, jobs, { settingsFor: () => settings, evaluation: false });
    // Counted down when the server side of each answer closes, a moment after the client has it (a 5 MB body's last).
    await vi.waitFor(() => expect(p.gateway.openRequests()).toBe(0), { timeout: 2000 });
    return episodes;
  } finally {
    await p.close();
  }
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

/** The three steps of a move-three-times episode, as recorded. */
function expectMoves(episode: Episode, visited: string[], results: string[]): void {
  expect(episode.failure ?? null).toBeNull();
  expect(visited).toHaveLength(3);
  expect(episode.steps.map((s) => s.action)).toEqual(visited.map((room) => `move {"room":"${room}"}`));
  expect(episode.steps.map((s) => s.observation)).toEqual(['Find the hat. You are in the hall.', ...results.slice(0, 2)]);
  expectExact(episode);
}

describe('POST responses through the gateway', () => {
  it('@openai/agents on its default (Responses) model plays a three-call tool episode, plain and streamed', async () => {
    for (const stream of [false, true]) {
      const visited: string[] = [];
      const results: string[] = [];
      const [episode] = await play(async ({ baseURL, apiKey, model }) => {
        const client = new OpenAI({ baseURL, apiKey, maxRetries: 0 });
        // A cast only: @openai/agents-openai pins its own copy of the openai package, the same client at run time.
        const runner = new Runner({ modelProvider: new OpenAIProvider({ openAIClient: client as any }), tracingDisabled: true });
        const move = tool({
          name: 'move',
          description: 'Go to a room.',
          parameters: z.object({ room: z.enum(ROOMS) }),
          execute: ({ room }) => {
            visited.push(room);
            results.push(`You are in the ${room}, room ${visited.length}.`);
            return results.at(-1)!;
          },
        });
        const agent = new Agent({
          name: 'finder',
          instructions: 'You find things.',
          model,
          tools: [move],
          modelSettings: { toolChoice: 'required' },
          resetToolChoice: false,
          toolUseBehavior: () =>
            visited.length >= 3
              ? { isFinalOutput: true, isInterrupted: undefined, finalOutput: 'done' }
              : { isFinalOutput: false, isInterrupted: undefined },
        });
        const input = 'Find the hat. You are in the hall.';
        if (stream) {
          const r = await runner.run(agent, input, { stream: true });
          for await (const _ of r) void _;
          await r.completed;
          expect(r.finalOutput).toBe('done');
        } else expect((await runner.run(agent, input)).finalOutput).toBe('done');
        return 1;
      });
      expectMoves(episode, visited, results);
    }
  }, 120_000);

  it('the AI SDK generateText and streamText with tools through createOpenAI(...).responses', async () => {
    for (const streaming of [false, true]) {
      const visited: string[] = [];
      const results: string[] = [];
      const [episode] = await play(async ({ baseURL, apiKey, model }) => {
        const provider = createOpenAI({ baseURL, apiKey });
        const tools = {
          move: aiTool({
            description: 'Go to a room.',
            inputSchema: jsonSchema<{ room: string }>(MOVE_SCHEMA as any),
            execute: async ({ room }) => {
              visited.push(room);
              results.push(`You are in the ${room}, room ${visited.length}.`);
              return results.at(-1)!;
            },
          }),
        };
        const options = {
          model: provider.responses(model),
          system: 'You find things.',
          prompt: 'Find the hat. You are in the hall.',
          tools,
          toolChoice: 'required' as const,
          stopWhen: stepCountIs(3),
          maxRetries: 0,
        };
        if (streaming) {
          const s = streamText(options);
          for await (const part of s.fullStream) if (part.type === 'error') throw part.error;
          expect(await s.steps).toHaveLength(3);
        } else expect((await generateText(options)).steps).toHaveLength(3);
        return 1;
      });
      expectMoves(episode, visited, results);
    }
  }, 120_000);

  it('structured outputs: text.format json_schema from @openai/agents outputType and the AI SDK Output.object, one step each', async () => {
    const schema = z.object({ found: z.enum(['yes', 'no']), where: z.enum(['hall', 'kitchen']) });
    const outputs: unknown[] = [];
    const [episode] = await play(async ({ baseURL, apiKey, model }) => {
      const client = new OpenAI({ baseURL, apiKey, maxRetries: 0 });
      const runner = new Runner({ modelProvider: new OpenAIProvider({ openAIClient: client as any }), tracingDisabled: true });
      const agent = new Agent({ name: 'judge', model, instructions: 'Say where the hat is.', outputType: schema });
      outputs.push((await runner.run(agent, 'Is the hat here?')).finalOutput);
      const { output } = await generateText({
        model: createOpenAI({ baseURL, apiKey }).responses(model),
        prompt: 'Is the hat here?',
        output: Output.object({ schema }),
        maxRetries: 0,
      });
      outputs.push(output);
      return 1;
    });
    for (const o of outputs) expect(schema.parse(o)).toEqual(o);
    expect(episode.steps).toHaveLength(2);
    expect(episode.steps.map((s) => JSON.parse(s.action))).toEqual(outputs);
  }, 60_000);

  it('chains by previous_response_id within an episode, and refuses one from another episode, naming the field', async () => {
    let shared!: (id: string) => void;
    const fromFirst = new Promise<string>((resolve) => (shared = resolve));
    const seen: { status: number; param?: string; message?: string; header?: string | null }[] = [];
    const [first, second] = await play(
      async ({ baseURL, apiKey, model }) => {
        const client = new OpenAI({ baseURL, apiKey, maxRetries: 0 });
        const tools = [{ type: 'function' as const, name: 'move', parameters: MOVE_SCHEMA, strict: true }];
        const a = await client.responses.create({
          model,
          input: 'Find the hat. You are in the hall.',
          tools,
          tool_choice: 'required',
        });
        shared(a.id);
        const call = a.output[0] as OpenAI.Responses.ResponseFunctionToolCall;
        expect(call.type).toBe('function_call');
        const { data: b, response } = await client.responses
          .create({
            model,
            previous_response_id: a.id,
            input: [{ type: 'function_call_output', call_id: call.call_id, output: 'You are in the garden.' }],
            tools, // as OpenAI's API, tools are not carried over by previous_response_id
            max_output_tokens: 4,
          })
          .withResponse();
        seen.push({ status: 200, header: response.headers.get('x-empo2-policy-version') });
        expect(b.metadata).toMatchObject({ empo2_policy_version: '0' });
        return 1;
      },
      async ({ baseURL, apiKey, model }) => {
        const id = await fromFirst;
        const res = await fetch(`${baseURL}/responses`, {
          method: 'POST',
          headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${apiKey}` },
          body: JSON.stringify({ model, previous_response_id: id, input: 'More.' }),
        });
        const { error } = (await res.json()) as { error: { param: string; message: string } };
        seen.push({ status: res.status, ...error });
        return 0;
      },
    );
    expect(seen).toContainEqual({ status: 200, header: '0' });
    const refused = seen.find((s) => s.status === 400)!;
    expect(refused.param).toBe('previous_response_id');
    expect(refused.message).toContain('is not a response of episode');
    expect(refused.message).toContain('the empo2 gateway');
    // The chained call is the first episode's second step: its state is the call's output, its prompt the first step's ids extended.
    expect(first.steps.map((s) => s.observation)).toEqual(['Find the hat. You are in the hall.', 'You are in the garden.']);
    expectExact(first);
    expect(second.steps).toHaveLength(0);
  }, 120_000);

  it('refuses bad input with a 400 naming the field', async () => {
    const errors: { status: number; param: string; message: string }[] = [];
    const [episode] = await play(async ({ baseURL, apiKey, model }) => {
      const post = async (body: Record<string, unknown>) => {
        const res = await fetch(`${baseURL}/responses`, {
          method: 'POST',
          headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${apiKey}` },
          body: JSON.stringify({ model, ...body }),
        });
        errors.push({ status: res.status, ...((await res.json()) as { error: { param: string; message: string } }).error });
      };
      await post({ input: [{ type: 'function_call_output', call_id: 'call_x', output: 'y' }] });
      await post({ input: 'x', tools: [{ type: 'web_search' }] });
      await post({ input: 'x', colour: 'red' });
      // A 5 MB tool result: more than the context holds, refused before it is tokenised; the episode fails with the reason.
      const a = await fetch(`${baseURL}/responses`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${apiKey}` },
        body: JSON.stringify({
          model,
          input: 'Go.',
          tools: [{ type: 'function', name: 'move', parameters: MOVE_SCHEMA }],
          tool_choice: 'required',
        }),
      });
      const first = (await a.json()) as { id: string; output: { call_id: string }[] };
      await post({
        previous_response_id: first.id,
        input: [{ type: 'function_call_output', call_id: first.output[0].call_id, output: 'x'.repeat(5 << 20) }],
      });
      return 0;
    });
    expect(errors.map((e) => [e.status, e.param])).toEqual([
      [400, 'input[0].call_id'],
      [400, 'tools[0].type'],
      [400, 'colour'],
      [400, 'input'],
    ]);
    expect(errors[3].message).toMatch(/context/);
    expect(episode.failure).toMatch(/prompt was refused/);
    expect(errors[2].message).toContain('the empo2 gateway refuses');
  }, 60_000);

  const gate = pythonGate(['openai', 'agents']);
  it.skipIf(!gate.available)(
    `a Python agent with the openai-agents pip package on its default (Responses) model, as a process (${gate.label})`,
    async () => {
      const lines: string[] = [];
      const command = `${venvPython()} ${join(REPO_ROOT, 'test', 'support', 'python-responses-agent.py')}`;
      const [episode] = await play((input) => runAgentProcess({ command, log: (l) => lines.push(l) }, input) as Promise<number>);
      const line = lines.find((l) => l.includes('"visited"'));
      expect(line, lines.join('\n')).toBeDefined();
      const seen = JSON.parse(line!.replace(/^[^{]*/, '')) as { visited: string[]; first: string; second: string; events: string[] };
      expect(seen.visited).toHaveLength(4);
      expect(seen.first).toBe(seen.visited.slice(0, 2).join(' '));
      expect(seen.second).toBe(seen.visited.join(' '));
      // The streamed run's events, as the Python SDK read them, for each of its two calls.
      const call = [
        'response.created',
        'response.in_progress',
        'response.output_item.added',
        'response.function_call_arguments.delta',
        'response.function_call_arguments.done',
        'response.output_item.done',
        'response.completed',
      ];
      expect(seen.events).toEqual([...call, ...call]);
      expect(episode.score).toBe(100);
      expect(episode.steps.map((s) => s.action)).toEqual(seen.visited.map((room) => `move {"room":"${room}"}`));
      // Each step after a call's result has that result as its state; the streamed run's first step reads its new input.
      expect(episode.steps.map((s) => s.observation)).toEqual([
        'You are in the hall.',
        `You are in the ${seen.visited[0]}, room 1.`,
        'Go on.',
        `You are in the ${seen.visited[2]}, room 3.`,
      ]);
      expectExact(episode);
    },
    120_000,
  );
});
