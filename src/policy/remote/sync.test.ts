/**
 * Training with LoRA while two `empo2 serve` processes generate the rollouts (rollout.remote with
 * two base URLs, sync: lora): after every update the trainer pushes its PEFT adapter through vLLM's
 * runtime LoRA routes and the rollouts name it as their model. Killed after the first iteration, one
 * server drops out with a log line and the other takes its rows; every iteration, before and after,
 * samples what the run that generates in process samples and trains to the same adapters (to the last
 * bits of a one-row pass against a batched one). Also the sync's answers to servers without the
 * routes, or that refuse the adapter.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawn, type ChildProcess } from 'node:child_process';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { TINY_MODEL } from '../../../test/support/tiny.ts';
import { loadConfig } from '../../config/load.ts';
import { initBackend } from '../tfjs/backend.ts';
import { readSafetensors, toFloat32 } from '../safetensors.ts';
import { latestCheckpoint } from '../../run/checkpoint.ts';
import { createEngine } from '../create-engine.ts';
import { environmentCorpus } from '../../envs/index.ts';
import { train } from '../../trainer/trainer.ts';
import { RemoteEngine } from './engine.ts';
import { WeightSync } from './sync.ts';
import { comparableTrainLines } from '../../../test/support/train-lines.ts';

const REPO = resolve(import.meta.dirname, '..', '..', '..');
const KEY = 'sync-test-key';
const root = mkdtempSync(join(tmpdir(), 'empo2-sync-'));
const modelDir = join(root, 'initial');
const servers: { url: string; child: ChildProcess; log: string[] }[] = [];

/** `empo2 serve` as a process of its own, on a free port, taking weights and adapters from under root. */
async function serve(): Promise<{ url: string; child: ChildProcess; log: string[] }> {
  const child = spawn(
    process.execPath,
    [join(REPO, 'bin', 'empo2.js'), 'serve', modelDir, '--port', '0', '--allow-weight-updates', '--weights-root', root],
    { cwd: REPO, env: { ...process.env, EMPO2_API_KEY: KEY }, stdio: ['ignore', 'pipe', 'pipe'] },
  );
  const log: string[] = [];
  child.stderr!.on('data', (d: Buffer) => log.push(d.toString()));
  const url = await new Promise<string>((ok, fail) => {
    child.stdout!.on('data', (d: Buffer) => {
      const m = /at (http:\/\/\S+)\/v1/.exec(d.toString());
      if (m) ok(m[1]);
    });
    child.on('exit', (code) => fail(new Error(`empo2 serve exited (${code}): ${log.join('')}`)));
  });
  return { url, child, log };
}

const cfg = (dir: string, remote: string | null) =>
  loadConfig(null, [
    `run_dir=${dir}`,
    'seed=3',
    `model.path=${modelDir}`,
    'model.lora={r: 4, alpha: 8, dropout: 0, target_modules: [q_proj, v_proj, down_proj]}',
    'optim.lr=0.01',
    'env.tasks=[fetch]',
    'env.eval_variations=1',
    'env.max_steps=5',
    'rollout.tasks_per_batch=2',
    'rollout.group_size=2',
    // The servers keep no episode caches: the in-process run recomputes prompts too (remote-rollouts.test.ts).
    'rollout.reuse_prefix=false',
    ...(remote ? [`rollout.remote=${remote}`] : []),
    'train.iterations=3',
    'train.checkpoint_every=3',
    'train.eval_every=0',
  ]);

beforeAll(async () => {
  await initBackend();
  const tiny = loadConfig(null, [`run_dir=${join(root, 'x')}`, 'seed=2', ...TINY_MODEL, 'env.tasks=[fetch]']);
  const { engine } = await createEngine(tiny, 'fresh', () => environmentCorpus(tiny.env));
  await engine.save(modelDir);
  engine.dispose();
  servers.push(await serve(), await serve());
}, 120_000);
afterAll(() => {
  for (const s of servers) s.child.kill('SIGKILL');
  rmSync(root, { recursive: true, force: true });
});

const adapterOf = (run: string) => readSafetensors(join(latestCheckpoint(run)!, 'adapter', 'adapter_model.safetensors')).tensors;

describe('LoRA sync to two empo2 serve processes (rollout.remote.sync: lora)', () => {
  it('3 iterations sample and train as the in-process run, one server killed after the first', async () => {
    const local = join(root, 'local');
    await train(cfg(local, null), { resume: false, log: () => {} });
    const remote = join(root, 'remote');
    const lines: string[] = [];
    process.env.EMPO2_API_KEY = KEY;
    try {
      const urls = servers.map((s) => `"${s.url}"`).join(', ');
      await train(cfg(remote, `{base_url: [${urls}], sync: lora, retries: 0}`), {
        resume: false,
        log: (l) => {
          lines.push(l);
          if (/^iter 1\b/.test(l)) servers[0].child.kill('SIGKILL');
        },
      });
    } finally {
      delete process.env.EMPO2_API_KEY;
    }
    const log = lines.join('\n');
    expect(log).toContain(
      `rollouts through ${servers[0].url}, ${servers[1].url} (weights after every update: the LoRA adapter pushed as "empo2-remote")`,
    );
    expect(log).toMatch(new RegExp(`${servers[0].url}/v1 is out of the rollout servers \\(.*\\); 1 of 2 left`));
    // Both took adapters through the LoRA routes (the second after every update), and both sampled.
    for (const s of servers) expect(s.log.join('')).toMatch(/loaded LoRA adapter "empo2-remote" from .*rollout-policy\/adapter/);
    expect(servers[1].log.join('').match(/\bloaded LoRA adapter/g)!.length).toBe(4); // the first sync and one per update
    // The same samples, scores and counts; log-probs from a one-row pass on a server differ from those of
    // the in-process batched pass in the last bits (measured: 3e-8 relative at most), and so what follows.
    const [a, b] = [comparableTrainLines(local), comparableTrainLines(remote)];
    expect(a.some((l) => (l.trained_tokens as number) > 0)).toBe(true);
    expect(b.length).toBe(a.length);
    a.forEach((line, i) => {
      for (const [key, v] of Object.entries(line)) {
        if (typeof v !== 'number' || Number.isInteger(v)) expect(b[i][key], key).toEqual(v);
        else expect(Math.abs((b[i][key] as number) - v), key).toBeLessThanOrEqual(1e-6 * Math.max(1, Math.abs(v)));
      }
    });
    const [wa, wb] = [adapterOf(local), adapterOf(remote)];
    for (const [k, t] of wa) {
      const [x, y] = [toFloat32(t), toFloat32(wb.get(k)!)];
      expect(Math.max(...x.map((v, j) => Math.abs(v - y[j]))), k).toBeLessThan(1e-6);
    }
  }, 300_000);

  it('a server without the LoRA routes, or that refuses the adapter, leaves the pool with the reason; none taking it fails the sync', async () => {
    const stub = createServer((req, res) => {
      res.writeHead(404, { 'Content-Type': 'application/json' });
      res.end(JSON.stringify({ detail: 'Not Found' })); // FastAPI's answer for a route that is not there
    });
    await new Promise<void>((r) => stub.listen(0, '127.0.0.1', r));
    const stubUrl = `http://127.0.0.1:${(stub.address() as AddressInfo).port}`;
    const warned: string[] = [];
    const engine = new RemoteEngine({
      baseUrl: [stubUrl, servers[1].url],
      tokenizer: { encode: () => [], decode: () => '', vocabSize: 300 } as never,
      endTokens: [1],
      warn: (m) => warned.push(m),
    });
    const sync = new WeightSync(engine, {
      kind: 'lora',
      loraName: 'probe',
      http: { timeoutMs: 10_000, retries: 0, backoffMs: 10, apiKey: KEY },
    });
    const adapter = join(root, 'remote', 'rollout-policy');
    await sync.push(adapter);
    expect(warned.join('\n')).toMatch(
      /is out of the rollout servers \(weight sync failed: .* has no runtime LoRA routes .*VLLM_ALLOW_RUNTIME_LORA_UPDATING/,
    );
    expect(engine.serverStates().map((s) => s.down === null)).toEqual([false, true]);
    expect(await engine.model()).toBe('probe');
    await expect(sync.push(modelDir)).rejects.toThrow(/holds no PEFT adapter \(adapter_config.json\).*model.lora/);
    const outside = new WeightSync(engine, {
      kind: 'lora',
      loraName: 'probe',
      http: { timeoutMs: 10_000, retries: 0, backoffMs: 10, apiKey: 'wrong' },
    });
    await expect(outside.push(adapter)).rejects.toThrow(/no rollout server took the weights .*401/s);
    await new Promise<void>((r) => stub.close(() => r()));
  });
});
