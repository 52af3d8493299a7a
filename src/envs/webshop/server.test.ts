/**
 * `empo2 webshop serve` over plain HTTP (the browser test, server.e2e.test.ts, shops through the
 * page): oversized forms get an answer, not a reset connection, a session's record of actions
 * stays bounded however many forms are posted to it, web pages of other origins cannot drive it,
 * and a goal must be given.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { request } from 'node:http';
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

  /** A raw request, so that Host and Origin can be anything. */
  function raw(
    method: string,
    path: string,
    headers: Record<string, string>,
    body = '',
  ): Promise<{ status: number; text: string; location?: string }> {
    const { hostname, port } = new URL(server.url);
    return new Promise((resolve, reject) => {
      const req = request({ hostname, port, method, path, headers }, (res) => {
        let text = '';
        res.on('data', (d: Buffer) => (text += d.toString()));
        res.on('end', () => resolve({ status: res.statusCode!, text, location: res.headers.location }));
      });
      req.on('error', reject);
      req.end(body);
    });
  }

  it('refuses a Host that does not name it (DNS rebinding) and forms posted from pages of other origins', async () => {
    const port = new URL(server.url).port;
    const formType = { 'content-type': 'application/x-www-form-urlencoded' };
    const foreign = await raw('POST', '/start', { ...formType, Host: `127.0.0.1:${port}`, Origin: 'https://attacker.example' }, 'goal=3');
    expect(foreign.status).toBe(403);
    expect(foreign.location).toBeUndefined();
    expect(foreign.text).toMatch(/forms from pages of another origin \(&quot;https:\/\/attacker\.example&quot;\) are refused/);
    // A sandboxed page sends Origin: null.
    expect((await raw('POST', '/start', { ...formType, Host: `127.0.0.1:${port}`, Origin: 'null' }, 'goal=3')).status).toBe(403);
    const rebound = await raw('GET', '/', { Host: `attacker.example:${port}` });
    expect(rebound.status).toBe(403);
    expect(rebound.text).toMatch(/Host &quot;attacker\.example:\d+&quot; does not name this server/);
    const session = await startSession();
    expect((await raw('GET', `${session}/state`, { Host: `attacker.example:${port}` })).status).toBe(403);
    expect(
      (await raw('POST', session, { ...formType, Host: `localhost:${port}`, Origin: 'http://evil.test' }, 'action=click[buy now]')).status,
    ).toBe(403);
    // The page's own forms carry its own origin, under either of its names.
    const own = await raw('POST', '/start', { ...formType, Host: `localhost:${port}`, Origin: `http://localhost:${port}` }, 'goal=3');
    expect(own.status).toBe(303);
    expect(own.location).toMatch(/^\/s\/[0-9a-f]{16}$/);
    expect((await raw('GET', '/', { Host: `127.0.0.1:${port}` })).status).toBe(200);
  });

  it('refuses a start form whose goal is empty, missing or not a plain index', async () => {
    for (const body of ['goal=', '', 'goal=%20', 'goal=1e0', 'goal=-0', 'goal=0x1']) {
      const res = await fetch(new URL('/start', server.url), { ...form({}), body });
      expect(res.status, body).toBe(400);
      expect(await res.text(), body).toMatch(/Goal must be an index in 0\.\.\d+/);
    }
    expect((await fetch(new URL('/start', server.url), form({ goal: '12' }))).status).toBe(303);
  });
});
