/**
 * The weight sync's probe (./sync.ts): after a server takes an adapter it scores a fixed sequence, and
 * its log-probs must be the trainer's within the tolerance. Against `empo2 serve` with the LoRA routes:
 * a server that takes the adapter passes; one that answers "Success" but keeps the adapter it had (a
 * proxy that swallows the load, as a server serving a stale adapter would look) fails the sync, and with
 * no other server the error stops the run.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { tf } from '../tfjs/backend.ts';
import { readLoraAdapter, saveLoraAdapter } from '../tfjs/lora.ts';
import { loadServedModel, readServedAdapter } from '../../serve/load.ts';
import { startServedFixture, type ServedFixture } from '../../../test/support/served-fixture.ts';
import { remoteEngineFromDir } from './index.ts';
import { WeightSync } from './sync.ts';

const KEY = 'probe-test-key';
const roots = mkdtempSync(join(tmpdir(), 'empo2-probe-'));
let f: ServedFixture;
let stale: Server;
let staleUrl: string;

/** An adapter whose B is random (PEFT starts it at zero, which would change nothing). */
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
  // Answers loads and unloads as vLLM does on success, without passing them on; everything else goes to the real server.
  stale = createServer(async (req, res) => {
    const body = await new Promise<string>((ok) => {
      let text = '';
      req.on('data', (d: Buffer) => (text += d.toString()));
      req.on('end', () => ok(text));
    });
    if (req.url?.endsWith('_lora_adapter')) {
      res.writeHead(200, { 'Content-Type': 'text/plain' });
      res.end(`Success: LoRA adapter '${JSON.parse(body).lora_name}' added successfully.`);
      return;
    }
    const answer = await fetch(f.server.url + req.url, {
      method: req.method,
      headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${KEY}` },
      body: body || undefined,
    });
    res.writeHead(answer.status, { 'Content-Type': 'application/json' });
    res.end(await answer.text());
  });
  await new Promise<void>((r) => stale.listen(0, '127.0.0.1', r));
  staleUrl = `http://127.0.0.1:${(stale.address() as AddressInfo).port}`;
}, 60_000);
afterAll(async () => {
  await new Promise<void>((r) => stale?.close(() => r()));
  await f?.close();
  rmSync(roots, { recursive: true, force: true });
});

/** The local engine's log-probs for `seq` with the adapter in `dir` attached. */
async function trainerLogprobs(dir: string, seq: { prompt: number[]; response: number[] }): Promise<number[]> {
  const model = f.local.model;
  model.setLora(readLoraAdapter(dir, model));
  try {
    return (await f.local.logprobs([seq]))[0];
  } finally {
    model.setLora(null);
  }
}

const http = { timeoutMs: 10_000, retries: 0, backoffMs: 10, apiKey: KEY };
const SEQ = { prompt: [5, 17, 42, 9], response: [3, 11, 60, 7, 21, 2] };

describe('the weight sync probe', () => {
  it('passes when the server took the adapter, and fails the sync when it still serves the one before', async () => {
    const sync = (url: string) => {
      const engine = remoteEngineFromDir(f.modelDir, { baseUrl: url, warn: () => {} });
      return { engine, sync: new WeightSync(engine, { kind: 'lora', loraName: 'policy', http }) };
    };
    const [a, b] = [join(roots, 'a'), join(roots, 'b')];
    const [expectA, expectB] = [await trainerLogprobs(a, SEQ), await trainerLogprobs(b, SEQ)];
    // The two adapters score the probe far apart, or the check would prove nothing.
    expect(Math.max(...expectA.map((x, k) => Math.abs(x - expectB[k])))).toBeGreaterThan(0.01);

    const direct = sync(f.server.url);
    await direct.sync.push(a, { sequence: SEQ, expected: expectA, tolerance: 1e-4 });
    await direct.sync.push(b, { sequence: SEQ, expected: expectB, tolerance: 1e-4 });
    expect(direct.engine.serverStates()[0].down).toBeNull();

    // The real server holds b; through the proxy a's load is swallowed, so it still serves b.
    const proxied = sync(staleUrl);
    await expect(proxied.sync.push(a, { sequence: SEQ, expected: expectA, tolerance: 1e-4 })).rejects.toThrow(
      /no rollout server took the weights .*scores the sync probe differently from the trainer: log-prob \S+ against \S+ at response token \d+ \(difference \S+, tolerance 0.0001, rollout.remote.probe_tolerance\).*stale/s,
    );
    expect(proxied.engine.serverStates()[0].down).toMatch(/sync probe/);
    // Without the probe the same stale server would pass unnoticed.
    await proxied.sync.push(a);
  }, 60_000);
});
