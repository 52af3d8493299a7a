import { afterEach, describe, expect, it } from 'vitest';
import { createServer, request, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { listenOn } from './port.ts';
import { startHttpFront, type HttpFront } from './http-front.ts';

const opened: { close(): unknown }[] = [];
afterEach(async () => {
  for (const o of opened.splice(0)) await o.close();
});

async function behindFront(
  handler: (req: IncomingMessage, res: ServerResponse) => void,
): Promise<{ server: Server; front: HttpFront; url: string }> {
  const server = createServer(handler);
  const inner = await listenOn(server, '127.0.0.1', 0);
  const front = await startHttpFront({
    host: '127.0.0.1',
    port: 0,
    upstream: { host: inner.address, port: inner.port },
    health: { phase: 'rollout' },
  });
  opened.push(front, { close: () => new Promise((r) => server.close(r)) });
  return { server, front, url: `http://127.0.0.1:${front.address.port}` };
}

describe('the HTTP front', () => {
  it('forwards bodies, status and headers, and streams an answer chunk by chunk', async () => {
    let release = () => {};
    const { url } = await behindFront((req, res) => {
      let body = '';
      req.on('data', (c: Buffer) => (body += c));
      req.on('end', () => {
        res.writeHead(201, { 'Content-Type': 'text/event-stream', 'X-Seen': `${req.method} ${req.url} ${body}` });
        res.write('data: first\n\n');
        release = () => res.end('data: [DONE]\n\n');
      });
    });
    const res = await fetch(`${url}/v1/x?y=1`, { method: 'POST', body: 'hello', headers: { 'Content-Type': 'application/json' } });
    expect(res.status).toBe(201);
    expect(res.headers.get('x-seen')).toBe('POST /v1/x?y=1 hello');
    const reader = res.body!.getReader();
    // The first event arrives while the server still holds the answer open.
    expect(new TextDecoder().decode((await reader.read()).value)).toBe('data: first\n\n');
    release();
    let rest = '';
    for (let r = await reader.read(); !r.done; r = await reader.read()) rest += new TextDecoder().decode(r.value);
    expect(rest).toBe('data: [DONE]\n\n');
  });

  it('answers /health itself with the state last posted, and only to GET', async () => {
    const { url, front } = await behindFront((_req, res) => res.end('from the server'));
    expect(await (await fetch(`${url}/health`)).json()).toEqual({ status: 'ok', phase: 'rollout' });
    front.setHealth({ phase: 'update', policy_version: 3 });
    await new Promise((r) => setTimeout(r, 50));
    expect(await (await fetch(`${url}/health`)).json()).toEqual({ status: 'ok', phase: 'update', policy_version: 3 });
    const post = await fetch(`${url}/health`, { method: 'POST' });
    expect(post.status).toBe(405);
    expect((await post.json()).error.message).toBe('/health takes GET, not POST');
    expect(await (await fetch(`${url}/other`)).text()).toBe('from the server');
  });

  it('closes the forwarded request when its client hangs up, so the server sees it go', async () => {
    let closed: () => void = () => {};
    const serverSawClose = new Promise<void>((r) => (closed = r));
    let arrived: () => void = () => {};
    const serverGotIt = new Promise<void>((r) => (arrived = r));
    const { url } = await behindFront((_req, res) => {
      arrived();
      res.on('close', () => closed()); // never answered: the client's hang-up is the only way it ends
    });
    const req = request(`${url}/v1/chat/completions`, { method: 'POST' });
    req.on('error', () => {});
    req.end('{}');
    await serverGotIt;
    req.destroy();
    await serverSawClose;
  });

  it('lets an answer on its way finish when it closes, then closes', async () => {
    let answer = () => {};
    let arrived = () => {};
    const reached = new Promise<void>((r) => (arrived = r));
    const { url, front } = await behindFront((req, res) => {
      req.resume();
      answer = () => res.end('late answer');
      arrived();
    });
    const got = fetch(`${url}/v1/x`, { method: 'POST', body: 'x' }).then((r) => r.text());
    await reached;
    const closed = front.close();
    setTimeout(() => answer(), 200);
    expect(await got).toBe('late answer');
    await closed;
    await expect(fetch(`${url}/health`)).rejects.toThrow();
  });

  it('answers 502, saying so, when the server behind it is gone', async () => {
    const { url, server } = await behindFront((_req, res) => res.end('ok'));
    await new Promise((r) => server.close(r));
    const res = await fetch(`${url}/v1/models`);
    expect(res.status).toBe(502);
    expect((await res.json()).error.message).toMatch(/^the server behind this address did not answer: connect ECONNREFUSED/);
  });

  it('refuses a port in use as listen does', async () => {
    const { front } = await behindFront((_req, res) => res.end('ok'));
    const again = startHttpFront({ host: '127.0.0.1', port: front.address.port, upstream: { host: '127.0.0.1', port: 1 }, health: {} });
    await expect(again).rejects.toMatchObject({ code: 'EADDRINUSE' });
  });
});
