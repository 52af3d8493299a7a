/**
 * `prompt_cache_key` on `empo2 serve`'s chat completions: a conversation's calls under one key prefill only
 * what each adds to the last, and sample what the same calls without a key sample.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startServedFixture, type ServedFixture } from '../../test/support/served-fixture.ts';

let f: ServedFixture;
beforeAll(async () => {
  f = await startServedFixture();
}, 120_000);
afterAll(async () => {
  await f?.close();
});

type Message = { role: string; content: string };

async function chat(messages: Message[], seed: number, key?: string): Promise<string> {
  const r = await fetch(`${f.server.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({
      model: 'tiny',
      messages,
      temperature: 1,
      max_tokens: 6,
      seed,
      ...(key ? { prompt_cache_key: key } : {}),
    }),
  });
  const body = (await r.json()) as { choices: { message: { content: string } }[] };
  expect(r.status, JSON.stringify(body)).toBe(200);
  return body.choices[0].message.content;
}

/** Four turns of a conversation, each call sending the whole of it so far; returns the answers. */
async function conversation(key?: string): Promise<string[]> {
  const messages: Message[] = [{ role: 'user', content: 'You are in the kitchen. You see a red key and a door to the hall.' }];
  const answers: string[] = [];
  for (let turn = 0; turn < 4; turn++) {
    const answer = await chat(messages, 100 + turn, key);
    answers.push(answer);
    messages.push({ role: 'assistant', content: answer }, { role: 'user', content: `Nothing happens. Turn ${turn + 2}: try again.` });
  }
  return answers;
}

describe('empo2 serve: prompt_cache_key', () => {
  it("reuses the conversation's prefix under its key, and samples what a call without a key samples", async () => {
    const engine = f.server.queue.current.engine;
    const at = () => engine.prefillCounts!();
    const before = at();
    const plain = await conversation();
    const middle = at();
    expect(middle.reusedTokens).toBe(before.reusedTokens);
    const cached = await conversation('episode-1');
    const after = at();
    expect(cached).toEqual(plain);
    // Calls 2-4 reuse their predecessor's prompt: most of each prompt is not run again.
    expect(after.reusedTokens - middle.reusedTokens).toBeGreaterThan(0);
    expect(after.prefilledTokens - middle.prefilledTokens).toBeLessThan(middle.prefilledTokens - before.prefilledTokens);
  });
});
