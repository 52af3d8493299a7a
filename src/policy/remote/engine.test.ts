/**
 * The remote engine against `empo2 serve` (in process, random port, the trainer's tiny model):
 * the same ids and log-probs as the in-process engine, through one server and spread over two,
 * constrained decoding, scoring, held-out evaluation through the server alone. Failure handling
 * (time-outs, retries, 4xx without retry, servers that return no ids, servers that die with their
 * rows moved or returned as engine errors) against small stub servers that misbehave on purpose.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawn } from 'node:child_process';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import type { AddressInfo } from 'node:net';
import { createEnv } from '../../envs/index.ts';
import type { Env } from '../../envs/types.ts';
import { evaluate, formatEvalTable } from '../../trainer/evaluate.ts';
import { startServedFixture, type ServedFixture } from '../../../test/support/served-fixture.ts';
import { loadServedModel } from '../../serve/load.ts';
import { startServer, type RunningServer } from '../../serve/server.ts';
import type { GenerateOptions, Generation } from '../types.ts';
import { toolCallConstraint } from '../json-constraint.ts';
import { RemoteEngine, remoteEngineFromDir } from './index.ts';

let f: ServedFixture;
let remote: RemoteEngine;
/** A second server of the same model, and an engine that spreads its requests over both. */
let second: RunningServer;
let pair: RemoteEngine;
const warnings: string[] = [];
beforeAll(async () => {
  f = await startServedFixture('tiny');
  // No model name given: the engine asks /v1/models.
  remote = remoteEngineFromDir(f.modelDir, { baseUrl: f.server.url + '/v1', warn: (m) => warnings.push(m) });
  second = await startServer({ engine: (await loadServedModel(f.modelDir)).engine, modelName: 'tiny', port: 0 });
  pair = remoteEngineFromDir(f.modelDir, { baseUrl: [f.server.url, second.url], warn: (m) => warnings.push(m) });
}, 60_000);
afterAll(async () => {
  await second?.close();
  second?.queue.current.engine.dispose();
  await f?.close();
});

/** A tool whose one argument is an action from a list: the built-in environment's case. */
const ACT = {
  type: 'object',
  properties: { action: { enum: ['go to kitchen', 'take yellow hat', 'open red box'] } },
  required: ['action'],
};

const PROMPTS = [
  '<|im_start|>user\nTask: Find the yellow hat.\nYou are in the hall.<|im_end|>\n<|im_start|>assistant\n',
  'go to kitchen',
  '<|im_start|>user\nYou take the yellow hat.<|im_end|>\n<|im_start|>assistant\nopen red box<|im_end|>\n<|im_start|>user\nThe red box is open.<|im_end|>\n<|im_start|>assistant\n',
];

function expectSameGenerations(actual: Generation[], expected: Generation[]): void {
  expect(actual.map((g) => g.tokens)).toEqual(expected.map((g) => g.tokens));
  expect(actual.map((g) => g.text)).toEqual(expected.map((g) => g.text));
  expect(actual.map((g) => g.finish)).toEqual(expected.map((g) => g.finish));
  actual.forEach((g, i) => g.logprobs.forEach((lp, k) => expect(Math.abs(lp - expected[i].logprobs[k])).toBeLessThan(1e-5)));
}

describe('RemoteEngine against empo2 serve', () => {
  it.each<[string, Omit<GenerateOptions, 'seed'>]>([
    ['temperature 1', { maxTokens: 10, temperature: 1, topP: 1 }],
    ['temperature 0.7, top-p 0.9', { maxTokens: 10, temperature: 0.7, topP: 0.9 }],
    ['greedy', { maxTokens: 10, temperature: 0, topP: 1 }],
  ])('generates exactly what the in-process engine does, through one server and spread over two (%s)', async (_name, opts) => {
    const prompts = PROMPTS.map((p) => f.local.tokenizer.encode(p));
    const servedBySecond = second.queue.stats.generateRequests;
    for (const seed of [0, 12345]) {
      const want = await f.local.generate(prompts, { ...opts, seed });
      expectSameGenerations(await remote.generate(prompts, { ...opts, seed }), want);
      // Two servers: one request per prompt, seeded as its row, to whichever server has fewer in flight.
      expectSameGenerations(await pair.generate(prompts, { ...opts, seed }), want);
    }
    expect(second.queue.stats.generateRequests - servedBySecond).toBeGreaterThan(0);
    expect(await remote.model()).toBe('tiny');
  });

  it('honours stop strings like the in-process engine', async () => {
    const prompts = PROMPTS.map((p) => f.local.tokenizer.encode(p));
    const opts = { maxTokens: 20, temperature: 1, topP: 1, seed: 9, stop: ['a', 'e'] };
    const want = await f.local.generate(prompts, opts);
    expect(want.some((g) => g.finish === 'stop')).toBe(true);
    expectSameGenerations(await remote.generate(prompts, opts), want);
  });

  it('decodes under allowed texts through the server, per prompt (one server and two)', async () => {
    const prompts = PROMPTS.map((p) => f.local.tokenizer.encode(p));
    const allowedTexts = [['go to kitchen', 'go to hall', 'look around'], null, ['take yellow hat', 'inventory']];
    for (const seed of [1, 2, 3]) {
      const opts = { maxTokens: 16, temperature: 1, topP: 1, seed, allowedTexts };
      const got = await remote.generate(prompts, opts);
      const want = await f.local.generate(prompts, opts);
      expectSameGenerations(got, want);
      expectSameGenerations(await pair.generate(prompts, opts), want);
      expect(allowedTexts[0]).toContain(got[0].text);
      expect(allowedTexts[2]).toContain(got[2].text);
    }
  });

  it('a tool-call constraint with finite texts goes out as those texts: the same samples as the in-process engine given them', async () => {
    const prompts = PROMPTS.map((p) => f.local.tokenizer.encode(p));
    const end = f.local.tokenizer.tokenToId('<|im_end|>')!;
    const c = toolCallConstraint({
      tools: [{ name: 'act', parameters: ACT }],
      choice: 'required',
      parser: 'hermes',
      tokenizer: f.local.tokenizer,
      endTokens: [end],
    });
    for (const seed of [1, 2]) {
      const opts = { maxTokens: 80, temperature: 1, topP: 1, seed };
      const got = await remote.generate(prompts, { ...opts, constraints: [c, null, c] });
      expectSameGenerations(got, await f.local.generate(prompts, { ...opts, allowedTexts: [c.finiteTexts(), null, c.finiteTexts()] }));
      expect(c.finiteTexts()).toContain(got[0].text);
      expect(c.finiteTexts()).toContain(got[2].text);
    }
  });

  it('with one prompt per request and two in flight, still returns samples the model scores alike', async () => {
    const oneByOne = remoteEngineFromDir(f.modelDir, { baseUrl: f.server.url, model: 'tiny', promptsPerRequest: 1, concurrency: 2 });
    const prompts = PROMPTS.map((p) => f.local.tokenizer.encode(p));
    const gens = await oneByOne.generate(prompts, { maxTokens: 8, temperature: 1, topP: 1, seed: 4 });
    // The first request keeps the caller's seed.
    const [first] = await f.local.generate([prompts[0]], { maxTokens: 8, temperature: 1, topP: 1, seed: 4 });
    expect(gens[0].tokens).toEqual(first.tokens);
    // At temperature 1 the sampler's log-probs are the model's scores of the same tokens.
    const scores = await f.local.logprobs(prompts.map((p, i) => ({ prompt: p, response: gens[i].tokens })));
    gens.forEach((g, i) => g.logprobs.forEach((lp, k) => expect(Math.abs(lp - scores[i][k])).toBeLessThan(1e-5)));
  });

  it('scores responses like the in-process engine, and refuses temperatures it cannot score', async () => {
    const batch = PROMPTS.map((p, i) => ({
      prompt: f.local.tokenizer.encode(p),
      response: f.local.tokenizer.encode(['go to kitchen<|im_end|>', 'x', 'look around'][i]),
    }));
    const [got, want] = [await remote.logprobs(batch), await f.local.logprobs(batch)];
    expect(got.map((r) => r.length)).toEqual(want.map((r) => r.length));
    got.forEach((r, i) => r.forEach((lp, k) => expect(Math.abs(lp - want[i][k])).toBeLessThan(1e-5)));
    await expect(remote.logprobs(batch, 0.7)).rejects.toThrow(/temperature 0.7 is not possible remotely/);
  });

  it('cannot train or save', async () => {
    await expect(
      remote.trainStep([], { clipLow: 0.2, clipHigh: 0.2, dualClip: null, klCoef: 0, lowProbDelta: null } as never),
    ).rejects.toThrow(/a remote engine cannot train.*memory-only adaptation and evaluation/);
    await expect(remote.save('/tmp/x')).rejects.toThrow(/cannot save weights/);
  });

  it("passes the server's 400 on, naming the field, without retrying", async () => {
    const prompts = [f.local.tokenizer.encode('go')];
    await expect(remote.generate(prompts, { maxTokens: 5000, temperature: 1, topP: 1, seed: 0 })).rejects.toThrow(
      /answered 400: This model's maximum context length is 4096 tokens\..*\(field "prompt"\)/,
    );
    const wrongModel = remoteEngineFromDir(f.modelDir, {
      baseUrl: f.server.url,
      model: 'llama',
      retries: 3,
      warn: (m) => warnings.push(m),
    });
    const before = warnings.length;
    await expect(wrongModel.generate(prompts, { maxTokens: 2, temperature: 1, topP: 1, seed: 0 })).rejects.toThrow(
      /answered 404: model "llama" is not served here/,
    );
    expect(warnings.length).toBe(before); // no retry was announced
  });

  it('evaluates a policy through the server alone, with the same results as in process', async () => {
    const envs: Env[] = [];
    for (let i = 0; i < 2; i++) envs.push(await createEnv(f.cfg.env));
    const tasks = f.cfg.env.tasks!;
    const viaServer = await evaluate(remote, envs, f.cfg, { tasks, iteration: 0 });
    const inProcess = await evaluate(f.local, envs, f.cfg, { tasks, iteration: 0 });
    // Everything but the wall time matches.
    const untimed = (r: typeof viaServer) => ({ ...r, summary: { ...r.summary, seconds: 0 } });
    expect(untimed(viaServer)).toEqual(untimed(inProcess));
    expect(viaServer.summary.episodes).toBe(2);
    expect(viaServer.summary.env_steps).toBeGreaterThan(0);
    await Promise.all(envs.map((e) => e.close()));
  }, 60_000);

  it('empo2 eval --remote prints the same table as evaluating in process', async () => {
    const envs: Env[] = [];
    for (let i = 0; i < 2; i++) envs.push(await createEnv(f.cfg.env));
    const inProcess = await evaluate(f.local, envs, f.cfg, { tasks: f.cfg.env.tasks!, iteration: 0 });
    await Promise.all(envs.map((e) => e.close()));
    const rows = formatEvalTable(inProcess, null)
      .split('\n')
      .filter((l) => l.startsWith('| fetch') || l.startsWith('| **all**'));
    const repoRoot = resolve(import.meta.dirname, '..', '..', '..');
    const sets = ['seed=4', 'env.tasks=[fetch]', 'env.eval_variations=2', 'env.max_steps=4'].flatMap((s) => ['--set', s]);
    const json = join(f.modelDir, 'remote-eval.json');
    const child = spawn(
      process.execPath,
      [join(repoRoot, 'bin', 'empo2.js'), 'eval', f.modelDir, '--remote', f.server.url, '--json', json, ...sets],
      { cwd: repoRoot, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (out += d.toString()));
    const code = await new Promise<number | null>((r) => child.on('exit', (c) => r(c)));
    expect(code, out).toBe(0);
    expect(out).toContain(`evaluating "tiny" served at ${f.server.url}/v1`);
    for (const row of rows) expect(out).toContain(row);
    const record = JSON.parse(readFileSync(json, 'utf8'));
    expect(record).toMatchObject({
      eval_variations: 2,
      episodes: 2,
      mean_score: inProcess.summary.mean_score,
      success_rate: inProcess.summary.success_rate,
    });
  }, 60_000);
});

// ---------------------------------------------------------------------------------------------
// Misbehaving servers
// ---------------------------------------------------------------------------------------------

type Handler = (attempt: number, body: any, req: IncomingMessage, res: ServerResponse) => void;

async function stub(
  handler: Handler,
): Promise<{ url: string; attempts: () => number; inFlightMax: () => number; close: () => Promise<void> }> {
  let attempts = 0;
  let inFlight = 0;
  let inFlightMax = 0;
  const server = createServer(async (req, res) => {
    let text = '';
    for await (const c of req) text += c;
    attempts++;
    inFlight++;
    inFlightMax = Math.max(inFlightMax, inFlight);
    res.on('close', () => inFlight--);
    handler(attempts, text ? JSON.parse(text) : undefined, req, res);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}`,
    attempts: () => attempts,
    inFlightMax: () => inFlightMax,
    close: () =>
      new Promise((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}

function json(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { 'Content-Type': 'application/json' });
  res.end(JSON.stringify(body));
}

/** A well-formed answer: every prompt gets the ids [5, 6] with log-probs -1, -2. */
function answer(body: any): unknown {
  const n = Array.isArray(body.prompt[0]) ? body.prompt.length : 1;
  return {
    choices: Array.from({ length: n }, (_, i) => ({
      index: i,
      text: 'xx',
      finish_reason: 'length',
      token_ids: [5, 6],
      logprobs: { tokens: ['token_id:5', 'token_id:6'], token_logprobs: [-1, -2] },
    })),
  };
}

describe('RemoteEngine against misbehaving servers', () => {
  const tokenizerOf = () => f.local.tokenizer;
  const engineFor = (url: string | string[], extra: Partial<ConstructorParameters<typeof RemoteEngine>[0]> = {}) =>
    new RemoteEngine({
      baseUrl: url,
      model: 'm',
      tokenizer: tokenizerOf(),
      endTokens: [f.local.tokenizer.tokenToId('<|im_end|>')!],
      backoffMs: 10,
      warn: () => {},
      ...extra,
    });
  const OPTS = { maxTokens: 2, temperature: 1, topP: 1, seed: 0 };

  it('retries 5xx answers with backoff and succeeds', async () => {
    const s = await stub((attempt, body, _req, res) =>
      attempt <= 2 ? json(res, 503, { error: { message: 'loading' } }) : json(res, 200, answer(body)),
    );
    const retries: string[] = [];
    const [g] = await engineFor(s.url, { retries: 3, warn: (m) => retries.push(m) }).generate([[1, 2]], OPTS);
    expect(g.tokens).toEqual([5, 6]);
    expect(g.logprobs).toEqual([-1, -2]);
    expect(s.attempts()).toBe(3);
    expect(retries).toHaveLength(2);
    expect(retries[0]).toMatch(/answered 503: loading.*retry 1\/3 in 10 ms/);
    expect(retries[1]).toMatch(/retry 2\/3 in 20 ms/);
    await s.close();
  });

  it('times out a stalled request and retries it', async () => {
    const s = await stub((attempt, body, _req, res) => {
      if (attempt === 1) setTimeout(() => json(res, 200, answer(body)), 2_000);
      else json(res, 200, answer(body));
    });
    const retries: string[] = [];
    const t0 = performance.now();
    const [g] = await engineFor(s.url, { timeoutMs: 200, retries: 1, warn: (m) => retries.push(m) }).generate([[1]], OPTS);
    expect(g.tokens).toEqual([5, 6]);
    expect(performance.now() - t0).toBeLessThan(1_500);
    expect(retries[0]).toMatch(/no answer within 200 ms/);
    await s.close();
  });

  it('gives up after the last retry with the reason', async () => {
    const s = await stub((_a, _b, _req, res) => json(res, 500, { error: { message: 'CUDA out of memory' } }));
    await expect(engineFor(s.url, { retries: 2 }).generate([[1]], OPTS)).rejects.toThrow(
      /failed after 3 attempts: .*answered 500: CUDA out of memory/,
    );
    expect(s.attempts()).toBe(3);
    await s.close();
  });

  it('does not retry a 4xx, and names the field', async () => {
    const s = await stub((_a, _b, _req, res) =>
      json(res, 400, { error: { message: 'bad top_p', type: 'invalid_request_error', param: 'top_p' } }),
    );
    await expect(engineFor(s.url, { retries: 3 }).generate([[1]], OPTS)).rejects.toThrow(/answered 400: bad top_p \(field "top_p"\)/);
    expect(s.attempts()).toBe(1);
    await s.close();
  });

  it('does not follow a redirect to another port: the request fails at once, naming where it pointed, with no retry', async () => {
    const elsewhere = await stub((_a, body, _req, res) => json(res, 200, answer(body)));
    const s = await stub((_a, _b, _req, res) => {
      res.writeHead(307, { Location: `${elsewhere.url}/v1/completions` });
      res.end();
    });
    const retries: string[] = [];
    await expect(engineFor(s.url, { retries: 3, warn: (m) => retries.push(m) }).generate([[1]], OPTS)).rejects.toThrow(
      new RegExp(`answered 307, a redirect to ${elsewhere.url}/v1/completions, outside the base URL ${s.url}/v1: not followed`),
    );
    expect(s.attempts()).toBe(1);
    expect(elsewhere.attempts()).toBe(0);
    expect(retries).toEqual([]);
    await Promise.all([s.close(), elsewhere.close()]);
  });

  it('follows a redirect under the base URL, keeping the method and body', async () => {
    const s = await stub((_a, body, req, res) => {
      if (req.url === '/v1/completions') {
        res.writeHead(308, { Location: '/v1/completions/' });
        res.end();
      } else json(res, 200, { ...(answer(body) as object), method: req.method });
    });
    const [g] = await engineFor(s.url).generate([[1, 2]], OPTS);
    expect(g.tokens).toEqual([5, 6]);
    expect(s.attempts()).toBe(2);
    await s.close();
  });

  it('reports a server that is not there after retrying', async () => {
    const s = await stub(() => {});
    const url = s.url;
    await s.close();
    await expect(engineFor(url, { retries: 1 }).generate([[1]], OPTS)).rejects.toThrow(/failed after 2 attempts: .*ECONNREFUSED/);
  });

  it('falls back to re-encoding the text, with a warning, when the server returns no ids', async () => {
    const s = await stub((_a, _b, _req, res) => json(res, 200, { choices: [{ index: 0, text: 'go to kitchen', finish_reason: 'stop' }] }));
    const warned: string[] = [];
    const engine = engineFor(s.url, { warn: (m) => warned.push(m) });
    const [g] = await engine.generate([[1]], OPTS);
    const imEnd = f.local.tokenizer.tokenToId('<|im_end|>')!;
    expect(g.tokens).toEqual([...f.local.tokenizer.encode('go to kitchen'), imEnd]);
    expect(g.text).toBe('go to kitchen');
    expect(g.logprobs.every(Number.isNaN)).toBe(true);
    expect(warned.join('\n')).toMatch(/returned no token ids.*re-encoding the response text/);
    expect(warned.join('\n')).toMatch(/no per-token log-probs/);
    await engine.generate([[1]], OPTS);
    expect(warned).toHaveLength(2); // once per problem, not per call
    await s.close();
  });

  it('keeps at most `concurrency` requests in flight and sends per-prompt constraints as vLLM fields', async () => {
    const bodies: any[] = [];
    const s = await stub((_a, body, _req, res) => {
      bodies.push(body);
      setTimeout(() => json(res, 200, answer(body)), 50);
    });
    // The request shapes alone: rescoring (an echo request after the constrained one) is vllm-fixtures.test.ts's.
    const engine = engineFor(s.url, { concurrency: 2, promptsPerRequest: 2, constraint: 'structured_outputs', rescoreConstrained: false });
    const prompts = [[1], [2], [3], [4], [5], [6]];
    const gens = await engine.generate(prompts, { ...OPTS, allowedTexts: [null, ['a', 'b'], null, null, null, null] });
    expect(gens).toHaveLength(6);
    expect(s.inFlightMax()).toBe(2);
    // [1] | [2] alone (constrained) | [3, 4] | [5, 6]
    expect(bodies.map((b) => b.prompt).sort()).toEqual([[1], [2], [[3], [4]], [[5], [6]]].sort());
    const constrained = bodies.find((b) => b.structured_outputs);
    expect(constrained).toMatchObject({ prompt: [2], structured_outputs: { choice: ['a', 'b'] } });
    expect(bodies.filter((b) => b.seed === 0)).toHaveLength(1); // only the first request keeps the caller's seed
    expect(new Set(bodies.map((b) => b.seed)).size).toBe(4);
    await s.close();
  });

  it('a constraint with free values goes to vLLM as its grammar (structured_outputs.grammar, guided_grammar); allowed_texts refuses it', async () => {
    const end = f.local.tokenizer.tokenToId('<|im_end|>')!;
    const finite = toolCallConstraint({
      tools: [{ name: 'act', parameters: ACT }],
      choice: 'required',
      parser: 'hermes',
      tokenizer: f.local.tokenizer,
      endTokens: [end],
    });
    const free = toolCallConstraint({
      tools: [{ name: 'say', parameters: { type: 'object', properties: { text: { type: 'string' } }, required: ['text'] } }],
      choice: 'required',
      parser: 'hermes',
      tokenizer: f.local.tokenizer,
      endTokens: [end],
    });
    for (const [field, key] of [
      ['structured_outputs', 'structured_outputs'],
      ['guided_choice', 'guided_grammar'],
    ] as const) {
      const bodies: any[] = [];
      const s = await stub((_a, body, _req, res) => {
        bodies.push(body);
        json(res, 200, answer(body));
      });
      const engine = engineFor(s.url, { constraint: field, rescoreConstrained: false });
      await engine.generate([[1], [2], [3]], { ...OPTS, constraints: [null, finite, free] });
      expect(bodies.map((b) => b.prompt).sort()).toEqual([[1], [2], [3]].sort());
      const byPrompt = (p: number) => bodies.find((b) => JSON.stringify(b.prompt) === JSON.stringify([p]));
      if (field === 'structured_outputs') {
        expect(byPrompt(2).structured_outputs).toEqual({ choice: finite.finiteTexts() });
        expect(byPrompt(3).structured_outputs).toEqual({ grammar: free.grammar() });
      } else {
        expect(byPrompt(2).guided_choice).toEqual(finite.finiteTexts());
        expect(byPrompt(3)[key]).toBe(free.grammar());
      }
      expect(byPrompt(3)[key === 'guided_grammar' ? key : 'structured_outputs']).toBeDefined();
      expect(byPrompt(1).structured_outputs ?? byPrompt(1).guided_choice ?? byPrompt(1).guided_grammar).toBeUndefined();
      await s.close();
    }
    await expect(engineFor('http://127.0.0.1:9').generate([[1]], { ...OPTS, constraints: [free] })).rejects.toThrow(
      /constraints\[0\] allows free values .*constraint "allowed_texts" .*structured_outputs/,
    );
    await expect(engineFor('http://127.0.0.1:9', { constraint: 'none' }).generate([[1]], { ...OPTS, constraints: [free] })).rejects.toThrow(
      /constraint "none"/,
    );
  });

  it('refuses constrained generation when the server cannot constrain', async () => {
    const engine = engineFor('http://127.0.0.1:9', { constraint: 'none' });
    await expect(engine.generate([[1]], { ...OPTS, allowedTexts: [['a']] })).rejects.toThrow(/constraint "none"/);
  });

  it('a server that dies: a line says so, its rows go to the other server and sample as the in-process engine would', async () => {
    const dead = await stub(() => {});
    await dead.close();
    const warned: string[] = [];
    const live = await startServer({ engine: (await loadServedModel(f.modelDir)).engine, modelName: 'm', port: 0 });
    try {
      const engine = engineFor([dead.url, live.url], { retries: 0, warn: (m) => warned.push(m) });
      const prompts = PROMPTS.map((p) => f.local.tokenizer.encode(p));
      const opts = { maxTokens: 6, temperature: 1, topP: 1, seed: 77 };
      expectSameGenerations(await engine.generate(prompts, opts), await f.local.generate(prompts, opts));
      expect(warned.join('\n')).toMatch(new RegExp(`${dead.url}/v1 is out of the rollout servers \\(.*ECONNREFUSED.*\\); 1 of 2 left`));
      expect(engine.serverStates().map((s) => s.down === null)).toEqual([false, true]);
      expect(warned).toHaveLength(1); // the dead server is not tried again
      await engine.generate(prompts, opts);
      expect(warned).toHaveLength(1);
    } finally {
      await live.close();
      live.queue.current.engine.dispose();
    }
  });

  it('requests waiting for a server that meanwhile left the pool go to another without trying it', async () => {
    const failing = await stub((_a, _b, _req, res) => setTimeout(() => json(res, 503, { error: { message: 'down' } }), 30));
    const healthy = await stub((_a, body, _req, res) => json(res, 200, answer(body)));
    const engine = engineFor([failing.url, healthy.url], { retries: 0, concurrency: 1 });
    // Rows 0 and 2 queue on the first server (fewest in flight, first of equals), row 1 on the second.
    const gens = await engine.generate([[1], [2], [3]], OPTS);
    expect(gens.map((g) => g.tokens)).toEqual([
      [5, 6],
      [5, 6],
      [5, 6],
    ]);
    expect(failing.attempts()).toBe(1);
    expect(healthy.attempts()).toBe(3);
    await Promise.all([failing.close(), healthy.close()]);
  });

  it('no server left: rows come back as engine errors (onServerLoss "error") or fail the call (the default)', async () => {
    const a = await stub((_a, _b, _req, res) => json(res, 503, { error: { message: 'overloaded' } }));
    const b = await stub((_a, _b, _req, res) => res.destroy());
    const urls = [a.url, b.url];
    const gens = await engineFor(urls, { retries: 1, onServerLoss: 'error' }).generate([[1], [2], [3]], OPTS);
    expect(gens.map((g) => g.tokens)).toEqual([[], [], []]);
    for (const g of gens) expect(g.error).toMatch(/no rollout server is left .*503: overloaded/);
    await expect(engineFor(urls, { retries: 0 }).generate([[1]], OPTS)).rejects.toThrow(/no rollout server is left/);
    // A 4xx is the request's fault: thrown as it is, the servers stay in the pool.
    const refusing = await stub((_a, _b, _req, res) => json(res, 400, { error: { message: 'bad prompt', param: 'prompt' } }));
    const engine = engineFor([refusing.url, b.url], { retries: 0 });
    await expect(engine.generate([[1]], OPTS)).rejects.toThrow(/answered 400: bad prompt/);
    expect(engine.serverStates()[0].down).toBeNull();
    await Promise.all([a.close(), b.close(), refusing.close()]);
  });

  it('checks its options', () => {
    expect(() => engineFor('localhost:8000')).toThrow(/must start with http/);
    expect(() => engineFor(['http://a:1', 'http://a:1/v1'])).toThrow(/http:\/\/a:1\/v1 is given twice/);
    expect(() => engineFor('http://x', { retries: -1 })).toThrow(/retries must be a whole number/);
    expect(() => engineFor('http://x', { timeoutMs: 0 })).toThrow(/timeoutMs must be a positive number/);
  });
});
