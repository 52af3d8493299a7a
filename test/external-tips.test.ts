/**
 * `memory.reflector: openai` end to end: a 2-iteration EMPO² run of the tiny default whose tips are
 * written by a model behind an OpenAI-compatible server this run does not own (`empo2 serve`'s code,
 * started here, behind a proxy that counts what reaches it). The tips it wrote land in the memory,
 * a repeated run asks the server nothing (the cache), and a server that fails in every way leaves a
 * finished run with the skipped tips counted in metrics.jsonl and no request open.
 */
import { createServer, request as httpRequest, type Server } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../src/config/load.ts';
import type { Config } from '../src/config/schema.ts';
import { CACHE_FILE } from '../src/external/cache.ts';
import { oneLineTip } from '../src/memory/external-reflector.ts';
import { MEMORY_FILE, checkpointsDir, latestCheckpoint } from '../src/run/checkpoint.ts';
import { adapt } from '../src/adapt/tips.ts';
import { createEngine } from '../src/policy/create-engine.ts';
import { train } from '../src/trainer/trainer.ts';
import { startServedFixture, type ServedFixture } from './support/served-fixture.ts';
import { TINY_RUN } from './support/tiny.ts';

/** A server in front of another: counts the chat requests and forwards them, or answers them itself with `fault`. */
class Upstream {
  chats = 0;
  open = 0;
  fault: ((n: number, res: import('node:http').ServerResponse) => boolean) | null = null;
  private readonly sockets = new Set<Socket>();
  private readonly server: Server;
  url = '';

  constructor(private readonly target: string | null) {
    this.server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (d: Buffer) => chunks.push(d));
      req.on('end', () => {
        const isChat = req.url?.endsWith('/chat/completions');
        const n = isChat ? this.chats++ : -1;
        this.open++;
        res.on('close', () => this.open--);
        if (isChat && this.fault?.(n, res)) return;
        if (!this.target) return void res.writeHead(500).end('no upstream');
        const to = new URL(req.url!, this.target);
        const out = httpRequest(to, { method: req.method, headers: { ...req.headers, host: to.host } }, (up) => {
          res.writeHead(up.statusCode ?? 502, up.headers);
          up.pipe(res);
        });
        out.on('error', () => res.writeHead(502).end());
        out.end(Buffer.concat(chunks));
      });
    });
    this.server.on('connection', (s) => {
      this.sockets.add(s);
      s.on('close', () => this.sockets.delete(s));
    });
  }

  async listen(): Promise<this> {
    await new Promise<void>((r) => this.server.listen(0, '127.0.0.1', r));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}/v1`;
    return this;
  }

  close(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    return new Promise((r) => this.server.close(() => r()));
  }
}

const root = mkdtempSync(join(tmpdir(), 'empo2-external-tips-'));
let served: ServedFixture;
let proxy: Upstream;

beforeAll(async () => {
  served = await startServedFixture('tiny');
  proxy = await new Upstream(served.server.url).listen();
}, 120_000);
afterAll(async () => {
  await proxy?.close();
  await served?.close();
  rmSync(root, { recursive: true, force: true });
});

function config(runDir: string, writer: string): Config {
  return loadConfig(null, [
    `run_dir=${runDir}`,
    ...TINY_RUN,
    'train.iterations=2',
    'train.checkpoint_every=1',
    'train.eval_every=0',
    'algo.name=empo2',
    'algo.p=1',
    'memory.reflector=openai',
    `memory.reflector_model=${writer}`,
  ]);
}

type Line = Record<string, any> & { type: string };
const trainLines = (dir: string): Line[] =>
  readFileSync(join(dir, 'metrics.jsonl'), 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as Line)
    .filter((l) => l.type === 'train');

function memoryTexts(dir: string): string[] {
  const saved = JSON.parse(readFileSync(join(latestCheckpoint(dir)!, MEMORY_FILE), 'utf8'));
  return Object.values(saved.tips.slots as Record<string, { texts: string[] }>).flatMap((s) => s.texts);
}

describe('memory.reflector: openai', () => {
  it('writes the tips through the served model (training and adapt); a repeated or resumed run is answered from the cache alone', async () => {
    const first = join(root, 'first');
    const writer = `{base_url: "${proxy.url}", model: tiny, temperature: 1}`;
    await train(config(first, writer), { resume: false, log: () => {} });
    const lines = trainLines(first);
    expect(lines).toHaveLength(2);
    for (const l of lines) {
      // 2 tasks x 2 rollouts: one tip asked for per episode.
      expect(l.external.reflector).toMatchObject({ calls: 4, cached: 0, failed: 0, retries: 0 });
      expect(l.external.reflector.completion_tokens).toBeGreaterThan(0);
      expect(l.external.reflector.seconds).toBeGreaterThan(0);
      expect(l.tips_skipped).toBe(0);
      expect(l.tips_added).toBeGreaterThan(0);
    }
    expect(proxy.chats).toBe(8);
    // The tips in memory begin with what the served model answered (on one line, cut to the policy's tokens).
    const answers = readFileSync(join(first, CACHE_FILE), 'utf8')
      .trim()
      .split('\n')
      .map((l) => oneLineTip(JSON.parse(l).text));
    expect(answers).toHaveLength(8);
    const texts = memoryTexts(first);
    expect(texts.length).toBe(lines[1].memory_size);
    for (const t of texts) {
      const tip = t.slice(0, t.indexOf(' The action you took was '));
      expect(tip.length, t).toBeGreaterThan(0);
      expect(
        answers.some((a) => a.startsWith(tip)),
        t,
      ).toBe(true);
    }

    // The same run again in another folder, sharing the first one's cache: nothing reaches the server, and the memory is the same.
    const again = join(root, 'again');
    const cached = `{base_url: "${proxy.url}", model: tiny, temperature: 1, cache_dir: "${first}"}`;
    await train(config(again, cached), { resume: false, log: () => {} });
    expect(proxy.chats).toBe(8);
    for (const l of trainLines(again)) expect(l.external.reflector).toMatchObject({ calls: 4, cached: 4, requests: 0, prompt_tokens: 0 });
    expect(memoryTexts(again)).toEqual(texts);

    // Resumed from iteration 1's checkpoint, the run redoes iteration 2 and its tips come from the cache.
    const checkpoints = checkpointsDir(first);
    const saved = readdirSync(checkpoints)
      .filter((n) => n !== 'latest.json')
      .sort();
    expect(saved).toHaveLength(2);
    rmSync(join(checkpoints, saved[1]), { recursive: true });
    writeFileSync(join(checkpoints, 'latest.json'), JSON.stringify({ checkpoint: saved[0] }));
    await train(config(first, writer), { resume: true, log: () => {} });
    expect(proxy.chats).toBe(8);
    const resumed = trainLines(first);
    expect(resumed).toHaveLength(2);
    expect(resumed[1].external.reflector).toMatchObject({ calls: 4, cached: 4, requests: 0 });
    expect(memoryTexts(first)).toEqual(texts);

    // empo2 adapt with the run's config: the same writer, its cache in the adaptation's folder.
    const checkpoint = latestCheckpoint(first)!;
    const runCfg = config(first, writer);
    const { engine } = await createEngine({ ...runCfg, model: { ...runCfg.model, path: checkpoint } }, 'fresh');
    const out = join(root, 'adapt');
    const adaptLines: string[] = [];
    const trials = await adapt(engine, runCfg, {
      task: 'fetch',
      trials: 2,
      variations: 1,
      split: 'test',
      memoryFrom: checkpoint,
      outDir: out,
      log: (l) => adaptLines.push(l),
    });
    engine.dispose();
    expect(adaptLines[0]).toMatch(/openai \(tiny\) reflector/);
    for (const t of trials) {
      expect(t.external?.reflector).toMatchObject({ calls: 1, failed: 0 });
      expect(t.tips_skipped).toBe(0);
    }
    expect(trials[1].memory_size).toBeGreaterThan(0);
    expect(proxy.chats).toBe(8 + trials.reduce((n, t) => n + t.external!.reflector.requests, 0));
    expect(readFileSync(join(out, CACHE_FILE), 'utf8').trim().split('\n').length).toBe(proxy.chats - 8);
  }, 180_000);

  it('finishes a run whose writer fails in every way, counting the skipped tips and leaving no request open', async () => {
    const broken = await new Upstream(null).listen();
    // Requests in turn: 429 asking for an hour, 500, a 200 that is not JSON, a hang past timeout_s, a connection reset.
    broken.fault = (n, res) => {
      const kind = n % 5;
      if (kind === 0) res.writeHead(429, { 'Retry-After': '3600' }).end('busy');
      else if (kind === 1) res.writeHead(500).end('{"error":{"message":"boom"}}');
      else if (kind === 2) res.writeHead(200, { 'Content-Type': 'application/json' }).end('{"choices": [');
      else if (kind === 4) res.socket?.destroy();
      return true; // kind 3: never answered
    };
    const dir = join(root, 'broken');
    const logged: string[] = [];
    const writer = `{base_url: "${broken.url}", model: tiny, timeout_s: 0.5, max_retries: 1, max_retry_wait_s: 0.2}`;
    await train(config(dir, writer), { resume: false, log: (l) => logged.push(l) });
    const lines = trainLines(dir);
    expect(lines).toHaveLength(2);
    for (const l of lines) {
      expect(l.external.reflector).toMatchObject({ calls: 4, failed: 4, cached: 0 });
      expect(l.tips_skipped).toBe(4);
      expect(l.tips_added).toBe(0);
      expect(l.memory_size).toBe(0);
    }
    expect(logged.some((l) => /reflector model tiny: .*skipped and counted in metrics.jsonl/.test(l))).toBe(true);
    await new Promise((r) => setTimeout(r, 100));
    expect(broken.open).toBe(0);
    await broken.close();

    // Nothing listening at all: the same.
    const down = join(root, 'down');
    await train(config(down, `{base_url: "${broken.url}", model: tiny, max_retries: 1, max_retry_wait_s: 0.1}`), {
      resume: false,
      log: () => {},
    });
    for (const l of trainLines(down))
      expect(l).toMatchObject({ tips_skipped: 4, tips_added: 0, external: { reflector: { failed: 4, requests: 8 } } });
  }, 180_000);
});
