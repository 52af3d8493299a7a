/**
 * `empo2 serve` over HTTP against the in-process engine loaded from the same model directory:
 * same seed, same tokens and log-probs; OpenAI response shapes; errors that name the field;
 * batching of waiting requests; and the CLI starting, answering and stopping.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawn } from 'node:child_process';
import { join, resolve } from 'node:path';
import type { GenerateOptions, Generation, PolicyEngine } from '../policy/types.ts';
import { renderChatML } from './chat.ts';
import { EngineQueue } from './queue.ts';
import { startServedFixture, type ServedFixture } from '../../test/support/served-fixture.ts';

let f: ServedFixture;
beforeAll(async () => {
  f = await startServedFixture('tiny');
}, 60_000);
afterAll(async () => f?.close());

async function post(path: string, body: unknown): Promise<{ status: number; json: any }> {
  const res = await fetch(f.server.url + path, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  return { status: res.status, json: await res.json() };
}

const CHAT_PROMPT = '<|im_start|>user\nTask: Find the yellow hat.\nYou are in the hall.<|im_end|>\n<|im_start|>assistant\n';

describe('empo2 serve', () => {
  it('lists the served model', async () => {
    const res = await fetch(f.server.url + '/v1/models');
    const json = (await res.json()) as any;
    expect(res.status).toBe(200);
    expect(json.object).toBe('list');
    expect(json.data).toHaveLength(1);
    expect(json.data[0]).toMatchObject({ id: 'tiny', object: 'model', owned_by: 'empo2', max_model_len: 4096 });
  });

  it('completes a text prompt with the same tokens and log-probs as the in-process engine', async () => {
    const { status, json } = await post('/v1/completions', {
      model: 'tiny',
      prompt: CHAT_PROMPT,
      max_tokens: 12,
      temperature: 0.8,
      top_p: 0.95,
      seed: 11,
      logprobs: 0,
      return_token_ids: true,
    });
    expect(status).toBe(200);
    const ids = f.local.tokenizer.encode(CHAT_PROMPT);
    const [g] = await f.local.generate([ids], { maxTokens: 12, temperature: 0.8, topP: 0.95, seed: 11 });
    const c = json.choices[0];
    expect(json.object).toBe('text_completion');
    expect(c.token_ids).toEqual(g.tokens);
    expect(c.prompt_token_ids).toEqual(ids);
    expect(c.text).toBe(g.text);
    expect(c.finish_reason).toBe(g.finish);
    expect(c.logprobs.token_logprobs).toHaveLength(g.tokens.length);
    c.logprobs.token_logprobs.forEach((lp: number, i: number) => expect(lp).toBeCloseTo(g.logprobs[i], 5));
    expect(c.logprobs.tokens).toEqual(g.tokens.map((t) => f.local.tokenizer.decode([t])));
    expect(json.usage).toEqual({
      prompt_tokens: ids.length,
      completion_tokens: g.tokens.length,
      total_tokens: ids.length + g.tokens.length,
    });
  });

  it('takes a batch of token-id prompts in one call and labels tokens "token_id:N" on request', async () => {
    const prompts = ['Task: open the red box.', 'go to kitchen', CHAT_PROMPT].map((t) => f.local.tokenizer.encode(t));
    const { json } = await post('/v1/completions', {
      prompt: prompts,
      max_tokens: 6,
      seed: 3,
      logprobs: 0,
      return_tokens_as_token_ids: true,
    });
    const gens = await f.local.generate(prompts, { maxTokens: 6, temperature: 1, topP: 1, seed: 3 });
    expect(json.choices.map((c: any) => c.index)).toEqual([0, 1, 2]);
    json.choices.forEach((c: any, i: number) => {
      expect(c.token_ids).toEqual(gens[i].tokens);
      expect(c.logprobs.tokens).toEqual(gens[i].tokens.map((t) => `token_id:${t}`));
    });
    // A single token-id prompt (a flat array) is one prompt, not a batch.
    const single = await post('/v1/completions', { prompt: prompts[1], max_tokens: 6, seed: 3 });
    const [alone] = await f.local.generate([prompts[1]], { maxTokens: 6, temperature: 1, topP: 1, seed: 3 });
    expect(single.json.choices).toHaveLength(1);
    expect(single.json.choices[0].token_ids).toEqual(alone.tokens);
    expect(single.json.choices[0].logprobs).toBeNull();
  });

  it("echoes prompt log-probs equal to the engine's scores", async () => {
    const ids = f.local.tokenizer.encode(CHAT_PROMPT + 'go to kitchen<|im_end|>');
    const { json } = await post('/v1/completions', { prompt: ids, max_tokens: 0, echo: true, logprobs: 0 });
    const c = json.choices[0];
    const [expected] = await f.local.logprobs([{ prompt: ids.slice(0, 1), response: ids.slice(1) }]);
    expect(c.token_ids).toEqual([]);
    expect(c.text).toBe(f.local.tokenizer.decode(ids));
    expect(c.logprobs.token_logprobs[0]).toBeNull();
    expect(c.logprobs.token_logprobs).toHaveLength(ids.length);
    c.logprobs.token_logprobs.slice(1).forEach((lp: number, i: number) => expect(lp).toBeCloseTo(expected[i], 5));
    expect(c.logprobs.text_offset[1]).toBe(f.local.tokenizer.decode(ids.slice(0, 1)).length);
  });

  it('cuts the returned text at a stop string but returns every sampled id', async () => {
    const ids = f.local.tokenizer.encode(CHAT_PROMPT);
    const [g] = await f.local.generate([ids], { maxTokens: 20, temperature: 1, topP: 1, seed: 8 });
    // A stop string that the unconstrained sample is known to contain.
    const stop = g.text.slice(2, 4);
    expect(stop.length).toBe(2);
    const { json } = await post('/v1/completions', { prompt: ids, max_tokens: 20, seed: 8, stop });
    const [withStop] = await f.local.generate([ids], { maxTokens: 20, temperature: 1, topP: 1, seed: 8, stop: [stop] });
    const c = json.choices[0];
    expect(c.token_ids).toEqual(withStop.tokens);
    expect(c.finish_reason).toBe('stop');
    expect(c.text).toBe(withStop.text.slice(0, withStop.text.indexOf(stop)));
  });

  it('answers chat completions rendered as ChatML, with logprobs content', async () => {
    const messages = [
      { role: 'system', content: 'You are an agent.' },
      {
        role: 'user',
        content: [
          { type: 'text', text: 'Task: Find the yellow hat.' },
          { type: 'text', text: '\nYou are in the hall.' },
        ],
      },
    ];
    const { status, json } = await post('/v1/chat/completions', {
      model: 'tiny',
      messages,
      max_tokens: 10,
      seed: 5,
      temperature: 0.7,
      logprobs: true,
      top_logprobs: 0,
      return_token_ids: true,
    });
    expect(status).toBe(200);
    const text =
      '<|im_start|>system\nYou are an agent.<|im_end|>\n<|im_start|>user\nTask: Find the yellow hat.\nYou are in the hall.<|im_end|>\n<|im_start|>assistant\n';
    expect(renderChatML(messages as any)).toBe(text);
    const ids = f.local.tokenizer.encode(text);
    const [g] = await f.local.generate([ids], { maxTokens: 10, temperature: 0.7, topP: 1, seed: 5 });
    const c = json.choices[0];
    expect(json.object).toBe('chat.completion');
    expect(c.message).toEqual({ role: 'assistant', content: g.text });
    expect(c.token_ids).toEqual(g.tokens);
    expect(c.prompt_token_ids).toEqual(ids);
    expect(c.logprobs.content.map((x: any) => x.logprob)).toEqual(g.logprobs);
    expect(c.logprobs.content[0]).toMatchObject({ token: f.local.tokenizer.decode([g.tokens[0]]), top_logprobs: [] });
  });

  it('constrains chat and completion responses to allowed_texts', async () => {
    const allowed = ['go to kitchen', 'open red box', 'look around'];
    const imEnd = f.local.tokenizer.tokenToId('<|im_end|>');
    for (let seed = 0; seed < 4; seed++) {
      const { json } = await post('/v1/chat/completions', {
        messages: [{ role: 'user', content: 'Task: Find the yellow hat.' }],
        seed,
        max_tokens: 16,
        allowed_texts: allowed,
      });
      const c = json.choices[0];
      expect(allowed).toContain(c.message.content);
      expect(c.finish_reason).toBe('stop');
      expect(c.token_ids[c.token_ids.length - 1]).toBe(imEnd);
    }
    // Per-prompt lists in one completion request, null leaving a prompt free.
    const prompts = [CHAT_PROMPT, CHAT_PROMPT];
    const { json } = await post('/v1/completions', {
      prompt: prompts,
      seed: 1,
      max_tokens: 16,
      allowed_texts: [['inventory', 'read note'], null],
    });
    const ids = prompts.map((p) => f.local.tokenizer.encode(p));
    const gens = await f.local.generate(ids, {
      maxTokens: 16,
      temperature: 1,
      topP: 1,
      seed: 1,
      allowedTexts: [['inventory', 'read note'], null],
    });
    expect(['inventory', 'read note']).toContain(json.choices[0].text);
    expect(json.choices.map((c: any) => c.token_ids)).toEqual(gens.map((g) => g.tokens));
  });

  it.each([
    ['not JSON', '{"prompt": ', 400, null, /not valid JSON/],
    ['a JSON array', '[1, 2]', 400, null, /must be a JSON object/],
    ['no prompt', { max_tokens: 3 }, 400, 'prompt', /"prompt" is required/],
    ['a string temperature', { prompt: 'hi', temperature: 'hot' }, 400, 'temperature', /temperature/],
    [
      'a negative token id',
      {
        prompt: [
          [3, 4],
          [5, -1],
        ],
      },
      400,
      'prompt[1][1]',
      /negative/,
    ],
    [
      'a token id outside the vocabulary',
      {
        prompt: [
          [3, 4],
          [5, 300],
        ],
      },
      400,
      'prompt[1][1]',
      /outside the vocabulary/,
    ],
    ['an empty text prompt', { prompt: ['go', ''] }, 400, 'prompt[1]', /no tokens/],
    ['n = 2', { prompt: 'hi', n: 2 }, 400, 'n', /n = 1/],
    ['streaming', { prompt: 'hi', stream: true }, 400, 'stream', /streaming/],
    ['top alternatives', { prompt: 'hi', logprobs: 5 }, 400, 'logprobs', /logprobs: 0/],
    ['a misspelt field', { prompt: 'hi', allowed_text: ['x'] }, 400, 'allowed_text', /unknown field/],
    ['mismatched allowed lists', { prompt: ['a', 'b'], allowed_texts: [['x']] }, 400, 'allowed_texts', /1 lists but there are 2 prompts/],
    ['a context overflow', { prompt: 'hi', max_tokens: 5000 }, 400, 'max_tokens', /context of 4096/],
    ['another model', { model: 'gpt-4', prompt: 'hi' }, 404, 'model', /not served here/],
  ])('/v1/completions refuses %s', async (_name, body, status, param, message) => {
    const r = await post('/v1/completions', body);
    expect(r.status).toBe(status);
    expect(r.json.error.param).toBe(param);
    expect(r.json.error.message).toMatch(message);
    expect(r.json.error.type).toBe(status === 404 ? 'not_found_error' : 'invalid_request_error');
  });

  it.each([
    [
      'a bad role',
      {
        messages: [
          { role: 'user', content: 'a' },
          { role: 'robot', content: 'b' },
        ],
      },
      'messages[1].role',
    ],
    ['a missing content', { messages: [{ role: 'user' }] }, 'messages[0].content'],
    ['no messages', { messages: [] }, 'messages'],
    ['top_logprobs 3', { messages: [{ role: 'user', content: 'a' }], logprobs: true, top_logprobs: 3 }, 'top_logprobs'],
    ['an empty allowed text', { messages: [{ role: 'user', content: 'a' }], allowed_texts: ['go', ''] }, 'allowed_texts[1]'],
    ['max_tokens 0', { messages: [{ role: 'user', content: 'a' }], max_tokens: 0 }, 'max_tokens'],
  ])('/v1/chat/completions refuses %s', async (_name, body, param) => {
    const r = await post('/v1/chat/completions', body);
    expect(r.status).toBe(400);
    expect(r.json.error.param).toBe(param);
    expect(r.json.error.message).toContain(param);
  });

  it('answers unknown routes with 404 and wrong methods with 405', async () => {
    const missing = await fetch(f.server.url + '/v1/embeddings', { method: 'POST', body: '{}' });
    expect(missing.status).toBe(404);
    expect(((await missing.json()) as any).error.message).toMatch(/no route/);
    const wrong = await fetch(f.server.url + '/v1/completions');
    expect(wrong.status).toBe(405);
    expect(wrong.headers.get('allow')).toBe('POST');
  });

  it('serves concurrent requests, merging unseeded ones that wait together', async () => {
    const before = { ...f.server.queue.stats };
    const bodies = Array.from({ length: 5 }, (_, i) => ({ prompt: `go to kitchen ${i}`, max_tokens: 4, logprobs: 0 }));
    const results = await Promise.all(bodies.map((b) => post('/v1/completions', b)));
    for (const r of results) {
      expect(r.status).toBe(200);
      expect(r.json.choices[0].token_ids.length).toBeGreaterThan(0);
    }
    expect(f.server.queue.stats.generateRequests - before.generateRequests).toBe(5);
    expect(f.server.queue.stats.generateCalls - before.generateCalls).toBeLessThanOrEqual(5);
  });
});

describe('EngineQueue', () => {
  /** Records each generate call; every "sample" is the prompt's first id, so rows can be traced. */
  function recordingEngine(): { engine: PolicyEngine; calls: { prompts: number[][]; opts: GenerateOptions }[] } {
    const calls: { prompts: number[][]; opts: GenerateOptions }[] = [];
    const engine = {
      tokenizer: { encode: () => [], decode: () => '', vocabSize: 10, tokenToId: () => undefined },
      async generate(prompts: number[][], opts: GenerateOptions): Promise<Generation[]> {
        calls.push({ prompts, opts });
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

  it('merges waiting unseeded requests with equal settings, keeps seeded and different ones apart', async () => {
    const { engine, calls } = recordingEngine();
    const q = new EngineQueue({ engine, vocabSize: 10, maxModelLen: 100 });
    const base = { temperature: 1, topP: 1, maxTokens: 4 };
    const results = await Promise.all([
      q.generate([[1], [2]], { ...base, seed: null }),
      q.generate([[3]], { ...base, seed: null, allowedTexts: [['a', 'b']] }),
      q.generate([[4]], { ...base, seed: 7 }),
      q.generate([[5]], { ...base, temperature: 0.5, seed: null }),
      q.generate([[6]], { ...base, seed: null }),
    ]);
    expect(results.map((gs) => gs.map((g) => g.tokens[0]))).toEqual([[1, 2], [3], [4], [5], [6]]);
    expect(calls.map((c) => c.prompts.map((p) => p[0]))).toEqual([[1, 2, 3, 6], [4], [5]]);
    expect(calls[0].opts.allowedTexts).toEqual([null, null, ['a', 'b'], null]);
    expect(calls[1].opts.seed).toBe(7);
    expect(q.stats).toEqual({ generateCalls: 3, generateRequests: 5, cancelledCalls: 0, droppedRequests: 0 });
  });

  it('merges per-row constraints as it merges allowed texts: each row keeps its own', async () => {
    const { engine, calls } = recordingEngine();
    const q = new EngineQueue({ engine, vocabSize: 10, maxModelLen: 100 });
    const base = { temperature: 1, topP: 1, maxTokens: 4, seed: null };
    const c = { allowedAfter: () => [1] };
    await Promise.all([
      q.generate([[1]], base),
      q.generate([[2]], { ...base, constraints: [c] }),
      q.generate([[3], [4]], base),
      q.generate([[5]], { ...base, allowedTexts: [['a']] }),
    ]);
    expect(calls.map((x) => x.prompts.map((p) => p[0]))).toEqual([[1, 2, 3, 4, 5]]);
    expect(calls[0].opts.constraints).toEqual([null, c, null, null, null]);
    expect(calls[0].opts.allowedTexts).toEqual([null, null, null, null, ['a']]);
  });

  it('rejects every request of a failed batch', async () => {
    const engine = { ...recordingEngine().engine, generate: async () => Promise.reject(new Error('out of memory')) };
    const q = new EngineQueue({ engine, vocabSize: 10, maxModelLen: 100 });
    const outcomes = await Promise.allSettled([
      q.generate([[1]], { temperature: 1, topP: 1, maxTokens: 1, seed: null }),
      q.generate([[2]], { temperature: 1, topP: 1, maxTokens: 1, seed: null }),
    ]);
    expect(outcomes.map((o) => o.status)).toEqual(['rejected', 'rejected']);
  });
});

describe('empo2 serve (command line)', () => {
  it('serves a model directory on the port asked for and stops on Ctrl-C', async () => {
    const repoRoot = resolve(import.meta.dirname, '..', '..');
    const child = spawn(
      process.execPath,
      [join(repoRoot, 'bin', 'empo2.js'), 'serve', f.modelDir, '--port', '0', '--served-model-name', 'cli-model'],
      { cwd: repoRoot, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let out = '';
    let err = '';
    child.stderr.on('data', (d: Buffer) => (err += d.toString()));
    const url = await new Promise<string>((resolveUrl, reject) => {
      child.stdout.on('data', (d: Buffer) => {
        out += d.toString();
        const m = /at (http:\/\/127\.0\.0\.1:\d+)\/v1/.exec(out);
        if (m) resolveUrl(m[1]);
      });
      child.on('exit', (code) => reject(new Error(`serve exited with ${code}: ${out}${err}`)));
    });
    const models = (await (await fetch(url + '/v1/models')).json()) as any;
    expect(models.data[0].id).toBe('cli-model');
    const r = await fetch(url + '/v1/chat/completions', {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ messages: [{ role: 'user', content: 'look' }], max_tokens: 3, seed: 1 }),
    });
    expect(r.status).toBe(200);
    const exited = new Promise<number | null>((r2) => child.on('exit', (code) => r2(code)));
    child.kill('SIGINT');
    expect(await exited).toBe(0);
  }, 60_000);

  it('names the problem with a bad path', async () => {
    const repoRoot = resolve(import.meta.dirname, '..', '..');
    const child = spawn(process.execPath, [join(repoRoot, 'bin', 'empo2.js'), 'serve', '/nonexistent/model'], {
      cwd: repoRoot,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let err = '';
    child.stderr.on('data', (d: Buffer) => (err += d.toString()));
    const code = await new Promise<number | null>((r) => child.on('exit', (c) => r(c)));
    expect(code).toBe(1);
    expect(err).toContain('/nonexistent/model does not exist');
  }, 60_000);
});
