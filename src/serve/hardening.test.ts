/**
 * `empo2 serve` against requests that would stall or subvert it: work bounded per request, other
 * requests answered during a long generation, work stopped when its client hangs up, echo and
 * long texts in linear time, web pages kept out (content type, Host, Origin, API key), and weight
 * swaps that refresh the limits and load only from the roots given at start-up.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { request } from 'node:http';
import { spawn } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { loadConfig } from '../config/load.ts';
import type { GenerateOptions, Generation, PolicyEngine } from '../policy/types.ts';
import { initBackend } from '../policy/tfjs/backend.ts';
import { createEngine } from '../policy/create-engine.ts';
import { TINY_MODEL } from '../../test/support/tiny.ts';
import { loadServedModel, type ServedModel } from './load.ts';
import { EngineQueue, QueueFullError } from './queue.ts';
import { startServer, type RunningServer } from './server.ts';
import { startServedFixture, type ServedFixture } from '../../test/support/served-fixture.ts';
import { environmentCorpus } from '../envs/index.ts';

const JSON_HEADERS = { 'Content-Type': 'application/json' };

async function post(
  url: string,
  path: string,
  body: unknown,
  init: { headers?: Record<string, string>; signal?: AbortSignal } = {},
): Promise<{ status: number; json: any }> {
  const res = await fetch(url + path, {
    method: 'POST',
    headers: { ...JSON_HEADERS, ...init.headers },
    body: JSON.stringify(body),
    signal: init.signal,
  });
  return { status: res.status, json: await res.json() };
}

/** A raw request, so that Host and Origin can be anything. */
function rawRequest(
  url: string,
  opts: { method: string; path: string; headers: Record<string, string>; body?: string },
): Promise<{ status: number; json: any }> {
  const { hostname, port } = new URL(url);
  return new Promise((resolveReq, reject) => {
    const req = request({ hostname, port, method: opts.method, path: opts.path, headers: opts.headers }, (res) => {
      let text = '';
      res.on('data', (d: Buffer) => (text += d.toString()));
      res.on('end', () => resolveReq({ status: res.statusCode!, json: text ? JSON.parse(text) : null }));
    });
    req.on('error', reject);
    req.end(opts.body);
  });
}

describe('empo2 serve: work per request', () => {
  let f: ServedFixture;
  beforeAll(async () => {
    f = await startServedFixture('tiny');
  }, 60_000);
  afterAll(async () => f?.close());
  afterEach(() => vi.restoreAllMocks());

  it('refuses 2000 one-token prompts × max_tokens 2000 at once, naming the limit', async () => {
    const { status, json } = await post(f.server.url, '/v1/completions', {
      prompt: Array.from({ length: 2000 }, () => [5]),
      max_tokens: 2000,
    });
    expect(status).toBe(400);
    expect(json.error.param).toBe('prompt');
    expect(json.error.message).toMatch(
      /2000 prompts × \(1 prompt tokens \+ 2000 max_tokens\) = 4002000 tokens of work; the server takes at most 262144 per request \(empo2 serve --max-request-tokens\)/,
    );
    expect(f.server.queue.stats.generateCalls).toBe(0);
  });

  it('measures text prompts by their bytes before tokenising them', async () => {
    const encode = vi.spyOn(f.server.queue.current.engine.tokenizer, 'encode');
    // Tokenising 4096 texts is work: each is at least a few tokens.
    const many = await post(f.server.url, '/v1/completions', {
      prompt: Array.from({ length: 4096 }, () => 'go to the kitchen and open the red box and look around'),
      max_tokens: 64,
    });
    expect(many.status).toBe(400);
    expect(many.json.error.message).toMatch(/4096 prompts × \(\d+ prompt tokens \+ 64 max_tokens\)/);
    const huge = await post(f.server.url, '/v1/completions', { prompt: ['look', 'x'.repeat(1 << 20)], max_tokens: 4 });
    expect(huge.status).toBe(400);
    expect(huge.json.error.param).toBe('prompt[1]');
    expect(huge.json.error.message).toMatch(
      /"prompt\[1\]" is 1048576 bytes, at least \d+ tokens .* cannot fit in the model's context of 4096 tokens/,
    );
    expect(encode).not.toHaveBeenCalled();
  });

  it("checks a chat message's byte length before tokenising it", async () => {
    const encode = vi.spyOn(f.server.queue.current.engine.tokenizer, 'encode');
    const messages = [
      { role: 'system', content: 'You are an agent.' },
      { role: 'user', content: 'y'.repeat(15 << 20) },
    ];
    const { status, json } = await post(f.server.url, '/v1/chat/completions', { messages, max_tokens: 8 });
    expect(status).toBe(400);
    expect(json.error.param).toBe('messages[1].content');
    expect(json.error.message).toMatch(/is 15728640 bytes/);
    expect(encode).not.toHaveBeenCalled();
  });

  it('echoes prompt log-probs with text offsets in one pass over the prompt', async () => {
    const tok = f.server.queue.current.engine.tokenizer;
    const text = 'Task: put the café’s blue mug — “über” 日本 🙂 in the sink. '.repeat(30);
    const ids = tok.encode(text);
    expect(ids.length).toBeGreaterThan(1500);
    const decode = vi.spyOn(tok, 'decode');
    const { status, json } = await post(f.server.url, '/v1/completions', { prompt: ids, max_tokens: 0, echo: true, logprobs: 0 });
    expect(status).toBe(200);
    // Decoding every prefix again would decode ~n²/2 ids (over a million here).
    const decodedIds = decode.mock.calls.reduce((n, [arg]) => n + arg.length, 0);
    expect(decodedIds).toBeLessThanOrEqual(3 * ids.length);
    decode.mockRestore();
    const c = json.choices[0];
    expect(c.text).toBe(text);
    const offsets: number[] = c.logprobs.text_offset;
    expect(offsets).toHaveLength(ids.length);
    // Where a prefix ends on a character boundary, its offset is the prefix's decoded length.
    let boundaries = 0;
    for (let k = 0; k < ids.length; k += 7) {
      const prefix = tok.decode(ids.slice(0, k));
      if (prefix.endsWith('\uFFFD')) continue;
      expect(offsets[k]).toBe(prefix.length);
      boundaries++;
    }
    expect(boundaries).toBeGreaterThan(100);
    for (let k = 1; k < ids.length; k++) expect(offsets[k]).toBeGreaterThanOrEqual(offsets[k - 1]);
  });

  it('answers other requests during a long generation and stops it when the client hangs up', async () => {
    const stats = f.server.queue.stats;
    const before = { ...stats };
    // Greedy decoding of the tiny model never emits an end token: 2 × 2500 tokens take ~10 s.
    const client = new AbortController();
    let finished = false;
    const long = post(
      f.server.url,
      '/v1/completions',
      { prompt: [[5], [6]], max_tokens: 2500, temperature: 0 },
      { signal: client.signal },
    ).finally(() => (finished = true));
    long.catch(() => {});
    await vi.waitFor(() => expect(stats.generateCalls).toBe(before.generateCalls + 1), { timeout: 5_000, interval: 5 });
    const models = await fetch(f.server.url + '/v1/models');
    expect(models.status).toBe(200);
    const other = await post(f.server.url, '/v1/completions', { prompt: 'hi', max_tokens: 0, echo: true });
    expect(other.status).toBe(200);
    expect(finished).toBe(false);

    client.abort();
    await expect(long).rejects.toThrow();
    await f.server.queue.idle();
    expect(stats.cancelledCalls).toBe(before.cancelledCalls + 1);
    // The engine is free again.
    const after = await post(f.server.url, '/v1/completions', { prompt: [[5]], max_tokens: 3, temperature: 0 });
    expect(after.status).toBe(200);
    expect(after.json.choices[0].token_ids).toHaveLength(3);
  }, 30_000);

  it('a smaller --max-request-tokens refuses what a default server takes', async () => {
    const small = await startServer({
      engine: f.server.queue.current.engine,
      modelName: 'tiny',
      port: 0,
      maxModelLen: 4096,
      maxRequestTokens: 64,
    });
    try {
      const ok = await post(small.url, '/v1/completions', { prompt: [[5, 6], [7]], max_tokens: 30 });
      expect(ok.status).toBe(200);
      const refused = await post(small.url, '/v1/completions', { prompt: [[5, 6], [7], [8]], max_tokens: 30 });
      expect(refused.status).toBe(400);
      expect(refused.json.error.message).toMatch(
        /3 prompts × \(2 prompt tokens \+ 30 max_tokens\) = 96 tokens of work; the server takes at most 64/,
      );
    } finally {
      // The engine belongs to the fixture: close the server only.
      await small.close();
    }
  });

  describe('items per request and allowed texts', () => {
    /**
     * Sends `body` while asking GET /v1/models every 50 ms until it is answered. The server runs in
     * this thread, so a stalled event loop shows as a long wait between two /v1/models answers
     * (whether or not one was in flight): returns the longest.
     */
    async function whileAsking(path: string, body: unknown): Promise<{ status: number; json: any; longestWaitMs: number; models: number }> {
      let done = false;
      // A connection the server drops is an answer too (status 0), not an unhandled rejection.
      const big = post(f.server.url, path, body)
        .catch((e: Error) => ({ status: 0, json: { error: { message: e.message } } }))
        .finally(() => (done = true));
      let last = performance.now();
      let longest = 0;
      let models = 0;
      while (!done) {
        expect((await fetch(f.server.url + '/v1/models')).status).toBe(200);
        longest = Math.max(longest, performance.now() - last);
        last = performance.now();
        models++;
        await new Promise((r) => setTimeout(r, 50));
      }
      const answer = await big;
      return { ...answer, longestWaitMs: Math.max(longest, performance.now() - last), models };
    }

    it('refuses more prompts, messages or allowed texts than it takes, before looking at them, naming the limit', async () => {
      const callsBefore = f.server.queue.stats.generateCalls;
      const cases: [string, string, unknown, string, RegExp][] = [
        [
          '150,000 one-token prompts',
          '/v1/completions',
          { prompt: Array.from({ length: 150_000 }, () => [1]), max_tokens: 1 },
          'prompt',
          /"prompt" holds 150000 prompts; empo2 serve takes at most 4096 per request/,
        ],
        [
          '1,000,000 prompt strings',
          '/v1/completions',
          { prompt: Array.from({ length: 1_000_000 }, () => 'a'), max_tokens: 1 },
          'prompt',
          /"prompt" holds 1000000 prompts; empo2 serve takes at most 4096/,
        ],
        [
          '130,000 empty chat messages',
          '/v1/chat/completions',
          { messages: Array.from({ length: 130_000 }, () => ({ role: 'user', content: '' })), max_tokens: 1 },
          'messages',
          /"messages" holds 130000 messages; empo2 serve takes at most 4096/,
        ],
        [
          '100,000 empty content parts',
          '/v1/chat/completions',
          { messages: [{ role: 'user', content: Array.from({ length: 100_000 }, () => ({ type: 'text', text: '' })) }], max_tokens: 1 },
          'messages',
          /"messages" holds 100000 content parts; empo2 serve takes at most 4096/,
        ],
        [
          '300,000 allowed texts',
          '/v1/chat/completions',
          { messages: [{ role: 'user', content: 'hi' }], max_tokens: 4, allowed_texts: Array.from({ length: 300_000 }, () => 'a') },
          'allowed_texts',
          /"allowed_texts" holds 300000 texts; empo2 serve takes at most 262144/,
        ],
        [
          '2 × 150,000 allowed texts, one list per prompt',
          '/v1/completions',
          {
            prompt: [[5], [6]],
            max_tokens: 4,
            allowed_texts: [Array.from({ length: 150_000 }, () => 'a'), Array.from({ length: 150_000 }, () => 'b')],
          },
          'allowed_texts',
          /"allowed_texts" holds 300000 texts; empo2 serve takes at most 262144/,
        ],
      ];
      for (const [what, path, body, param, message] of cases) {
        const started = performance.now();
        const { status, json } = await post(f.server.url, path, body);
        expect(status, what).toBe(400);
        expect(json.error.param, what).toBe(param);
        expect(json.error.message, what).toMatch(message);
        expect(performance.now() - started, what).toBeLessThan(5_000);
      }
      expect(f.server.queue.stats.generateCalls).toBe(callsBefore);
    }, 60_000);

    it('answers /v1/models at once while it refuses 500,000 prompts', async () => {
      // Parsing the 2 MB body takes a tenth of a second; validating its prompts took seconds.
      const r = await whileAsking('/v1/completions', { prompt: Array.from({ length: 500_000 }, () => [1]), max_tokens: 0 });
      expect(r.status).toBe(400);
      expect(r.json.error.message).toMatch(/"prompt" holds 500000 prompts/);
      expect(r.longestWaitMs).toBeLessThan(1_000);
    }, 60_000);

    it('refuses token-id prompts over the work bound from their lengths, before validating every id', async () => {
      const { status, json } = await post(f.server.url, '/v1/completions', {
        prompt: [[5, 6], Array.from({ length: 300_000 }, () => 'x')],
        max_tokens: 1,
      });
      // The ids are not even numbers: the work bound is checked on the lengths first.
      expect(status).toBe(400);
      expect(json.error.message).toMatch(/2 prompts × \(300000 prompt tokens \+ 1 max_tokens\) = 600002 tokens of work/);
    });

    it('measures allowed texts by their bytes before tokenising them, and answers /v1/models meanwhile', async () => {
      const encode = vi.spyOn(f.server.queue.current.engine.tokenizer, 'encode');
      const hi = [{ role: 'user', content: 'hi' }];
      const huge = await whileAsking('/v1/chat/completions', { messages: hi, max_tokens: 4, allowed_texts: ['a'.repeat(15 << 20)] });
      expect(huge.status).toBe(400);
      expect(huge.json.error.param).toBe('allowed_texts');
      expect(huge.json.error.message).toMatch(
        /"allowed_texts" holds 15728640 bytes of text; empo2 serve takes at most 8388608 per request/,
      );
      expect(huge.longestWaitMs).toBeLessThan(1_000);

      const long = await post(f.server.url, '/v1/chat/completions', {
        messages: hi,
        max_tokens: 4,
        allowed_texts: ['look', 'a'.repeat(4_000_000)],
      });
      expect(long.status).toBe(400);
      expect(long.json.error.param).toBe('allowed_texts[1]');
      expect(long.json.error.message).toMatch(
        /"allowed_texts\[1\]" is 4000000 bytes, at least \d+ tokens \(no token is longer than \d+ bytes\): it cannot be generated within max_tokens \(4\)/,
      );
      const perPrompt = await post(f.server.url, '/v1/completions', {
        prompt: [[5], [6]],
        max_tokens: 2,
        allowed_texts: [null, ['go', 'the longest allowed text of them all']],
      });
      expect(perPrompt.status).toBe(400);
      expect(perPrompt.json.error.param).toBe('allowed_texts[1][1]');
      expect(encode).not.toHaveBeenCalled();
    }, 60_000);

    it('tokenises 20,000 allowed texts without holding up other requests', async () => {
      const allowed = Array.from({ length: 20_000 }, (_, i) => `go to the ${i}th door of the long corridor and open it `.padEnd(100, '.'));
      const r = await whileAsking('/v1/chat/completions', {
        messages: [{ role: 'user', content: 'which door?' }],
        max_tokens: 200,
        allowed_texts: allowed,
      });
      expect(r.status).toBe(200);
      expect(allowed).toContain(r.json.choices[0].message.content);
      expect(r.models).toBeGreaterThan(1);
      expect(r.longestWaitMs).toBeLessThan(1_000);
    }, 120_000);
  });
});

describe('EngineQueue limits', () => {
  function recordingEngine(): { engine: PolicyEngine; calls: number[][][] } {
    const calls: number[][][] = [];
    const engine = {
      tokenizer: { encode: () => [], decode: () => '', vocabSize: 10, tokenToId: () => undefined },
      async generate(prompts: number[][], _opts: GenerateOptions): Promise<Generation[]> {
        calls.push(prompts);
        return prompts.map((p) => ({ tokens: [p[0]], logprobs: [-1], text: String(p[0]), finish: 'stop' as const }));
      },
      logprobs: async () => [],
      trainStep: async () => {
        throw new Error('unused');
      },
      save: async () => {},
      dispose: () => {},
    } satisfies PolicyEngine;
    return { engine, calls };
  }
  const base = { temperature: 1, topP: 1, maxTokens: 4, seed: null };

  it('merges waiting requests only while the batch stays within the work bound', async () => {
    const { engine, calls } = recordingEngine();
    const q = new EngineQueue({ engine, vocabSize: 10, maxModelLen: 100 }, { maxBatchTokens: 3 * (2 + 4) });
    await Promise.all([q.generate([[1], [2]], base), q.generate([[3, 3]], base), q.generate([[4]], base), q.generate([[5]], base)]);
    expect(calls.map((c) => c.map((p) => p[0]))).toEqual([
      [1, 2, 3],
      [4, 5],
    ]);
  });

  it('fails only the request the engine throws on when it shares a call with others', async () => {
    const { engine } = recordingEngine();
    const generate = engine.generate.bind(engine);
    const tried: number[][] = [];
    engine.generate = async (prompts, opts) => {
      tried.push(prompts.map((p) => p[0]));
      if (prompts.some((p) => p[0] === 9)) throw new Error('cannot sample token 9');
      return generate(prompts, opts);
    };
    const q = new EngineQueue({ engine, vocabSize: 10, maxModelLen: 100 });
    const [a, bad, b] = await Promise.allSettled([q.generate([[1], [2]], base), q.generate([[9]], base), q.generate([[3]], base)]);
    expect(a.status === 'fulfilled' && a.value.map((g) => g.tokens[0])).toEqual([1, 2]);
    expect(bad.status === 'rejected' && (bad.reason as Error).message).toBe('cannot sample token 9');
    expect(b.status === 'fulfilled' && b.value.map((g) => g.tokens[0])).toEqual([3]);
    // One merged call (it threw), then each request alone.
    expect(tried).toEqual([[1, 2, 9, 3], [1, 2], [9], [3]]);
  });

  it('refuses requests beyond the waiting limit, and drops those whose client has gone', async () => {
    const { engine, calls } = recordingEngine();
    const q = new EngineQueue({ engine, vocabSize: 10, maxModelLen: 100 }, { maxPending: 2 });
    const gone = new AbortController();
    const first = q.generate([[1]], { ...base, seed: 1 }, { signal: gone.signal });
    const second = q.generate([[2]], { ...base, seed: 2 });
    await expect(q.generate([[3]], base)).rejects.toBeInstanceOf(QueueFullError);
    gone.abort(new Error('hung up'));
    await expect(first).rejects.toThrow('hung up');
    expect((await second)[0].tokens).toEqual([2]);
    expect(calls).toEqual([[[2]]]);
    expect(q.stats.droppedRequests).toBe(1);
  });
});

describe('empo2 serve: who may send requests', () => {
  let f: ServedFixture;
  beforeAll(async () => {
    f = await startServedFixture('tiny', { apiKey: 'sesame' });
  }, 60_000);
  afterAll(async () => f?.close());
  const auth = { Authorization: 'Bearer sesame' };
  const body = JSON.stringify({ prompt: [[5]], max_tokens: 1 });

  it('requires the API key on every route', async () => {
    expect((await fetch(f.server.url + '/v1/models')).status).toBe(401);
    expect((await fetch(f.server.url + '/v1/models', { headers: { Authorization: 'Bearer sesam' } })).status).toBe(401);
    const refused = await post(f.server.url, '/v1/completions', { prompt: [[5]], max_tokens: 1 });
    expect(refused.status).toBe(401);
    expect(refused.json.error.code).toBe('invalid_api_key');
    expect((await fetch(f.server.url + '/v1/models', { headers: auth })).status).toBe(200);
    expect((await post(f.server.url, '/v1/completions', { prompt: [[5]], max_tokens: 1 }, { headers: auth })).status).toBe(200);
  });

  it('refuses POST bodies not declared as JSON (a web page can send text/plain without asking)', async () => {
    const r = await fetch(f.server.url + '/v1/completions', { method: 'POST', headers: { ...auth, 'Content-Type': 'text/plain' }, body });
    expect(r.status).toBe(415);
    expect(((await r.json()) as any).error.message).toMatch(/Content-Type: application\/json/);
  });

  it('refuses a Host that does not name the server (DNS rebinding) and foreign origins', async () => {
    const port = new URL(f.server.url).port;
    const send = (headers: Record<string, string>) =>
      rawRequest(f.server.url, { method: 'POST', path: '/v1/completions', headers: { ...auth, ...JSON_HEADERS, ...headers }, body });
    const rebound = await send({ Host: `attacker.example:${port}` });
    expect(rebound.status).toBe(403);
    expect(rebound.json.error.message).toMatch(/Host "attacker\.example:\d+" does not name this server \(bound to 127\.0\.0\.1\)/);
    expect((await send({ Host: `127.0.0.1:${port}`, Origin: 'https://attacker.example' })).status).toBe(403);
    expect((await send({ Host: `localhost:${port}` })).status).toBe(200);
    expect((await send({ Host: `127.0.0.1:${port}`, Origin: `http://localhost:${port}` })).status).toBe(200);
    expect((await send({ Host: `[::ffff:127.0.0.1]:${port}` })).status).toBe(200);
  });

  it('accepts host names given at start-up', async () => {
    const named = await startServer({ engine: f.server.queue.current.engine, modelName: 'tiny', port: 0, allowedHosts: ['Agent.LAN'] });
    try {
      const r = await rawRequest(named.url, { method: 'GET', path: '/v1/models', headers: { Host: 'agent.lan:8000' } });
      expect(r.status).toBe(200);
    } finally {
      await named.close();
    }
  });

  it('will not allow weight updates without an API key', async () => {
    await expect(
      startServer({
        engine: f.server.queue.current.engine,
        modelName: 'tiny',
        port: 0,
        loadWeights: { roots: [tmpdir()], load: loadServedModel },
      }),
    ).rejects.toThrow(/need an API key/);
  });
});

describe('empo2 serve: weight updates', () => {
  const root = mkdtempSync(join(tmpdir(), 'empo2-serve-weights-'));
  const weights = join(root, 'weights');
  const outside = join(root, 'outside');
  let server: RunningServer;
  let gate: Promise<void> = Promise.resolve();
  let loading = 0;
  const auth = { Authorization: 'Bearer key' };
  const log: string[] = [];

  async function saveModel(dir: string, vocab: number, context?: number): Promise<void> {
    const cfg = loadConfig(null, [
      `run_dir=${join(root, 'run')}`,
      'seed=3',
      ...TINY_MODEL,
      `model.vocab_size=${vocab}`,
      'env.tasks=[fetch]',
    ]);
    const { engine } = await createEngine(cfg, 'fresh', () => environmentCorpus(cfg.env));
    await engine.save(dir);
    engine.dispose();
    if (context) {
      const configPath = join(dir, 'config.json');
      writeFileSync(configPath, JSON.stringify({ ...JSON.parse(readFileSync(configPath, 'utf8')), max_position_embeddings: context }));
    }
  }

  beforeAll(async () => {
    await initBackend();
    mkdirSync(weights);
    await saveModel(join(root, 'initial'), 512);
    await saveModel(join(weights, 'small'), 300, 1024);
    await saveModel(join(outside, 'model'), 300);
    mkdirSync(join(weights, 'broken'));
    writeFileSync(join(weights, 'broken', 'config.json'), '{"hidden_size": SECRET-CONTENT');
    symlinkSync(join(outside, 'model'), join(weights, 'link-out'));
    const initial = await loadServedModel(join(root, 'initial'));
    const load = async (dir: string): Promise<ServedModel> => {
      loading++;
      await gate;
      return loadServedModel(dir);
    };
    server = await startServer({
      engine: initial.engine,
      modelName: 'tiny',
      port: 0,
      vocabSize: initial.vocabSize,
      maxModelLen: initial.maxModelLen,
      apiKey: 'key',
      loadWeights: { roots: [weights], load },
      log: (l) => log.push(l),
    });
  }, 60_000);
  afterAll(async () => {
    await server?.close();
    server?.queue.current.engine.dispose();
    rmSync(root, { recursive: true, force: true });
  });

  it('loads only from the weight roots, with one answer for every failure', async () => {
    const tries = [
      join(outside, 'model'),
      join(weights, 'missing'),
      join(weights, 'broken'),
      join(weights, 'link-out'),
      '/etc',
      join(weights, '..', 'outside', 'model'),
    ];
    for (const path of tries) {
      const r = await post(server.url, '/v1/empo2/load_weights', { path }, { headers: auth });
      expect(r.status, path).toBe(400);
      expect(r.json.error.param).toBe('path');
      expect(r.json.error.message).toBe(
        `cannot load weights from ${JSON.stringify(path)}: give a model or run directory under one of the server's weight roots (its log says what failed)`,
      );
    }
    // The reasons are in the server's log, not in the answers.
    expect(log.filter((l) => l.startsWith('load_weights'))).toHaveLength(tries.length);
    expect(log.join('\n')).toContain(join(weights, 'broken'));
    expect(server.queue.current.vocabSize).toBe(512);
    const noKey = await post(server.url, '/v1/empo2/load_weights', { path: join(weights, 'small') });
    expect(noKey.status).toBe(401);
  });

  it('refuses a model whose config.json claims a billion layers at once, naming the first missing tensor', async () => {
    const absurd = join(weights, 'absurd');
    cpSync(join(weights, 'small'), absurd, { recursive: true });
    const configPath = join(absurd, 'config.json');
    writeFileSync(configPath, JSON.stringify({ ...JSON.parse(readFileSync(configPath, 'utf8')), num_hidden_layers: 1e9 }));
    const started = performance.now();
    const r = await post(server.url, '/v1/empo2/load_weights', { path: absurd }, { headers: auth });
    expect(r.status).toBe(400);
    expect(performance.now() - started).toBeLessThan(3_000);
    expect(log.at(-1)).toMatch(
      /no tensor "model\.layers\.1\.input_layernorm\.weight" \(needed by config\.json\); config\.json says num_hidden_layers 1000000000 but the weight files hold 1$/,
    );
    expect(server.queue.current.vocabSize).toBe(512);
  });

  it('refreshes the vocabulary and context limits with every swap, also for requests already waiting', async () => {
    const before = (await (await fetch(server.url + '/v1/models', { headers: auth })).json()) as any;
    expect(before.data[0].max_model_len).toBe(4096);
    expect((await post(server.url, '/v1/completions', { prompt: [[400]], max_tokens: 1 }, { headers: auth })).status).toBe(200);

    let open!: () => void;
    gate = new Promise((r) => (open = r));
    const loadsBefore = loading;
    const swap = post(server.url, '/v1/empo2/load_weights', { path: join(weights, 'small') }, { headers: auth });
    await vi.waitFor(() => expect(loading).toBe(loadsBefore + 1), { interval: 5 });
    // Checked against the old vocabulary on arrival; runs after the swap, on the new one.
    const waiting = post(server.url, '/v1/completions', { prompt: [[400]], max_tokens: 1 }, { headers: auth });
    await vi.waitFor(() => expect(server.queue.pendingCount).toBe(1), { interval: 5 });
    open();
    expect((await swap).status).toBe(200);
    const refused = await waiting;
    expect(refused.status).toBe(400);
    expect(refused.json.error).toMatchObject({
      param: 'prompt[0][0]',
      message: '"prompt[0][0]": token id 400 is outside the vocabulary (size 300)',
    });

    const after = (await (await fetch(server.url + '/v1/models', { headers: auth })).json()) as any;
    expect(after.data[0].max_model_len).toBe(1024);
    const again = await post(server.url, '/v1/completions', { prompt: [[400]], max_tokens: 1 }, { headers: auth });
    expect(again.status).toBe(400);
    expect(again.json.error.message).toMatch(/outside the vocabulary \(size 300\)/);
    const long = await post(server.url, '/v1/completions', { prompt: [[5]], max_tokens: 1500 }, { headers: auth });
    expect(long.status).toBe(400);
    expect(long.json.error).toMatchObject({
      message:
        "This model's maximum context length is 1024 tokens. However, you requested 1501 tokens (1 in the prompt, 1500 in the completion). Please reduce the length of the prompt or completion.",
      code: 'context_length_exceeded',
      param: 'prompt[0]',
    });
  });
});

describe('empo2 serve (command line): API key and weight roots', () => {
  const repoRoot = resolve(import.meta.dirname, '..', '..');
  function runCli(args: string[], env: Record<string, string> = {}): Promise<{ code: number | null; err: string }> {
    const child = spawn(process.execPath, [join(repoRoot, 'bin', 'empo2.js'), ...args], {
      cwd: repoRoot,
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, ...env },
    });
    let err = '';
    child.stderr.on('data', (d: Buffer) => (err += d.toString()));
    return new Promise((r) => child.on('exit', (code) => r({ code, err })));
  }

  it('refuses --allow-weight-updates without a key or a root', async () => {
    const noKey = await runCli(['serve', '/nonexistent/model', '--allow-weight-updates', '--weights-root', tmpdir()], {
      EMPO2_API_KEY: '',
    });
    expect(noKey.code).toBe(1);
    expect(noKey.err).toMatch(/--allow-weight-updates needs an API key \(--api-key, or \$EMPO2_API_KEY\)/);
    const noRoot = await runCli(['serve', '/nonexistent/model', '--allow-weight-updates'], { EMPO2_API_KEY: 'k' });
    expect(noRoot.code).toBe(1);
    expect(noRoot.err).toMatch(/--allow-weight-updates needs --weights-root <dir>/);
  }, 60_000);
});
