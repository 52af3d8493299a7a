/**
 * `empo2 webshop serve` over plain HTTP (the browser test, server.e2e.test.ts, shops through the
 * page): oversized forms get an answer, not a reset connection, and a session's record of actions
 * stays bounded however many forms are posted to it.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startWebShopServer, type RunningWebShopServer } from './server.ts';

let server: RunningWebShopServer;
beforeAll(async () => {
  server = await startWebShopServer({ port: 0, maxSteps: 5 });
});
afterAll(async () => server?.close());

const form = (fields: Record<string, string>) => ({
  method: 'POST',
  headers: { 'content-type': 'application/x-www-form-urlencoded' },
  body: new URLSearchParams(fields).toString(),
  redirect: 'manual' as const,
});

async function startSession(): Promise<string> {
  const res = await fetch(new URL('/start', server.url), form({ goal: '0' }));
  expect(res.status).toBe(303);
  return res.headers.get('location')!;
}

describe('empo2 webshop serve', () => {
  it('answers a form body over the limit with 413 instead of resetting the connection', async () => {
    const big = { goal: '0', pad: 'x'.repeat(70 * 1024) };
    const start = await fetch(new URL('/start', server.url), form(big));
    expect(start.status).toBe(413);
    expect(await start.text()).toMatch(/larger than 65536 bytes/);
    const session = await startSession();
    const step = await fetch(new URL(session, server.url), form({ query: 'y'.repeat(70 * 1024) }));
    expect(step.status).toBe(413);
    // Without a Content-Length (chunked), the limit is found while reading.
    const chunk = new TextEncoder().encode(`query=${'w'.repeat(16 * 1024)}`);
    let sent = 0;
    const body = new ReadableStream<Uint8Array>({
      pull(c) {
        if (sent++ < 5) c.enqueue(chunk);
        else c.close();
      },
    });
    const chunked = await fetch(new URL(session, server.url), { ...form({}), body, duplex: 'half' } as RequestInit);
    expect(chunked.status).toBe(413);
    // The server is still there and the session untouched.
    const state = (await (await fetch(new URL(`${session}/state`, server.url))).json()) as { history: string[] };
    expect(state.history).toEqual([]);
  });

  it("keeps a session's actions to its step limit and refuses overlong actions", async () => {
    const session = await startSession();
    const statuses: number[] = [];
    for (let i = 0; i < 12; i++) statuses.push((await fetch(new URL(session, server.url), form({ action: `click[nothing ${i}]` }))).status);
    // Five steps end the episode; later actions are refused, not recorded.
    expect(statuses.slice(0, 5)).toEqual([303, 303, 303, 303, 303]);
    expect(new Set(statuses.slice(5))).toEqual(new Set([409]));
    const state = (await (await fetch(new URL(`${session}/state`, server.url))).json()) as { history: string[]; done: boolean };
    expect(state.done).toBe(true);
    expect(state.history).toHaveLength(5);

    const other = await startSession();
    const long = await fetch(new URL(other, server.url), form({ query: 'z'.repeat(60 * 1024) }));
    expect(long.status).toBe(400);
    expect(await long.text()).toMatch(/longer than 1000 characters/);
    const page = await (await fetch(new URL(other, server.url))).text();
    expect(page.length).toBeLessThan(50_000);
  });
});
