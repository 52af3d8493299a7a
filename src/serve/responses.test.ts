/**
 * `empo2 serve` answers `POST /v1/responses` through the protocol layer (../openai/responses/): greedy
 * answers equal the in-process engine's for the same ChatML prompt, plain and streamed, with the `openai`
 * client; `previous_response_id` chains; `text.format` json_schema is constrained (the AI SDK's
 * `Output.object`); tools are refused by name until serve renders them.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import { createOpenAI } from '@ai-sdk/openai';
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
    const tools = await post({ input: 'x', tools: [{ type: 'function', name: 'go', parameters: { type: 'object', properties: {} } }] });
    expect(tools).toMatchObject({ status: 400, error: { param: 'tools' } });
    expect(tools.error.message).toContain('empo2 serve');
    expect(await post({ input: 'x', model: 'other' })).toMatchObject({ status: 404, error: { param: 'model' } });
    expect(await post({ input: 'x', previous_response_id: 'resp_nope' })).toMatchObject({
      status: 400,
      error: { param: 'previous_response_id' },
    });
    const unknown = await post({ input: 'x', colour: 'red' });
    expect(unknown).toMatchObject({ status: 400, error: { param: 'colour' } });
    expect(unknown.error.message).toContain('empo2 serve refuses');
  });
});
