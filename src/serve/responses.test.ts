/**
 * `empo2 serve` answers `POST /v1/responses` through the protocol layer (../openai/responses/): greedy
 * answers equal the in-process engine's for the same ChatML prompt, plain and streamed, with the `openai`
 * client; `previous_response_id` chains; `text.format` json_schema is constrained (the AI SDK's
 * `Output.object`); `@openai/agents` plays a forced three-call tool episode against it, as a trained
 * policy is deployed behind the same agent; bad input is refused naming the field; `GET /v1/responses/{id}`
 * returns a stored response to the `openai` client's `responses.retrieve`, and a 404 for one not stored;
 * `include: ["message.output_text.logprobs"]` gives the log-probs Chat Completions gives, plain, streamed
 * (per delta) and on retrieval.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import { createOpenAI } from '@ai-sdk/openai';
import { Agent, OpenAIProvider, Runner, tool } from '@openai/agents';
import { generateText, Output } from 'ai';
import { z } from 'zod';
import { renderChatML } from './chat.ts';
import { startServedFixture, type ServedFixture } from '../../test/support/served-fixture.ts';

let f: ServedFixture;
beforeAll(async () => {
  f = await startServedFixture('tiny');
}, 60_000);
afterAll(async () => f?.close());

const client = () => new OpenAI({ baseURL: `${f.server.url}/v1`, apiKey: 'none', maxRetries: 0 });

async function greedy(messages: { role: 'system' | 'user' | 'assistant'; content: string }[], maxTokens: number) {
  const [g] = await f.local.generate([f.local.tokenizer.encode(renderChatML(messages))], { maxTokens, temperature: 0, topP: 1, seed: 1 });
  return g;
}

describe('empo2 serve: /v1/responses', () => {
  it('answers as the in-process engine does, plain and streamed, and chains by previous_response_id', async () => {
    const first = await client().responses.create({
      model: 'tiny',
      instructions: 'You play.',
      input: 'You are in the hall.',
      temperature: 0,
      max_output_tokens: 10,
    });
    const g = await greedy(
      [
        { role: 'system', content: 'You play.' },
        { role: 'user', content: 'You are in the hall.' },
      ],
      10,
    );
    expect(first.output_text).toBe(g.text);
    expect(first.usage?.output_tokens).toBe(g.tokens.length);
    expect(first.status).toBe(g.finish === 'length' ? 'incomplete' : 'completed');

    const stream = client().responses.stream({
      model: 'tiny',
      previous_response_id: first.id,
      input: 'Go north.',
      temperature: 0,
      max_output_tokens: 10,
    });
    const types: string[] = [];
    stream.on('event', (e) => types.push(e.type));
    const second = await stream.finalResponse();
    // instructions are not carried over; the first answer is.
    const h = await greedy(
      [
        { role: 'user', content: 'You are in the hall.' },
        { role: 'assistant', content: g.text },
        { role: 'user', content: 'Go north.' },
      ],
      10,
    );
    expect(second.output_text).toBe(h.text);
    expect(types[0]).toBe('response.created');
    expect(types.at(-1)).toBe(h.finish === 'length' ? 'response.incomplete' : 'response.completed');
    expect(types.filter((t) => t === 'response.output_text.delta').length).toBeGreaterThan(0);
  });

  it('constrains text.format json_schema (the AI SDK Output.object)', async () => {
    const schema = z.object({ door: z.enum(['open', 'locked']), rooms: z.enum(['one', 'two', 'three']) });
    const provider = createOpenAI({ baseURL: `${f.server.url}/v1`, apiKey: 'none' });
    const { output } = await generateText({
      model: provider.responses('tiny'),
      prompt: 'Describe the hall.',
      output: Output.object({ schema }),
      maxRetries: 0,
    });
    expect(schema.parse(output)).toEqual(output);
  });

  it('refuses what it does not serve, naming the field', async () => {
    const post = async (body: unknown) => {
      const res = await fetch(`${f.server.url}/v1/responses`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify(body),
      });
      return { status: res.status, error: ((await res.json()) as { error: { param: string; message: string } }).error };
    };
    const web = await post({ input: 'x', tools: [{ type: 'web_search' }] });
    expect(web).toMatchObject({ status: 400, error: { param: 'tools[0].type' } });
    expect(web.error.message).toContain('empo2 serve');
    expect(await post({ input: [{ type: 'function_call_output', call_id: 'call_x', output: 'y' }] })).toMatchObject({
      status: 400,
      error: { param: 'input[0].call_id' },
    });
    expect(await post({ input: 'x', model: 'other' })).toMatchObject({ status: 404, error: { param: 'model' } });
    expect(await post({ input: 'x', previous_response_id: 'resp_nope' })).toMatchObject({
      status: 400,
      error: { param: 'previous_response_id' },
    });
    const long = await post({ input: 'word '.repeat(50_000) });
    expect(long).toMatchObject({ status: 400, error: { param: 'input' } });
    const unknown = await post({ input: 'x', colour: 'red' });
    expect(unknown).toMatchObject({ status: 400, error: { param: 'colour' } });
    expect(unknown.error.message).toContain('empo2 serve refuses');
  });

  it("GET /v1/responses/{id}: the openai client retrieves a stored response as answered; others are a 404 in OpenAI's shape", async () => {
    const created = await client().responses.create({ model: 'tiny', input: 'You are in the hall.', max_output_tokens: 6 });
    const retrieved = await client().responses.retrieve(created.id);
    expect(retrieved).toEqual(created);
    expect(retrieved.output_text).toBe(created.output_text);

    const unstored = await client().responses.create({ model: 'tiny', input: 'Go north.', max_output_tokens: 4, store: false });
    const missing = await client()
      .responses.retrieve(unstored.id)
      .then(
        () => null,
        (e: unknown) => e,
      );
    expect(missing).toBeInstanceOf(OpenAI.NotFoundError);
    expect((missing as InstanceType<typeof OpenAI.NotFoundError>).status).toBe(404);

    const get = async (path: string, method = 'GET') => {
      const res = await fetch(`${f.server.url}/v1/responses/${path}`, { method });
      return { status: res.status, body: (await res.json()) as any };
    };
    const unknown = await get('resp_nope');
    expect(unknown.status).toBe(404);
    expect(unknown.body).toEqual({
      error: {
        message: expect.stringMatching(/^Response with id 'resp_nope' not found\. \(empo2 serve keeps the last 1024 stored responses/),
        type: 'invalid_request_error',
        param: 'response_id',
        code: null,
      },
    });
    expect((await get(`${created.id}?include%5B%5D=reasoning.encrypted_content&stream=false`)).body.id).toBe(created.id);
    expect(await get(`${created.id}?stream=true`)).toMatchObject({ status: 400, body: { error: { param: 'stream' } } });
    expect(await get(`${created.id}?colour=red`)).toMatchObject({ status: 400, body: { error: { param: 'colour' } } });
    expect((await get(created.id, 'POST')).status).toBe(405);
  });

  it("include message.output_text.logprobs: the text tokens' log-probs, as Chat Completions gives them, plain, streamed and retrieved", async () => {
    const include: OpenAI.Responses.ResponseIncludable[] = ['message.output_text.logprobs'];
    const ask = { model: 'tiny', input: 'You are in the hall.', temperature: 0, max_output_tokens: 8 };
    const chat = await client().chat.completions.create({
      model: 'tiny',
      messages: [{ role: 'user', content: 'You are in the hall.' }],
      temperature: 0,
      max_tokens: 8,
      logprobs: true,
    });
    const expected = chat.choices[0].logprobs!.content!;
    expect(expected.length).toBe(chat.usage!.completion_tokens);

    const plain = await client().responses.create({ ...ask, include });
    const text = plain.output[0] as OpenAI.Responses.ResponseOutputMessage;
    const part = text.content[0] as OpenAI.Responses.ResponseOutputText;
    expect(part.text).toBe(chat.choices[0].message.content);
    expect(part.logprobs).toEqual(expected);

    const stream = client().responses.stream({ ...ask, include });
    const deltas: OpenAI.Responses.ResponseTextDeltaEvent[] = [];
    let done: OpenAI.Responses.ResponseTextDoneEvent | null = null;
    stream.on('response.output_text.delta', (e) => deltas.push(e));
    stream.on('response.output_text.done', (e) => (done = e));
    const streamed = await stream.finalResponse();
    const noBytes = expected.map(({ token, logprob, top_logprobs }) => ({ token, logprob, top_logprobs }));
    expect(deltas.map((d) => d.delta).join('')).toBe(part.text);
    expect(deltas.flatMap((d) => d.logprobs)).toEqual(noBytes);
    expect(done!.logprobs).toEqual(noBytes);
    expect(
      ((streamed.output[0] as OpenAI.Responses.ResponseOutputMessage).content[0] as OpenAI.Responses.ResponseOutputText).logprobs,
    ).toEqual(expected);

    // Asked for at retrieval, of a response made without them; and not there unless asked.
    const without = await client().responses.create(ask);
    const logprobsOf = (r: OpenAI.Responses.Response) =>
      ((r.output[0] as OpenAI.Responses.ResponseOutputMessage).content[0] as OpenAI.Responses.ResponseOutputText).logprobs;
    expect(logprobsOf(without)).toEqual([]);
    expect(logprobsOf(await client().responses.retrieve(without.id, { include }))).toEqual(expected);
    expect(logprobsOf(await client().responses.retrieve(plain.id))).toEqual([]);

    // OpenAI's other include values change nothing here; a value that is not OpenAI's is refused by name.
    const other = await client().responses.create({ ...ask, include: ['reasoning.encrypted_content'] });
    expect(other.output_text).toBe(part.text);
    expect(logprobsOf(other)).toEqual([]);
    const post = async (body: unknown) => {
      const res = await fetch(`${f.server.url}/v1/responses`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify(body),
      });
      return { status: res.status, body: (await res.json()) as any };
    };
    expect(await post({ input: 'x', include: ['message.output_text.logprobs', 'colour'] })).toMatchObject({
      status: 400,
      body: { error: { param: 'include[1]' } },
    });
    expect(await post({ input: 'x', include, top_logprobs: 2 })).toMatchObject({ status: 400, body: { error: { param: 'top_logprobs' } } });
    const bad = await fetch(`${f.server.url}/v1/responses/${plain.id}?include[]=colour`);
    expect([bad.status, ((await bad.json()) as any).error.param]).toEqual([400, 'include[0]']);
  });

  it('@openai/agents plays a forced three-call tool episode against it', async () => {
    const visited: string[] = [];
    const runner = new Runner({ modelProvider: new OpenAIProvider({ openAIClient: client() as any }), tracingDisabled: true });
    const move = tool({
      name: 'move',
      description: 'Go to a room.',
      // A free string (at most 6 characters): too many calls to list, so decoding runs the JSON constraint itself.
      parameters: z.object({ room: z.enum(['hall', 'kitchen', 'garden']), note: z.string().max(6) }),
      execute: ({ room, note }) => {
        visited.push(room);
        expect(note.length).toBeLessThanOrEqual(6);
        return `You walk into the ${room}.`;
      },
    });
    const agent = new Agent({
      name: 'finder',
      model: 'tiny',
      instructions: 'Find the hat.',
      tools: [move],
      modelSettings: { toolChoice: 'required' },
      resetToolChoice: false,
      toolUseBehavior: () =>
        visited.length >= 3
          ? { isFinalOutput: true, isInterrupted: undefined, finalOutput: visited.join(' ') }
          : { isFinalOutput: false, isInterrupted: undefined },
    });
    const result = await runner.run(agent, 'You are in the hall.', { stream: true });
    for await (const _ of result) void _;
    await result.completed;
    expect(visited).toHaveLength(3);
    expect(result.finalOutput).toBe(visited.join(' '));
  });
});
