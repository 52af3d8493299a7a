/**
 * The external-model client against a local server that misbehaves on purpose: 429 with Retry-After,
 * 500, a body that is not JSON, a hang past the time limit, nothing listening, 401. Every call
 * resolves (none throws, none is left waiting), the usage counts what happened, the cache answers a
 * repeated request without sending it, and the key goes only into the Authorization header.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { ExternalModelSchema, type ExternalModelSettings } from '../config/schema.ts';
import { CACHE_FILE } from './cache.ts';
import { ExternalModel, retryAfterMs } from './client.ts';

type Handler = (req: IncomingMessage, res: ServerResponse, body: any) => void;

/** A server whose answer the test sets per call; it counts requests, the most in flight, and the sockets still open. */
class FaultServer {
  handler: Handler = (_req, res) => answer(res, 'ok');
  requests = 0;
  inFlight = 0;
  maxInFlight = 0;
  lastAuth: string | undefined;
  bodies: any[] = [];
  private readonly sockets = new Set<import('node:net').Socket>();
  readonly server: Server;

  constructor() {
    this.server = createServer((req, res) => {
      let raw = '';
      req.on('data', (d) => (raw += d));
      req.on('end', () => {
        this.requests++;
        this.inFlight++;
        this.maxInFlight = Math.max(this.maxInFlight, this.inFlight);
        this.lastAuth = req.headers.authorization;
        const body = JSON.parse(raw);
        this.bodies.push(body);
        res.on('close', () => this.inFlight--);
        this.handler(req, res, body);
      });
    });
    this.server.on('connection', (s) => {
      this.sockets.add(s);
      s.on('close', () => this.sockets.delete(s));
    });
  }

  async listen(): Promise<string> {
    await new Promise<void>((r) => this.server.listen(0, '127.0.0.1', r));
    const a = this.server.address() as import('node:net').AddressInfo;
    return `http://127.0.0.1:${a.port}/v1`;
  }

  /** Requests whose response has not ended (a hang the client gave up on closes its socket). */
  get openRequests(): number {
    return this.inFlight;
  }

  reset(): void {
    this.requests = 0;
    this.maxInFlight = 0;
    this.bodies = [];
    this.handler = (_req, res) => answer(res, 'ok');
  }

  close(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    return new Promise((r) => this.server.close(() => r()));
  }
}

function answer(res: ServerResponse, text: string, usage = { prompt_tokens: 7, completion_tokens: 3 }): void {
  res.writeHead(200, { 'Content-Type': 'application/json' });
  res.end(JSON.stringify({ choices: [{ message: { role: 'assistant', content: text }, finish_reason: 'stop' }], usage }));
}

let fault: FaultServer;
let url: string;
let dir: string;
const clients: ExternalModel[] = [];

beforeAll(async () => {
  fault = new FaultServer();
  url = await fault.listen();
});
afterAll(async () => fault.close());
afterEach(() => {
  clients.splice(0).forEach((c) => c.close());
  fault.reset();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

function client(over: Partial<ExternalModelSettings> = {}, env: NodeJS.ProcessEnv = {}, log: string[] = []): ExternalModel {
  dir = mkdtempSync(join(tmpdir(), 'empo2-external-'));
  const settings = ExternalModelSchema.parse({ base_url: url, model: 'm', timeout_s: 2, max_retries: 2, max_retry_wait_s: 2, ...over });
  const c = new ExternalModel(settings, { role: 'reflector', defaultCacheDir: dir, log: (l) => log.push(l), env });
  clients.push(c);
  return c;
}

const ask = (c: ExternalModel, text = 'hello') => c.chat({ messages: [{ role: 'user', content: text }], maxTokens: 16, seed: 1 });

describe('external model client', () => {
  it('sends an OpenAI chat request and counts its tokens; the same request again is answered from the cache', async () => {
    const c = client();
    const first = await ask(c);
    expect(first).toMatchObject({ ok: true, text: 'ok', cached: false, promptTokens: 7, completionTokens: 3 });
    expect(fault.bodies[0]).toEqual({
      model: 'm',
      messages: [{ role: 'user', content: 'hello' }],
      temperature: 0,
      max_tokens: 16,
      seed: 1,
    });
    const again = await ask(c);
    expect(again).toMatchObject({ ok: true, text: 'ok', cached: true });
    expect(fault.requests).toBe(1);
    // A new client over the same folder (a resumed or repeated run) finds the answer on disk.
    const later = new ExternalModel(c.settings, { role: 'reflector', defaultCacheDir: dir });
    clients.push(later);
    expect(await ask(later)).toMatchObject({ ok: true, text: 'ok', cached: true });
    expect(fault.requests).toBe(1);
    const usage = c.takeUsage();
    expect(usage).toMatchObject({ calls: 2, cached: 1, failed: 0, requests: 1, retries: 0, prompt_tokens: 7, completion_tokens: 3 });
    expect(usage.seconds).toBeGreaterThan(0);
    expect(c.takeUsage().calls).toBe(0);
  });

  it('waits out a 429 Retry-After, then gets the answer', async () => {
    let n = 0;
    fault.handler = (_req, res) => {
      if (n++ === 0) {
        res.writeHead(429, { 'Retry-After': '1', 'Content-Type': 'application/json' });
        res.end(JSON.stringify({ error: { message: 'slow down' } }));
      } else answer(res, 'after the wait');
    };
    const c = client();
    const t0 = performance.now();
    const out = await ask(c);
    expect(out).toMatchObject({ ok: true, text: 'after the wait' });
    expect(performance.now() - t0).toBeGreaterThanOrEqual(950);
    expect(c.takeUsage()).toMatchObject({ calls: 1, requests: 2, retries: 1, failed: 0 });
  });

  it('fails at once when Retry-After asks for longer than max_retry_wait_s', async () => {
    fault.handler = (_req, res) => {
      res.writeHead(429, { 'Retry-After': '3600' });
      res.end('busy');
    };
    const log: string[] = [];
    const c = client({}, {}, log);
    const out = await ask(c);
    expect(out.ok).toBe(false);
    expect(!out.ok && out.error).toMatch(/429: busy; the server asked to wait 3600 s, more than max_retry_wait_s 2/);
    expect(fault.requests).toBe(1);
    expect(log.join('\n')).toMatch(/reflector model m: .*429.*skipped and counted in metrics.jsonl/);
  });

  it('retries a 500 with backoff, then fails the call (not the caller) and says so once', async () => {
    fault.handler = (_req, res) => {
      res.writeHead(500, { 'Content-Type': 'application/json' });
      res.end(JSON.stringify({ error: { message: 'boom' } }));
    };
    const log: string[] = [];
    const c = client({ max_retries: 2 }, {}, log);
    const outs = await Promise.all([ask(c, 'a'), ask(c, 'b')]);
    expect(outs.every((o) => !o.ok)).toBe(true);
    expect(!outs[0].ok && outs[0].error).toMatch(/answered 500: boom \(after 2 retries\)/);
    expect(fault.requests).toBe(6);
    expect(c.takeUsage()).toMatchObject({ calls: 2, failed: 2, requests: 6, retries: 4 });
    expect(log).toHaveLength(1);
  });

  it('fails on a 200 whose body is not JSON, without retrying, and caches nothing', async () => {
    fault.handler = (_req, res) => {
      res.writeHead(200, { 'Content-Type': 'application/json' });
      res.end('<html>proxy error</html>');
    };
    const c = client();
    const out = await ask(c);
    expect(!out.ok && out.error).toMatch(/200 with a body that is not JSON: <html>proxy error<\/html>/);
    expect(fault.requests).toBe(1);
    fault.handler = (_req, res) => answer(res, 'fine now');
    expect(await ask(c)).toMatchObject({ ok: true, text: 'fine now', cached: false });
  });

  it('gives up on a server that hangs after timeout_s per attempt, leaving no request open', async () => {
    fault.handler = () => undefined; // never answers
    const c = client({ timeout_s: 0.3, max_retries: 1, max_retry_wait_s: 0.1 });
    const out = await ask(c);
    expect(!out.ok && out.error).toMatch(/did not answer within timeout_s 0.3 \(after 1 retries\)/);
    expect(fault.requests).toBe(2);
    await new Promise((r) => setTimeout(r, 100));
    expect(fault.openRequests).toBe(0);
  });

  it('fails when nothing listens, after its retries', async () => {
    const closed = new FaultServer();
    const deadUrl = await closed.listen();
    await closed.close();
    const c = client({ base_url: deadUrl, max_retries: 1, max_retry_wait_s: 0.1 });
    const out = await ask(c);
    expect(!out.ok && out.error).toMatch(/ECONNREFUSED \(after 1 retries\)/);
    expect(c.takeUsage()).toMatchObject({ calls: 1, failed: 1, requests: 2, retries: 1 });
  });

  it('close() ends the calls in flight and those queued behind the concurrency limit', async () => {
    fault.handler = () => undefined;
    const c = client({ timeout_s: 60, concurrency: 2 });
    const calls = [1, 2, 3, 4, 5].map((i) => ask(c, `q${i}`));
    await new Promise((r) => setTimeout(r, 200));
    expect(fault.maxInFlight).toBe(2);
    c.close();
    const outs = await Promise.all(calls);
    expect(outs.map((o) => !o.ok && o.error)).toEqual(Array(5).fill('reflector model: closed before it answered'));
    await new Promise((r) => setTimeout(r, 100));
    expect(fault.openRequests).toBe(0);
  });

  it('sends at most `concurrency` requests at once', async () => {
    fault.handler = (_req, res, body) => setTimeout(() => answer(res, body.messages[0].content), 50);
    const c = client({ concurrency: 3 });
    const outs = await Promise.all(Array.from({ length: 10 }, (_, i) => ask(c, `q${i}`)));
    expect(outs.map((o) => o.ok && o.text)).toEqual(Array.from({ length: 10 }, (_, i) => `q${i}`));
    expect(fault.maxInFlight).toBe(3);
  });

  it('sends the key from the variable api_key_env names, and never writes it down', async () => {
    const secret = 'sk-test-123456';
    const c = client({ api_key_env: 'MY_KEY' }, { MY_KEY: secret });
    await ask(c);
    expect(fault.lastAuth).toBe(`Bearer ${secret}`);
    expect(readFileSync(join(dir, CACHE_FILE), 'utf8')).not.toContain(secret);
    expect(() => client({ api_key_env: 'MISSING_KEY' })).toThrow(/api_key_env says the key is in \$MISSING_KEY, which is not set/);
    // A key pasted where the variable's name goes is not repeated in the error.
    let message = '';
    try {
      client({ api_key_env: 'abcdef0123456789abcdef' });
    } catch (e) {
      message = (e as Error).message;
    }
    expect(message).toMatch(/not shown: is it the key itself/);
    expect(message).not.toContain('abcdef0123456789abcdef');
    expect(() => ExternalModelSchema.parse({ base_url: url, model: 'm', api_key_env: 'sk-abc-123' })).toThrow(
      /name of an environment variable/,
    );
  });

  it('fails a 401 at once, naming where the key came from', async () => {
    fault.handler = (_req, res) => {
      res.writeHead(401);
      res.end(JSON.stringify({ error: { message: 'bad key' } }));
    };
    const c = client({ api_key_env: 'MY_KEY' }, { MY_KEY: 'k' });
    const out = await ask(c);
    expect(!out.ok && out.error).toMatch(/401: bad key \(check the key in MY_KEY\)/);
    expect(fault.requests).toBe(1);
  });

  it('skips a cache line cut by a kill and keeps the rest', async () => {
    const c = client();
    await ask(c, 'kept');
    const file = join(dir, CACHE_FILE);
    writeFileSync(file, readFileSync(file, 'utf8') + '{"key":"abc","te');
    const log: string[] = [];
    const later = new ExternalModel(c.settings, { role: 'reflector', defaultCacheDir: dir, log: (l) => log.push(l) });
    clients.push(later);
    expect(await ask(later, 'kept')).toMatchObject({ ok: true, cached: true });
    expect(log.join('\n')).toMatch(/1 unreadable line skipped/);
  });

  it('falls back to weaker forms of a field the server refuses, without retrying, remembers the form, and finds any form in the cache', async () => {
    // As llama-cpp-python 0.3.36 answers response_format json_schema (a 500 naming the field), and a strict validator json_object (422).
    fault.handler = (_req, res, body) => {
      const type = body.response_format?.type;
      if (type === 'json_schema') {
        res.writeHead(500, { 'Content-Type': 'application/json' });
        res.end(
          JSON.stringify({
            error: { message: "1 validation error: ('body', 'response_format', 'type') Input should be 'text' or 'json_object'" },
          }),
        );
      } else if (type === 'json_object') {
        res.writeHead(422, { 'Content-Type': 'application/json' });
        res.end(JSON.stringify({ detail: [{ loc: ['body', 'response_format'], msg: 'Extra inputs are not permitted' }] }));
      } else answer(res, `plain ${body.messages[0].content}`);
    };
    const log: string[] = [];
    const c = client({ max_retries: 3 }, {}, log);
    const formats = (text: string) =>
      c.chat({
        messages: [{ role: 'user', content: text }],
        extra: { response_format: { type: 'json_schema' } },
        fallbacks: {
          id: 'fmt',
          label: 'json_schema',
          forms: [
            { label: 'json_object', extra: { response_format: { type: 'json_object' } } },
            { label: 'none', extra: {} },
          ],
        },
      });
    expect(await formats('a')).toMatchObject({ ok: true, text: 'plain a', cached: false });
    // One request per form: a refusal is neither retried nor a failure.
    expect(fault.bodies.map((b) => b.response_format?.type ?? null)).toEqual(['json_schema', 'json_object', null]);
    expect(log).toHaveLength(2);
    expect(log[0]).toMatch(/refused json_schema \(.*answered 500: 1 validation error.*\); asking with json_object from now on/);
    expect(log[1]).toMatch(
      /refused json_object \(.*answered 422: body.response_format: Extra inputs are not permitted\); asking with none/,
    );
    // The next call starts at the form that was taken.
    expect(await formats('b')).toMatchObject({ ok: true, text: 'plain b' });
    expect(fault.bodies.slice(3).map((b) => b.response_format?.type ?? null)).toEqual([null]);
    expect(c.takeUsage()).toMatchObject({ calls: 2, failed: 0, requests: 4, retries: 0 });
    // A new client (a resumed run) finds the answer under the taken form, asking nothing.
    const later = new ExternalModel(c.settings, { role: 'reflector', defaultCacheDir: dir });
    clients.push(later);
    const before = fault.requests;
    expect(
      await later.chat({
        messages: [{ role: 'user', content: 'a' }],
        extra: { response_format: { type: 'json_schema' } },
        fallbacks: { id: 'fmt', label: 'json_schema', forms: [{ label: 'none', extra: {} }] },
      }),
    ).toMatchObject({ ok: true, text: 'plain a', cached: true });
    expect(fault.requests).toBe(before);
    // Without fallbacks, the same 500 is an error like any other: retried, then failed.
    const plain = new ExternalModel({ ...c.settings, max_retries: 1, max_retry_wait_s: 0.1 }, { role: 'reflector', defaultCacheDir: null });
    clients.push(plain);
    const out = await plain.chat({ messages: [{ role: 'user', content: 'c' }], extra: { response_format: { type: 'json_schema' } } });
    expect(!out.ok && out.error).toMatch(/answered 500: .*\(after 1 retries\)/);
  });

  it('reads Retry-After in seconds, as a date, and as retry-after-ms', () => {
    const now = Date.parse('2026-01-01T00:00:00Z');
    expect(retryAfterMs(new Headers({ 'retry-after': '2' }), now)).toBe(2000);
    expect(retryAfterMs(new Headers({ 'retry-after': 'Thu, 01 Jan 2026 00:00:05 GMT' }), now)).toBe(5000);
    expect(retryAfterMs(new Headers({ 'retry-after-ms': '250', 'retry-after': '9' }), now)).toBe(250);
    expect(retryAfterMs(new Headers({ 'retry-after': 'soon' }), now)).toBeNull();
    expect(retryAfterMs(new Headers(), now)).toBeNull();
  });
});
