/**
 * `empo2 memory-proxy` as a user runs it: the command in a child process, in front of `empo2 serve`'s
 * tiny model (behind a recorder that keeps every request the upstream gets, and can fail in each way a
 * server does). Episodes are opened by POST /episodes, played with the official OpenAI client, and ended
 * by the reward report; the tips they leave show up in later episodes' requests to the upstream, and
 * in the database after the proxy is SIGKILLed in the middle of 200 concurrent episodes.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createServer, request as httpRequest, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { withMemory } from '../src/index.ts';
import { TipStore } from '../src/memory-proxy/store.ts';
import { renderTipBlock, TIPS_HEADER } from '../src/trainer/prompt.ts';
import { DEFAULT_MEMORY_SETTINGS } from '../src/memory/store.ts';
import { runEmpo2 } from './support/empo2-cli.ts';
import { TINY_MODEL } from './support/tiny.ts';
import { MEMORY_FILE, latestCheckpoint } from '../src/run/checkpoint.ts';
import { startServedFixture, type ServedFixture } from './support/served-fixture.ts';

const REPO_ROOT = resolve(import.meta.dirname, '..');

type Fault = 'none' | '429' | '500' | 'garbage' | 'hang' | 'fast' | 'sse';

/** What the streaming stand-in sends, in three chunks (`empo2 serve` samples before it streams). */
const STREAMED = ['open ', 'the ', 'door'];

/** The tip a stronger writer would give: the untrained tiny model's greedy answer to the reflection prompt is empty (no tip). */
const WRITTEN_TIP = 'Take the key from the table before you try the door.';

/**
 * A server in front of the tiny model: keeps each chat request's body, forwards it, or answers with
 * `fault`; with `writes`, it answers the reflection prompt itself with WRITTEN_TIP.
 */
class Recorder {
  bodies: { messages: { role: string; content: unknown }[] }[] = [];
  fault: Fault = 'none';
  writes = false;
  fastAnswers = 0;
  /** Requests received and not yet closed (answered, or hung up on by the proxy). */
  open = 0;
  private readonly sockets = new Set<Socket>();
  private readonly server: Server;
  url = '';

  constructor(private readonly target: string) {
    this.server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (d: Buffer) => chunks.push(d));
      this.open++;
      res.once('close', () => this.open--);
      req.on('end', () => {
        const raw = Buffer.concat(chunks);
        if (req.url?.endsWith('/chat/completions')) this.bodies.push(JSON.parse(raw.toString()));
        if (this.writes && raw.toString().includes('Reflect on this attempt')) return void this.complete(res, WRITTEN_TIP);
        if (this.answer(res)) return;
        const to = new URL(req.url!, this.target);
        const out = httpRequest(to, { method: req.method, headers: { ...req.headers, host: to.host } }, (up) => {
          res.writeHead(up.statusCode ?? 502, up.headers);
          up.pipe(res);
        });
        out.on('error', () => res.writeHead(502).end());
        out.end(raw);
      });
    });
    this.server.on('connection', (s) => {
      this.sockets.add(s);
      s.on('close', () => this.sockets.delete(s));
    });
  }

  private answer(res: ServerResponse): boolean {
    switch (this.fault) {
      case 'none':
        return false;
      case '429':
        res.writeHead(429, { 'Content-Type': 'application/json', 'Retry-After': '7' }).end('{"error":{"message":"slow down"}}');
        return true;
      case '500':
        res.writeHead(500, { 'Content-Type': 'application/json' }).end('{"error":{"message":"the model crashed"}}');
        return true;
      case 'garbage':
        res.writeHead(200, { 'Content-Type': 'application/json' }).end('{"choices": [tru');
        return true;
      case 'hang':
        return true;
      case 'sse': {
        res.writeHead(200, { 'Content-Type': 'text/event-stream' });
        const chunk = (delta: object) =>
          `data: ${JSON.stringify({ id: 's', object: 'chat.completion.chunk', created: 0, model: 'tiny', choices: [{ index: 0, delta, finish_reason: null }] })}\n\n`;
        let i = 0;
        const next = () => {
          if (i < STREAMED.length) {
            res.write(chunk({ content: STREAMED[i++] }));
            setTimeout(next, 20);
          } else res.end('data: [DONE]\n\n');
        };
        next();
        return true;
      }
      case 'fast':
        this.complete(res, `go north ${this.fastAnswers++}`);
        return true;
    }
  }

  private complete(res: ServerResponse, content: string): void {
    const answer = {
      id: 'x',
      object: 'chat.completion',
      choices: [{ index: 0, message: { role: 'assistant', content }, finish_reason: 'stop' }],
    };
    res.writeHead(200, { 'Content-Type': 'application/json' }).end(JSON.stringify(answer));
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

interface RunningProxy {
  url: string;
  child: ChildProcess;
  stderr: () => string;
  stop(signal?: NodeJS.Signals): Promise<void>;
}

/** `empo2 memory-proxy` in a child process, once it says where it listens. */
function startProxy(args: string[]): Promise<RunningProxy> {
  const child = spawn(process.execPath, [join(REPO_ROOT, 'bin', 'empo2.js'), 'memory-proxy', '--port', '0', ...args], {
    cwd: REPO_ROOT,
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, NO_COLOR: '1' },
  });
  let stdout = '';
  let stderr = '';
  child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
  const exited = new Promise<void>((r) => child.once('exit', () => r()));
  return new Promise((done, fail) => {
    child.stdout!.on('data', (d: Buffer) => {
      stdout += d.toString();
      const m = /memory proxy at (http:\/\/\S+):/.exec(stdout);
      if (m)
        done({
          url: m[1],
          child,
          stderr: () => stderr,
          stop: async (signal = 'SIGTERM') => {
            if (child.exitCode === null && child.signalCode === null) child.kill(signal);
            await exited;
          },
        });
    });
    child.once('exit', (code) => fail(new Error(`memory-proxy exited (${code}) before it listened: ${stderr}`)));
  });
}

/** A port nothing listens on (taken, then let go). */
async function freePort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const { port } = s.address() as AddressInfo;
  await new Promise((r) => s.close(r));
  return port;
}

async function openEpisode(url: string, task: string): Promise<{ id: string; base_url: string; api_key: string }> {
  const r = await fetch(`${url}/episodes`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ task }),
  });
  expect(r.status).toBe(201);
  return (await r.json()) as { id: string; base_url: string; api_key: string };
}

async function reward(ep: { base_url: string; api_key: string }, report: object): Promise<{ status: number; body: any }> {
  const r = await fetch(`${ep.base_url}/empo2/reward`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${ep.api_key}` },
    body: JSON.stringify(report),
  });
  return { status: r.status, body: await r.json() };
}

const OBSERVATION = 'You are in the kitchen. There is a locked door to the north and a key on the table.';

const root = mkdtempSync(join(tmpdir(), 'empo2-memory-proxy-'));
let served: ServedFixture;
let recorder: Recorder;

beforeAll(async () => {
  served = await startServedFixture('tiny');
  recorder = await new Recorder(served.server.url).listen();
}, 120_000);
afterAll(async () => {
  await recorder?.close();
  await served?.close();
  rmSync(root, { recursive: true, force: true });
});

describe('empo2 memory-proxy in front of empo2 serve', () => {
  it('passes calls through, writes a tip at the episode end with the upstream, and shows it in later episodes', async () => {
    const db = join(root, 'tips.db');
    const proxy = await startProxy(['--upstream', recorder.url, '--model', 'tiny', '--memory', db]);
    recorder.writes = true;
    try {
      recorder.bodies = [];
      const first = await openEpisode(proxy.url, 'kitchen');
      const client = new OpenAI({ baseURL: first.base_url, apiKey: first.api_key, maxRetries: 0 });
      const messages = [
        { role: 'system' as const, content: 'You play a text game.' },
        { role: 'user' as const, content: OBSERVATION },
      ];
      const answer = await client.chat.completions.create({ model: 'tiny', messages, max_tokens: 8, temperature: 0 });
      // No tips yet: the upstream got the request exactly as sent.
      expect(recorder.bodies[0]).toEqual({ model: 'tiny', messages, max_tokens: 8, temperature: 0 });
      expect(typeof answer.choices[0].message.content).toBe('string');
      const ended = await reward(first, { score: 40, final_observation: 'The door is still locked.' });
      expect(ended.status).toBe(200);
      expect(ended.body.tips_added, JSON.stringify(ended.body) + proxy.stderr()).toBe(1);
      expect(ended.body.skipped).toBeNull();
      // The writer is the upstream: its reflection request carries the reference's prompt with this trajectory.
      const reflection = recorder.bodies[1].messages[0].content as string;
      expect(reflection).toContain(`you saw "${OBSERVATION}"`);
      expect(reflection).toContain('Final score: 40/100 (not completed)');
      expect(ended.body.tip).toBe(WRITTEN_TIP);

      // The ended episode is gone: its key opens nothing.
      const again = await fetch(`${first.base_url}/models`, { headers: { Authorization: `Bearer ${first.api_key}` } });
      expect(again.status).toBe(404);

      recorder.bodies = [];
      const second = await openEpisode(proxy.url, 'kitchen');
      const client2 = new OpenAI({ baseURL: second.base_url, apiKey: second.api_key, maxRetries: 0 });
      await client2.chat.completions.create({ model: 'tiny', messages, max_tokens: 8 });
      const stored = TipStore.open(db, {
        identity: TipStore.identityOf(db),
        settings: DEFAULT_MEMORY_SETTINGS,
        create: false,
      });
      const tips = stored.newest(10, 'kitchen')[0].tips;
      stored.close();
      expect(tips).toHaveLength(1);
      // One entry per call, as the trainer's default per-step entries: the tip, the action and the episode's score.
      expect(tips[0].text).toBe(
        `${WRITTEN_TIP} The action you took was ${(answer.choices[0].message.content ?? '').trim()}; you finally scored 40/100.`,
      );
      expect(tips[0].score).toBe(40);
      const got = recorder.bodies[0].messages;
      // The tip block, exactly as the trainer renders it, at the end of the last user message; the rest unchanged.
      expect(got[0]).toEqual(messages[0]);
      expect(got[1]).toEqual({ role: 'user', content: OBSERVATION + renderTipBlock([tips[0].text]) });
      // Another task's slot holds no tips: its calls go through unchanged.
      recorder.bodies = [];
      const other = await openEpisode(proxy.url, 'garden');
      await new OpenAI({ baseURL: other.base_url, apiKey: other.api_key, maxRetries: 0 }).chat.completions.create({
        model: 'tiny',
        messages,
        max_tokens: 4,
      });
      expect(JSON.stringify(recorder.bodies[0])).not.toContain(TIPS_HEADER);
    } finally {
      recorder.writes = false;
      await proxy.stop();
    }
  }, 120_000);

  it("passes a streamed answer through as it comes, and records it as the call's action", async () => {
    const db = join(root, 'stream.db');
    const proxy = await startProxy(['--upstream', recorder.url, '--model', 'tiny', '--memory', db, '--reflector', 'summary']);
    recorder.fault = 'sse';
    try {
      const ep = await openEpisode(proxy.url, 'stream');
      const client = new OpenAI({ baseURL: ep.base_url, apiKey: ep.api_key, maxRetries: 0 });
      const stream = await client.chat.completions.create({
        model: 'tiny',
        messages: [{ role: 'user', content: OBSERVATION }],
        max_tokens: 6,
        stream: true,
      });
      let text = '';
      let chunks = 0;
      for await (const chunk of stream) {
        chunks++;
        text += chunk.choices[0]?.delta?.content ?? '';
      }
      expect(chunks).toBe(3);
      expect(text).toBe(STREAMED.join(''));
      const ended = await reward(ep, { score: 20 });
      expect(ended.body.tips_added).toBe(1);
      const store = TipStore.open(db, { identity: TipStore.identityOf(db), settings: DEFAULT_MEMORY_SETTINGS, create: false });
      try {
        const [tip] = store.newest(1, 'stream')[0].tips;
        expect(tip.action).toBe(text.trim());
        expect(tip.text).toContain(`The action you took was ${text.trim()}; you finally scored 20/100.`);
      } finally {
        store.close();
      }
    } finally {
      recorder.fault = 'none';
      await proxy.stop();
    }
  }, 120_000);

  it('answers every upstream fault with a clear error, leaves nothing hanging, and skips a tip the writer could not write', async () => {
    const db = join(root, 'faults.db');
    const proxy = await startProxy(['--upstream', recorder.url, '--model', 'tiny', '--memory', db, '--upstream-timeout', '2']);
    const ask = async (ep: { base_url: string; api_key: string }) => {
      const t0 = Date.now();
      const r = await fetch(`${ep.base_url}/chat/completions`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${ep.api_key}` },
        body: JSON.stringify({ model: 'tiny', messages: [{ role: 'user', content: OBSERVATION }], max_tokens: 4 }),
        signal: AbortSignal.timeout(20_000),
      });
      return { status: r.status, headers: r.headers, body: (await r.json()) as { error: { message: string } }, ms: Date.now() - t0 };
    };
    try {
      const ep = await openEpisode(proxy.url, 'faults');
      recorder.fault = '429';
      const limited = await ask(ep);
      expect(limited.status).toBe(429);
      expect(limited.headers.get('retry-after')).toBe('7');
      expect(limited.body.error.message).toBe(`the upstream ${recorder.url} answered 429: slow down`);
      recorder.fault = '500';
      const crashed = await ask(ep);
      expect(crashed.status).toBe(500);
      expect(crashed.body.error.message).toContain('answered 500: the model crashed');
      recorder.fault = 'garbage';
      const garbage = await ask(ep);
      expect(garbage.status).toBe(502);
      expect(garbage.body.error.message).toContain('answered 200 with a body that is not JSON: {"choices": [tru');
      recorder.fault = 'hang';
      const hung = await ask(ep);
      expect(hung.status).toBe(504);
      expect(hung.body.error.message).toBe(`the upstream ${recorder.url} did not answer within 2 s`);
      expect(hung.ms).toBeLessThan(10_000);
      // An agent that gives up on a hanging call: the proxy hangs up on the upstream too, at once.
      const gaveUp = await fetch(`${ep.base_url}/chat/completions`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${ep.api_key}` },
        body: JSON.stringify({ model: 'tiny', messages: [{ role: 'user', content: OBSERVATION }] }),
        signal: AbortSignal.timeout(300),
      }).catch((e: Error) => e.name);
      expect(gaveUp).toBe('TimeoutError');
      await new Promise((r) => setTimeout(r, 400));
      // Nothing is left open at the upstream: neither the call the proxy timed out nor the one the agent gave up on.
      expect(recorder.open).toBe(0);
      // The writer is the upstream, still hanging: the report is answered, recorded without a tip, and says why.
      const ended = await reward(ep, { reward: 0 });
      expect(ended.status).toBe(200);
      expect(ended.body).toMatchObject({ recorded: true, tips_added: 0, tip: null });
      expect(ended.body.skipped).toContain('the episode made no calls');
      recorder.fault = 'none';

      const closed = await freePort();
      const down = await startProxy(['--upstream', `http://127.0.0.1:${closed}/v1`, '--model', 'tiny', '--memory', join(root, 'down.db')]);
      try {
        const ep2 = await openEpisode(down.url, 'faults');
        const refused = await ask(ep2);
        expect(refused.status).toBe(502);
        expect(refused.body.error.message).toBe(`the upstream http://127.0.0.1:${closed}/v1 could not be reached: ECONNREFUSED`);
      } finally {
        await down.stop();
      }
      const health = (await (await fetch(`${proxy.url}/health`)).json()) as { open_episodes: number; upstream_errors: number };
      expect(health.upstream_errors).toBe(4);
      expect(health.open_episodes).toBe(0);
    } finally {
      recorder.fault = 'none';
      await proxy.stop();
    }
  }, 120_000);

  it('a writer that fails after calls were made: recorded, no tip, skipped says so', async () => {
    const db = join(root, 'writer-fails.db');
    const proxy = await startProxy(['--upstream', recorder.url, '--model', 'tiny', '--memory', db, '--upstream-timeout', '1']);
    try {
      const ep = await openEpisode(proxy.url, 'w');
      const client = new OpenAI({ baseURL: ep.base_url, apiKey: ep.api_key, maxRetries: 0 });
      await client.chat.completions.create({ model: 'tiny', messages: [{ role: 'user', content: OBSERVATION }], max_tokens: 4 });
      recorder.fault = '500';
      const ended = await reward(ep, { score: 10 });
      expect(ended.status).toBe(200);
      expect(ended.body).toMatchObject({ recorded: true, tips_added: 0, tip: null });
      expect(ended.body.skipped).toContain('wrote no tip: its call failed');
      expect(proxy.stderr()).toContain('answered 500');
    } finally {
      recorder.fault = 'none';
      await proxy.stop();
    }
  }, 120_000);

  it('SIGKILLed during 200 concurrent episodes, keeps every tip whose episode was answered as recorded', async () => {
    const db = join(root, 'kill.db');
    recorder.fault = 'fast';
    const proxy = await startProxy(['--upstream', recorder.url, '--model', 'tiny', '--memory', db, '--reflector', 'summary']);
    const recorded = new Set<string>();
    let killed = false;
    const play = async (i: number) => {
      try {
        const ep = await openEpisode(proxy.url, `task-${i % 7}`);
        const client = new OpenAI({ baseURL: ep.base_url, apiKey: ep.api_key, maxRetries: 0 });
        for (let t = 0; t < 3; t++)
          await client.chat.completions.create({
            model: 'tiny',
            messages: [{ role: 'user', content: `Episode ${i}, room ${t}: a door, a key and a lamp.` }],
          });
        const r = await reward(ep, { score: i % 101 });
        if (r.status === 200 && r.body.tips_added > 0) recorded.add(ep.id);
      } catch {
        // the proxy was killed under this episode
      }
    };
    try {
      const all = Promise.all(Array.from({ length: 200 }, (_, i) => play(i)));
      // Kill once some episodes have ended and others are still playing.
      while (recorded.size < 40) await new Promise((r) => setTimeout(r, 5));
      await proxy.stop('SIGKILL');
      killed = true;
      await all;
    } finally {
      recorder.fault = 'none';
      if (!killed) await proxy.stop('SIGKILL');
    }
    expect(recorded.size).toBeGreaterThanOrEqual(40);
    expect(recorded.size).toBeLessThan(200);
    // Reopened after the kill (the write-ahead log is replayed): every recorded episode has its 3 tips.
    const store = TipStore.open(db, { identity: TipStore.identityOf(db), settings: DEFAULT_MEMORY_SETTINGS, create: false });
    try {
      const rows = store.db.prepare<{ episode: string; n: number }>('SELECT episode, COUNT(*) AS n FROM tips GROUP BY episode').all();
      const byEpisode = new Map(rows.map((r) => [r.episode, r.n]));
      for (const id of recorded) expect(byEpisode.get(id), id).toBe(3);
      // An episode is stored whole or not at all: none has part of its tips.
      for (const [id, n] of byEpisode) expect(n, id).toBe(3);
      expect(store.db.prepare<{ ok: string }>('PRAGMA integrity_check').get()!).toEqual({ integrity_check: 'ok' });
    } finally {
      store.close();
    }
  }, 180_000);
});

describe('withMemory in a program', () => {
  it('is the same proxy: an episode from startEpisode, its tips in the store, the counts in stats()', async () => {
    const proxy = await withMemory({
      upstream: { baseURL: recorder.url, model: 'tiny' },
      memory: join(root, 'library.db'),
      reflector: 'summary',
      log: () => undefined,
    });
    try {
      const ep = proxy.startEpisode({ task: 'lib', description: 'Open the door.' });
      expect(ep.baseURL).toBe(`${proxy.url}/episodes/${ep.id}/v1`);
      const client = new OpenAI({ baseURL: ep.baseURL, apiKey: ep.apiKey, maxRetries: 0 });
      await client.chat.completions.create({ model: 'tiny', messages: [{ role: 'user', content: OBSERVATION }], max_tokens: 4 });
      const ended = await reward({ base_url: ep.baseURL, api_key: ep.apiKey }, { reward: 1 });
      expect(ended.body).toMatchObject({ recorded: true, tips_added: 1 });
      // The summary writer's tip for a finished task, stored with the episode's score.
      expect(ended.body.tip).toBe('Done in 1 steps. Seen: kitchen.');
      expect(proxy.store.newest(5, 'lib')[0].tips.map((t) => t.score)).toEqual([100]);
      expect(proxy.stats()).toMatchObject({ tips: 1, calls: 1, calls_with_tips: 0, ended_episodes: 1, open_episodes: 0 });
      // A second episode of the task is shown the tip.
      recorder.bodies = [];
      const next = proxy.startEpisode({ task: 'lib' });
      await new OpenAI({ baseURL: next.baseURL, apiKey: next.apiKey, maxRetries: 0 }).chat.completions.create({
        model: 'tiny',
        messages: [{ role: 'user', content: OBSERVATION }],
        max_tokens: 4,
      });
      expect(recorder.bodies[0].messages[0].content).toContain(`${TIPS_HEADER}\n<tip> Done in 1 steps. Seen: kitchen.`);
      expect(proxy.stats().calls_with_tips).toBe(1);
    } finally {
      await proxy.close();
    }
  }, 60_000);
});

describe('empo2 memory show / export / import', () => {
  it('round-trips a database through a run memory.json', async () => {
    const db = join(root, 'tips.db');
    const shown = await runEmpo2(['memory', 'show', db, '--json']);
    expect(shown.code, shown.stderr).toBe(0);
    const before = JSON.parse(shown.stdout) as {
      total: number;
      embedder: string;
      slots: Record<string, { newest: { text: string; score: number }[] }>;
    };
    expect(before.total).toBe(1);
    expect(before.embedder).toBe('hashed-ngram-1024');
    const out = join(root, 'memory.json');
    const exported = await runEmpo2(['memory', 'export', db, out]);
    expect(exported.code, exported.stderr).toBe(0);
    const file = JSON.parse(readFileSync(out, 'utf8')) as {
      embedder: string;
      tips: { slots: Record<string, { texts: string[]; scores: number[] }> };
    };
    expect(file.embedder).toBe('hashed-ngram-1024');
    expect(file.tips.slots.kitchen.texts).toEqual([before.slots.kitchen.newest[0].text]);
    expect(file.tips.slots.kitchen.scores).toEqual([40]);
    // The memory.json reads as a run's memory does.
    const asRun = await runEmpo2(['memory', 'show', out, '--json']);
    expect(asRun.code, asRun.stderr).toBe(0);
    expect(JSON.parse(asRun.stdout).slots.kitchen.newest[0].text).toBe(file.tips.slots.kitchen.texts[0]);
    const copy = join(root, 'copy.db');
    const imported = await runEmpo2(['memory', 'import', out, copy]);
    expect(imported.code, imported.stderr).toBe(0);
    const again = JSON.parse((await runEmpo2(['memory', 'show', copy, '--json'])).stdout);
    expect(again.slots.kitchen.newest.map((t: { text: string; score: number }) => [t.text, t.score])).toEqual([
      [file.tips.slots.kitchen.texts[0], 40],
    ]);
    // A second import adds nothing: the same text is stored once per slot.
    const twice = await runEmpo2(['memory', 'import', out, copy]);
    expect(twice.stdout).toContain('0 tips added');
    // And the keys survive: exported from the copy, they are the original's byte for byte.
    const out2 = join(root, 'memory2.json');
    expect((await runEmpo2(['memory', 'export', copy, out2])).code).toBe(0);
    expect(JSON.parse(readFileSync(out2, 'utf8')).tips.slots.kitchen.keys).toBe(
      (file.tips.slots.kitchen as unknown as { keys: string }).keys,
    );
  }, 120_000);

  it('seeds a training run (memory.init_from), refuses another embedder, and a run without memory', async () => {
    const exported = join(root, 'memory.json');
    const runDir = join(root, 'seeded-run');
    const tiny = [
      ...TINY_MODEL,
      'env.tasks=[fetch]',
      'env.eval_variations=1',
      'env.max_steps=3',
      'rollout.tasks_per_batch=1',
      'rollout.group_size=2',
    ];
    const sets = (extra: string[]) => [...tiny, ...extra].flatMap((x) => ['--set', x]);
    const trained = await runEmpo2([
      'train',
      '--run-dir',
      runDir,
      ...sets(['algo.name=empo2', `memory.init_from=${exported}`, 'train.iterations=1', 'train.eval_every=0']),
    ]);
    expect(trained.code, trained.stderr).toBe(0);
    const memory = JSON.parse(readFileSync(join(latestCheckpoint(runDir)!, MEMORY_FILE), 'utf8')) as {
      tips: { slots: Record<string, { texts: string[] }> };
    };
    // The seeded slot is there as exported, next to what the run wrote itself.
    const seeded = JSON.parse(readFileSync(exported, 'utf8')) as { tips: { slots: Record<string, { texts: string[] }> } };
    expect(memory.tips.slots.kitchen.texts).toEqual(seeded.tips.slots.kitchen.texts);
    expect(Object.keys(memory.tips.slots)).toContain('fetch');

    const otherDim = await runEmpo2([
      'train',
      '--run-dir',
      join(root, 'dim-run'),
      ...sets(['algo.name=empo2', 'memory.dim=512', `memory.init_from=${exported}`, 'train.iterations=1']),
    ]);
    expect(otherDim.code).toBe(1);
    expect(otherDim.stderr).toContain(
      `memory.init_from (${exported}) was written with embedder hashed-ngram-1024, but this run uses hashed-ngram-512`,
    );
    const grpo = await runEmpo2([
      'train',
      '--run-dir',
      join(root, 'grpo-run'),
      ...sets(['algo.name=grpo', `memory.init_from=${exported}`, 'train.iterations=1']),
    ]);
    expect(grpo.code).toBe(1);
    expect(grpo.stderr).toContain('memory.init_from: this run keeps no tip memory (algo.name=grpo');
  }, 240_000);
});
