/**
 * Every external-model role against a real OpenAI-compatible server this project did not write:
 * llama-cpp-python's server (scripts/requirements-llamacpp.txt), started here on a free port with the
 * SmolLM2-135M-Instruct GGUF and one thread (./support/llamacpp-server.ts), with nothing in between but
 * a recorder that forwards each request as it is and keeps its body.
 *
 *   - the tip writer (`memory.reflector: openai`): a 2-iteration EMPO² run of the tiny default whose tips
 *     SmolLM2 writes, cut to the policy's tokens, counted in metrics.jsonl; a resumed run asks nothing;
 *     `empo2 adapt` from its checkpoint asks the same writer;
 *   - the judge (`judge()` in trainAgent, `env.reward: judge` in train): the server refuses
 *     `response_format: json_schema` (a 500 naming the field), so the judge asks with json_object and a
 *     schema, which the server turns into a grammar; the scores become the rewards. A judge cut short by
 *     max_tokens answers text that is not the JSON: asked again, then the groups are left out and counted;
 *   - the memory proxy (`withMemory()`) in front of it: an episode through the proxy with the official
 *     OpenAI client, the tip SmolLM2 writes at its end, and that tip in the next episode's request.
 *
 * The model is tiny and its answers poor; the tests check that each role works with what a real server
 * sends (fields, errors, streaming), not the quality of the tips or scores.
 */
import { createServer, request as httpRequest, type Server } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../src/config/load.ts';
import type { Config } from '../src/config/schema.ts';
import { CACHE_FILE } from '../src/external/cache.ts';
import { GRAMMAR_SCORES } from '../src/external/judge.ts';
import { judge, trainAgent, withMemory } from '../src/index.ts';
import { oneLineTip } from '../src/memory/external-reflector.ts';
import { adapt } from '../src/adapt/tips.ts';
import { createEngine } from '../src/policy/create-engine.ts';
import { MEMORY_FILE, checkpointsDir, latestCheckpoint } from '../src/run/checkpoint.ts';
import { train } from '../src/trainer/trainer.ts';
import { TIPS_HEADER } from '../src/trainer/prompt.ts';
import { llamaCppGate, startLlamaCppServer, type LlamaCppServer } from './support/llamacpp-server.ts';
import { TINY_MODEL, TINY_RUN } from './support/tiny.ts';
import { callingAgent } from './support/calling-agent.ts';

const gate = llamaCppGate();
/**
 * The server answers one request at a time, on one thread of a machine that may be loaded: one request
 * in flight, so that a request's time limit is its own generation's, and a limit no answer here nears.
 */
const SLOW_SERVER = 'concurrency: 1, timeout_s: 300';

type Body = { messages: { role: string; content: unknown }[]; response_format?: { type: string }; stream?: boolean };

/** In front of the server: forwards every request untouched, keeping the chat bodies and the statuses. */
class Recorder {
  bodies: Body[] = [];
  statuses: number[] = [];
  private readonly sockets = new Set<Socket>();
  private readonly server: Server;
  url = '';

  constructor(private readonly target: string) {
    this.server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (d: Buffer) => chunks.push(d));
      req.on('end', () => {
        const raw = Buffer.concat(chunks);
        const chat = req.url?.endsWith('/chat/completions');
        if (chat) this.bodies.push(JSON.parse(raw.toString('utf8')));
        const to = new URL(req.url!, this.target);
        const out = httpRequest(to, { method: req.method, headers: { ...req.headers, host: to.host } }, (up) => {
          if (chat) this.statuses.push(up.statusCode ?? 0);
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

  async listen(): Promise<this> {
    await new Promise<void>((r) => this.server.listen(0, '127.0.0.1', r));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}/v1`;
    return this;
  }

  reset(): void {
    this.bodies = [];
    this.statuses = [];
  }

  close(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    return new Promise((r) => this.server.close(() => r()));
  }
}

type Line = Record<string, any> & { type: string };
const readLines = (file: string): Line[] =>
  readFileSync(file, 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as Line);
const trainLines = (dir: string) => readLines(join(dir, 'metrics.jsonl')).filter((l) => l.type === 'train');
const episodes = (dir: string) => readLines(join(dir, 'trajectories', 'train.jsonl')).filter((l) => l.type === 'episode');
const contentOf = (b: Body, role: string) => String(b.messages.find((m) => m.role === role)?.content ?? '');

describe.skipIf(!gate.available)(`every external-model role against llama-cpp-python's server (${gate.label})`, () => {
  const root = mkdtempSync(join(tmpdir(), 'empo2-llamacpp-'));
  let server: LlamaCppServer;
  let recorder: Recorder;

  beforeAll(async () => {
    server = await startLlamaCppServer();
    recorder = await new Recorder(server.baseURL).listen();
  }, 180_000);
  afterAll(async () => {
    await recorder?.close();
    await server?.stop();
    rmSync(root, { recursive: true, force: true });
  });

  it('the tip writer: SmolLM2 writes the tips of an EMPO² run, cut to the policy tokens; a resumed run is answered from the cache', async () => {
    recorder.reset();
    const dir = join(root, 'writer');
    const maxTokens = 24;
    const config = (): Config =>
      loadConfig(null, [
        `run_dir=${dir}`,
        ...TINY_RUN,
        'train.iterations=2',
        'train.checkpoint_every=1',
        'train.eval_every=0',
        'algo.name=empo2',
        'algo.p=1',
        'memory.reflector=openai',
        `memory.reflection_max_tokens=${maxTokens}`,
        `memory.reflector_model={base_url: "${recorder.url}", model: ${server.model}, ${SLOW_SERVER}}`,
      ]);
    await train(config(), { resume: false, log: () => {} });
    const lines = trainLines(dir);
    expect(lines).toHaveLength(2);
    for (const l of lines) {
      // 2 tasks x 2 rollouts: one tip asked for per episode, each answered.
      expect(l.external.reflector, server.output().slice(-2000)).toMatchObject({ calls: 4, cached: 0, failed: 0, retries: 0 });
      expect(l.external.reflector.prompt_tokens).toBeGreaterThan(0);
      expect(l.external.reflector.completion_tokens).toBeGreaterThan(0);
      expect(l.tips_skipped).toBe(0);
      expect(l.tips_added).toBeGreaterThan(0);
    }
    expect(recorder.bodies).toHaveLength(8);
    expect(recorder.statuses).toEqual(Array(8).fill(200));
    expect(recorder.bodies.every((b) => /Reflect on this attempt/.test(contentOf(b, 'user')))).toBe(true);

    // The tips in memory are SmolLM2's answers on one line, cut to reflection_max_tokens of the policy's tokenizer.
    const answers = readLines(join(dir, CACHE_FILE)).map((l) => oneLineTip(l.text as string));
    expect(answers).toHaveLength(8);
    const checkpoint = latestCheckpoint(dir)!;
    const { engine } = await createEngine({ ...config(), model: { ...config().model, path: checkpoint } }, 'fresh');
    const saved = JSON.parse(readFileSync(join(checkpoint, MEMORY_FILE), 'utf8'));
    const texts = Object.values(saved.tips.slots as Record<string, { texts: string[] }>).flatMap((s) => s.texts);
    expect(texts.length).toBe(lines[1].memory_size);
    const tips = texts.map((t) => t.slice(0, t.indexOf(' The action you took was ')));
    for (const tip of tips) {
      expect(tip.length).toBeGreaterThan(0);
      expect(engine.tokenizer.encode(tip).length).toBeLessThanOrEqual(maxTokens);
      expect(answers.some((a) => a.startsWith(tip))).toBe(true);
    }
    // SmolLM2's tokens are not the policy's: some answers were longer than the cap in the policy's tokens, and were cut.
    expect(answers.some((a) => engine.tokenizer.encode(a).length > maxTokens)).toBe(true);
    expect(tips.some((tip) => !answers.includes(tip))).toBe(true);
    engine.dispose();

    // Resumed from iteration 1's checkpoint: iteration 2 is redone with the same requests, answered from the cache.
    const checkpoints = checkpointsDir(dir);
    const names = readdirSync(checkpoints)
      .filter((n) => n !== 'latest.json')
      .sort();
    rmSync(join(checkpoints, names[1]), { recursive: true });
    writeFileSync(join(checkpoints, 'latest.json'), JSON.stringify({ checkpoint: names[0] }));
    await train(config(), { resume: true, log: () => {} });
    expect(recorder.bodies).toHaveLength(8);
    expect(trainLines(dir)[1].external.reflector).toMatchObject({ calls: 4, cached: 4, requests: 0 });

    // empo2 adapt with the run's checkpoint and config: the same writer, one tip per trial.
    const resumed = latestCheckpoint(dir)!;
    const { engine: policy } = await createEngine({ ...config(), model: { ...config().model, path: resumed } }, 'fresh');
    const trials = await adapt(policy, config(), {
      task: 'fetch',
      trials: 2,
      variations: 1,
      split: 'test',
      memoryFrom: resumed,
      outDir: join(root, 'adapt'),
      log: () => {},
    });
    policy.dispose();
    for (const t of trials) {
      expect(t.external?.reflector).toMatchObject({ calls: 1, failed: 0 });
      expect(t.tips_skipped).toBe(0);
    }
    expect(recorder.bodies.length).toBe(8 + trials.reduce((n, t) => n + t.external!.reflector.requests, 0));
  }, 600_000);

  it("the judge: judge() scores trainAgent's groups through the server, which takes the schema as json_object", async () => {
    recorder.reset();
    const agent = callingAgent(2);
    const logged: string[] = [];
    const result = await trainAgent<string>({
      agent,
      tasks: ['say hello', 'count to three'],
      reward: judge({
        base_url: recorder.url,
        model: server.model,
        rubric: 'Reward short, friendly answers.',
        // Room for the longest answer the grammar allows in all but the worst case: 2 explanations of 150 characters.
        max_tokens: 1024,
        timeout_s: 600,
        concurrency: 1,
      }),
      set: [
        ...TINY_MODEL,
        `run_dir=${join(root, 'agent')}`,
        'train.iterations=1',
        'train.eval_every=0',
        'algo.name=grpo',
        'rollout.tasks_per_batch=2',
        'rollout.group_size=2',
        'rollout.max_tokens=4',
        'trajectories.train_per_iteration=4',
      ],
      log: (l) => logged.push(l),
    });
    expect(result.iterations).toBe(1);
    const [line] = trainLines(result.runDir);
    expect(line.judge, logged.join('\n')).toEqual({ groups: 2, judged: 2, left_out: 0, left_out_episodes: 0, reasked: 0 });
    expect(line.external.judge).toMatchObject({ calls: 2, failed: 0, retries: 0 });
    expect(line.external.judge.completion_tokens).toBeGreaterThan(0);
    expect(line.sequences).toBeGreaterThan(0);
    // The server refused json_schema at once (no retry: a 500 that names response_format), and took json_object with the schema.
    expect(logged.some((l) => /judge model .*refused response_format json_schema .*answered 500.*json_object with a schema/.test(l))).toBe(
      true,
    );
    const formats = recorder.bodies.map((b) => b.response_format?.type);
    expect(formats.filter((f) => f === 'json_object')).toHaveLength(2);
    expect(formats.every((f) => f === 'json_schema' || f === 'json_object')).toBe(true);
    expect(recorder.statuses.filter((s) => s === 500).length).toBe(formats.filter((f) => f === 'json_schema').length);
    const eps = episodes(result.runDir);
    expect(eps).toHaveLength(4);
    for (const e of eps) {
      expect(GRAMMAR_SCORES).toContain(e.judge.score);
      expect(e.judge.reason.length).toBeGreaterThan(0);
      expect(e.steps.at(-1).reward).toBeCloseTo(100 * e.judge.score, 6);
    }
  }, 600_000);

  it('the judge: an answer cut short by max_tokens is asked again, then its group is left out and counted (env.reward: judge)', async () => {
    recorder.reset();
    const dir = join(root, 'judge-cut');
    const logged: string[] = [];
    const cfg = loadConfig(null, [
      `run_dir=${dir}`,
      ...TINY_RUN,
      'train.iterations=1',
      'train.eval_every=0',
      'algo.name=grpo',
      'env.reward=judge',
      `env.judge={base_url: "${recorder.url}", model: ${server.model}, max_tokens: 6, max_attempts: 2, temperature: 1, ${SLOW_SERVER}}`,
    ]);
    const result = await train(cfg, { resume: false, log: (l) => logged.push(l) });
    expect(result.iterations).toBe(1);
    const [line] = trainLines(dir);
    expect(line.judge).toEqual({ groups: 2, judged: 0, left_out: 2, left_out_episodes: 4, reasked: 2 });
    expect(line.external.judge).toMatchObject({ calls: 4, failed: 0 });
    expect(line.sequences).toBe(0);
    // Each answer the server gave was the start of the JSON, cut at 6 tokens.
    expect(recorder.bodies.filter((b) => b.response_format?.type === 'json_object')).toHaveLength(4);
    for (const e of episodes(dir))
      expect(e.left_out).toMatch(/the judge could not score its group: the answer is not JSON: "\{.*after 2 attempts/);
    expect(logged.some((l) => /2 of 2 groups left out \(judge failed\)/.test(l))).toBe(true);
  }, 600_000);

  it('the memory proxy: an episode through the proxy with the OpenAI client, its tip written by the server, shown in the next episode', async () => {
    recorder.reset();
    const proxy = await withMemory({
      upstream: { baseURL: recorder.url, model: server.model },
      memory: join(root, 'tips.db'),
      tipMaxChars: 160,
      log: () => undefined,
    });
    try {
      const observation = 'You are in the kitchen. There is a locked door to the north and a key on the table.';
      const first = proxy.startEpisode({ task: 'kitchen', description: 'Open the door.' });
      const client = new OpenAI({ baseURL: first.baseURL, apiKey: first.apiKey, maxRetries: 0 });
      const answer = await client.chat.completions.create({
        model: server.model,
        messages: [{ role: 'user', content: observation }],
        max_tokens: 12,
        temperature: 0,
      });
      expect(answer.choices[0].message.content?.length).toBeGreaterThan(0);
      expect(answer.usage?.completion_tokens).toBeGreaterThan(0);
      // Nothing in memory yet: the observation reached the server as sent.
      expect(contentOf(recorder.bodies[0], 'user')).toBe(observation);

      const ended = await fetch(`${first.baseURL}/empo2/reward`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${first.apiKey}` },
        body: JSON.stringify({ score: 100, final_observation: 'The door is open.' }),
      });
      const report = (await ended.json()) as { tips_added: number; tip: string | null; skipped: string | null };
      expect(ended.status).toBe(200);
      // The writer is the upstream: the reflection prompt went to the server, and its answer is the tip.
      expect(recorder.bodies).toHaveLength(2);
      expect(contentOf(recorder.bodies[1], 'user')).toMatch(/Reflect on this attempt/);
      expect(report.skipped, JSON.stringify(report)).toBeNull();
      expect(report.tips_added).toBe(1);
      expect(report.tip!.length).toBeGreaterThan(0);
      expect(report.tip!.length).toBeLessThanOrEqual(160);

      // The next episode of the task, streamed: the server gets the tip block after the observation, and streams its answer back.
      const second = proxy.startEpisode({ task: 'kitchen' });
      const stream = await new OpenAI({ baseURL: second.baseURL, apiKey: second.apiKey, maxRetries: 0 }).chat.completions.create({
        model: server.model,
        messages: [{ role: 'user', content: observation }],
        max_tokens: 12,
        temperature: 0,
        stream: true,
      });
      let streamed = '';
      let chunks = 0;
      for await (const chunk of stream) {
        chunks++;
        streamed += chunk.choices[0]?.delta?.content ?? '';
      }
      expect(chunks).toBeGreaterThan(1);
      expect(streamed.length).toBeGreaterThan(0);
      const shown = contentOf(recorder.bodies[2], 'user');
      expect(shown.startsWith(observation)).toBe(true);
      expect(shown).toContain(`${TIPS_HEADER}\n<tip> ${report.tip}`);
      expect(recorder.bodies[2].stream).toBe(true);
      expect(proxy.stats()).toMatchObject({ tips: 1, calls: 2, calls_with_tips: 1, upstream_errors: 0, tips_skipped: 0 });
    } finally {
      await proxy.close();
    }
  }, 600_000);
});
