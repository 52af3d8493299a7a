/**
 * `empo2 serve`'s runtime LoRA routes, which follow vLLM's (./lora.ts): load, name the adapter as the
 * request's model, reload in place, unload; the answers and error forms vLLM gives; and generation
 * with an adapter equal to the in-process engine carrying the same adapter.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { tf } from '../policy/tfjs/backend.ts';
import { readLoraAdapter, saveLoraAdapter } from '../policy/tfjs/lora.ts';
import { loadServedModel, readServedAdapter } from './load.ts';
import { startServedFixture, type ServedFixture } from '../../test/support/served-fixture.ts';

const KEY = 'lora-test-key';
const roots = mkdtempSync(join(tmpdir(), 'empo2-lora-'));
let f: ServedFixture;

/** Writes an adapter whose B is random (PEFT starts it at zero, which would change nothing) from the local engine's model. */
async function writeAdapter(dir: string, seed: number): Promise<void> {
  const model = f.local.model;
  const adapters = model.attachLora({ r: 2, alpha: 4, dropout: 0, targetModules: ['q_proj', 'v_proj'] }, seed);
  for (const { B } of adapters.modules.values()) B.assign(tf.randomNormal(B.shape, 0, 0.5, 'float32', seed));
  await saveLoraAdapter(dir, model);
  model.setLora(null);
}

beforeAll(async () => {
  f = await startServedFixture('tiny', {
    apiKey: KEY,
    loadWeights: { roots: [roots], load: loadServedModel, readAdapter: readServedAdapter },
  });
  await writeAdapter(join(roots, 'a'), 3);
  await writeAdapter(join(roots, 'b'), 8);
}, 60_000);
afterAll(async () => {
  await f?.close();
  rmSync(roots, { recursive: true, force: true });
});

async function post(path: string, body: unknown): Promise<{ status: number; text: string; type: string | null }> {
  const res = await fetch(f.server.url + path, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${KEY}` },
    body: JSON.stringify(body),
  });
  return { status: res.status, text: await res.text(), type: res.headers.get('content-type') };
}

const errorOf = (r: { text: string }) => JSON.parse(r.text).error as { message: string; type: string; param: string | null; code: unknown };

const PROMPT = [5, 17, 42, 9, 3];
const SAMPLING = { maxTokens: 8, temperature: 1, topP: 1, seed: 21 };

/** The server's completion for PROMPT under `model`, as tokens and log-probs. */
async function complete(model: string) {
  const r = await post('/v1/completions', { model, prompt: PROMPT, max_tokens: 8, temperature: 1, seed: 21, logprobs: 0 });
  expect(r.status, r.text).toBe(200);
  const json = JSON.parse(r.text);
  expect(json.model).toBe(model);
  return { tokens: json.choices[0].token_ids as number[], logprobs: json.choices[0].logprobs.token_logprobs as number[] };
}

/** The in-process engine's completion for PROMPT with the adapter in `dir` attached (null: the base). */
async function local(dir: string | null) {
  const model = f.local.model;
  if (dir) model.setLora(readLoraAdapter(dir, model));
  try {
    const [g] = await f.local.generate([PROMPT], SAMPLING);
    return { tokens: g.tokens, logprobs: g.logprobs };
  } finally {
    model.setLora(null);
  }
}

function expectSame(a: { tokens: number[]; logprobs: number[] }, b: typeof a): void {
  expect(a.tokens).toEqual(b.tokens);
  a.logprobs.forEach((lp, k) => expect(Math.abs(lp - b.logprobs[k])).toBeLessThan(1e-5));
}

describe("empo2 serve: vLLM's runtime LoRA routes", () => {
  it('loads an adapter, lists it, and samples with it when a request names it as its model; the base name keeps the base', async () => {
    const r = await post('/v1/load_lora_adapter', { lora_name: 'policy', lora_path: join(roots, 'a') });
    expect(r).toMatchObject({ status: 200, text: "Success: LoRA adapter 'policy' added successfully." });
    expect(r.type).toMatch(/^text\/plain/);
    const models = (await (await fetch(f.server.url + '/v1/models', { headers: { Authorization: `Bearer ${KEY}` } })).json()) as any;
    expect(models.data.map((m: { id: string }) => m.id)).toEqual(['tiny', 'policy']);
    expect(models.data[1]).toMatchObject({ root: join(roots, 'a'), parent: 'tiny' });
    const withAdapter = await complete('policy');
    expectSame(withAdapter, await local(join(roots, 'a')));
    expectSame(await complete('tiny'), await local(null));
    expect(withAdapter.tokens).not.toEqual((await local(null)).tokens); // the adapter does change the policy
  });

  it('refuses a second load under the same name unless load_inplace, which replaces the weights', async () => {
    const again = await post('/v1/load_lora_adapter', { lora_name: 'policy', lora_path: join(roots, 'b') });
    expect(again.status).toBe(400);
    expect(errorOf(again)).toMatchObject({
      type: 'InvalidUserInput',
      code: 400,
      message: "The lora adapter 'policy' has already been loaded. If you want to load the adapter in place, set 'load_inplace' to True.",
    });
    const inPlace = await post('/v1/load_lora_adapter', { lora_name: 'policy', lora_path: join(roots, 'b'), load_inplace: true });
    expect(inPlace.status).toBe(200);
    expectSame(await complete('policy'), await local(join(roots, 'b')));
  });

  it('loads a second adapter while the first is on the model from the last request; each request gets its own', async () => {
    await complete('policy'); // 'policy' (b) stays attached after its request
    const other = await post('/v1/load_lora_adapter', { lora_name: 'other', lora_path: join(roots, 'a') });
    expect(other.status, other.text).toBe(200);
    expectSame(await complete('other'), await local(join(roots, 'a')));
    expectSame(await complete('policy'), await local(join(roots, 'b')));
    expect((await post('/v1/unload_lora_adapter', { lora_name: 'other' })).status).toBe(200);
  });

  it('answers bad loads as vLLM does, naming the field', async () => {
    const cases: [unknown, number, string, string | null][] = [
      [{ lora_name: 'x' }, 400, "Both 'lora_name' and 'lora_path' must be provided.", 'lora_path'],
      [{ lora_name: '', lora_path: join(roots, 'a') }, 400, "Both 'lora_name' and 'lora_path' must be provided.", 'lora_name'],
      [
        { lora_name: 'x', lora_path: join(roots, 'nope') },
        404,
        `Loading lora x failed: No adapter found for ${join(roots, 'nope')}`,
        'lora_path',
      ],
      // Outside the weight roots reads as absent: a client learns nothing about the file system.
      [{ lora_name: 'x', lora_path: f.modelDir }, 404, `Loading lora x failed: No adapter found for ${f.modelDir}`, 'lora_path'],
      [{ lora_name: 'x', lora_path: roots }, 400, 'Loading lora x failed:', 'lora_path'],
      [{ lora_name: 'tiny', lora_path: join(roots, 'a') }, 400, '"tiny" is the base model\'s name', 'lora_name'],
      [{ lora_name: 'x', lora_path: join(roots, 'a'), rank: 4 }, 400, 'unknown field "rank"', 'rank'],
    ];
    for (const [body, status, message, param] of cases) {
      const r = await post('/v1/load_lora_adapter', body);
      expect(r.status, JSON.stringify(body)).toBe(status);
      expect(errorOf(r).message).toContain(message);
      expect(errorOf(r).param).toBe(param);
    }
  });

  it('unloads: the name is gone from requests and the list; unloading it again is a 404', async () => {
    expect(await post('/v1/unload_lora_adapter', { lora_name: 'policy' })).toMatchObject({
      status: 200,
      text: "Success: LoRA adapter 'policy' removed successfully.",
    });
    const gone = await post('/v1/completions', { model: 'policy', prompt: PROMPT, max_tokens: 2 });
    expect(gone.status).toBe(404);
    expect(errorOf(gone).param).toBe('model');
    const again = await post('/v1/unload_lora_adapter', { lora_name: 'policy' });
    expect(again.status).toBe(404);
    expect(errorOf(again)).toMatchObject({ type: 'NotFoundError', message: "The lora adapter 'policy' cannot be found." });
    const noName = await post('/v1/unload_lora_adapter', {});
    expect(errorOf(noName).message).toBe("'lora_name' needs to be provided to unload a LoRA adapter.");
  });

  it('a server without weight updates has no LoRA routes (vLLM without VLLM_ALLOW_RUNTIME_LORA_UPDATING neither)', async () => {
    const plain = await startServedFixture('tiny');
    try {
      const r = await fetch(plain.server.url + '/v1/load_lora_adapter', {
        method: 'POST',
        headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ lora_name: 'a', lora_path: join(roots, 'a') }),
      });
      expect(r.status).toBe(404);
      expect(((await r.json()) as any).error.message).toMatch(/runtime LoRA adapters need --allow-weight-updates/);
    } finally {
      await plain.close();
    }
  });
});
