/**
 * `env.reward: judge` end to end: 2-iteration GRPO runs of the tiny default whose rewards come from a
 * judge behind a small OpenAI-compatible server started here. The server scores each trajectory it is
 * shown by what it reads in the text (its distinct actions over its steps + 1), so the scores
 * differ within a group and can be recomputed from the recorded steps: they must be what the episodes'
 * rewards became. Then the faults: answers that are not the JSON asked for (retried, then the group
 * left out and counted), and a judge that is down (left out and counted); every run finishes.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../src/config/load.ts';
import type { Config } from '../src/config/schema.ts';
import { judge as judgeReward, trainAgent } from '../src/index.ts';
import { train } from '../src/trainer/trainer.ts';
import { TINY_MODEL, TINY_RUN } from './support/tiny.ts';
import { callingAgent } from './support/calling-agent.ts';

type Line = Record<string, any> & { type: string };

/** The judge's scorer: distinct actions over steps + 1 (new actions score, and so does not taking more steps). */
function distinctShare(actions: readonly string[]): number {
  return new Set(actions).size / (actions.length + 1);
}

/** The trajectories of a judge request, as their action lists, from the text the judge was shown. */
function shownActions(user: string): string[][] {
  return [...user.matchAll(/<trajectory id="\d+">\n([\s\S]*?)\n<\/trajectory>/g)].map((m) =>
    [...m[1].matchAll(/^Action: (.*)$/gm)].map((a) => a[1]),
  );
}

class Judge {
  chats = 0;
  open = 0;
  /** Answer for the n-th chat request: null scores the trajectories; a string is sent as the content. */
  content: (n: number) => string | null = () => null;
  formats: unknown[] = [];
  private readonly sockets = new Set<Socket>();
  private readonly server: Server;
  url = '';

  constructor() {
    this.server = createServer((req, res) => this.answer(req, res));
    this.server.on('connection', (s) => {
      this.sockets.add(s);
      s.on('close', () => this.sockets.delete(s));
    });
  }

  private answer(req: IncomingMessage, res: ServerResponse): void {
    const chunks: Buffer[] = [];
    req.on('data', (d: Buffer) => chunks.push(d));
    req.on('end', () => {
      this.open++;
      res.on('close', () => this.open--);
      const body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
      const n = this.chats++;
      this.formats.push(body.response_format);
      const user: string = body.messages.find((m: { role: string }) => m.role === 'user').content;
      const scores = shownActions(user).map((actions, i) => {
        const share = distinctShare(actions);
        return {
          trajectory_id: String(i + 1),
          explanation: `${new Set(actions).size} distinct of ${actions.length} actions`,
          score: Number(share.toFixed(4)),
        };
      });
      const content = this.content(n) ?? JSON.stringify({ scores });
      res.writeHead(200, { 'Content-Type': 'application/json' });
      res.end(
        JSON.stringify({
          choices: [{ message: { role: 'assistant', content }, finish_reason: 'stop' }],
          usage: { prompt_tokens: 50, completion_tokens: 20 },
        }),
      );
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

const root = mkdtempSync(join(tmpdir(), 'empo2-judge-'));
let judge: Judge;

beforeAll(async () => {
  judge = await new Judge().listen();
});
afterAll(async () => {
  await judge?.close();
  rmSync(root, { recursive: true, force: true });
});

function config(runDir: string, judgeSettings: string, extra: string[] = []): Config {
  return loadConfig(null, [
    `run_dir=${runDir}`,
    ...TINY_RUN,
    'rollout.group_size=3',
    'train.iterations=2',
    'train.eval_every=0',
    'env.eval_variations=1',
    'algo.name=grpo',
    'trajectories.train_per_iteration=6',
    'env.reward=judge',
    `env.judge=${judgeSettings}`,
    ...extra,
  ]);
}

const readLines = (file: string): Line[] =>
  readFileSync(file, 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as Line);
const trainLines = (dir: string) => readLines(join(dir, 'metrics.jsonl')).filter((l) => l.type === 'train');
const episodes = (dir: string) => readLines(join(dir, 'trajectories', 'train.jsonl')).filter((l) => l.type === 'episode');

async function run(name: string, settings: string, extra: string[] = []) {
  const dir = join(root, name);
  const logged: string[] = [];
  const result = await train(config(dir, settings, extra), { resume: false, log: (l) => logged.push(l) });
  return { dir, logged, result };
}

describe('env.reward: judge', () => {
  it("scores each group's trajectories together, and the scores become the rewards the update learns from", async () => {
    judge.chats = 0;
    judge.content = () => null;
    const { dir, result } = await run('scored', `{base_url: "${judge.url}", model: judge, rubric: "Reward trying new actions."}`);
    expect(result.iterations).toBe(2);
    const lines = trainLines(dir);
    expect(lines).toHaveLength(2);
    for (const l of lines) {
      expect(l.judge).toEqual({ groups: 2, judged: 2, left_out: 0, left_out_episodes: 0, reasked: 0 });
      expect(l.external.judge).toMatchObject({ calls: 2, failed: 0, prompt_tokens: 100, completion_tokens: 40 });
      expect(l.sequences).toBeGreaterThan(0);
    }
    // One request per group, with the JSON schema asked for.
    expect(judge.chats).toBe(4);
    expect(judge.formats[0]).toMatchObject({ type: 'json_schema', json_schema: { strict: true } });
    const eps = episodes(dir);
    expect(eps).toHaveLength(12);
    const scores = new Set<number>();
    for (const e of eps) {
      const actions = e.steps.map((s: { action: string }) => s.action);
      const expected = Number(distinctShare(actions).toFixed(4));
      // The judge's verdict is stored with the episode, and it is the scorer's reading of this very trajectory.
      expect(e.judge).toEqual({ score: expected, reason: `${new Set(actions).size} distinct of ${actions.length} actions` });
      // mode replace: the judge's score, on the 0-100 scale, is the episode's only reward.
      const rewards = e.steps.map((s: { reward: number }) => s.reward);
      expect(rewards.at(-1)).toBeCloseTo(100 * expected, 6);
      expect(rewards.slice(0, -1).every((r: number) => r === 0)).toBe(true);
      scores.add(expected);
    }
    expect(scores.size).toBeGreaterThan(1);
  }, 180_000);

  it('mode add puts the score on top of the environment rewards', async () => {
    judge.content = () => null;
    const { dir } = await run('added', `{base_url: "${judge.url}", model: judge, rubric: null, mode: add}`);
    for (const e of episodes(dir)) {
      const envTotal = e.steps.at(-1).score; // the environment's rewards add up to its final score
      const total = e.steps.reduce((a: number, s: { reward: number }) => a + s.reward, 0);
      expect(total).toBeCloseTo(envTotal + 100 * e.judge.score, 6);
    }
  }, 180_000);

  it('asks again after answers that are not the JSON asked for, and takes the good one', async () => {
    judge.chats = 0;
    judge.content = (n) => (n < 2 ? (n === 0 ? 'Trajectory 1 is best.' : '{"scores": [{"trajectory_id": "1"}]}') : null);
    const { dir } = await run('reasked', `{base_url: "${judge.url}", model: judge, max_attempts: 3}`);
    const [first, second] = trainLines(dir);
    expect(first.judge).toEqual({ groups: 2, judged: 2, left_out: 0, left_out_episodes: 0, reasked: 2 });
    expect(second.judge.reasked).toBe(0);
    expect(judge.chats).toBe(6);
    expect(episodes(dir).every((e) => e.judge && e.left_out === undefined)).toBe(true);
  }, 180_000);

  it('leaves a group out of the update and counts it when the answer is never usable', async () => {
    judge.chats = 0;
    judge.content = () => '{"scores": "all good"}';
    const { dir, logged, result } = await run('garbage', `{base_url: "${judge.url}", model: judge, max_attempts: 2}`);
    expect(result.iterations).toBe(2);
    for (const l of trainLines(dir)) {
      expect(l.judge).toEqual({ groups: 2, judged: 0, left_out: 2, left_out_episodes: 6, reasked: 2 });
      expect(l.sequences).toBe(0);
    }
    expect(judge.chats).toBe(8);
    const eps = episodes(dir);
    expect(
      eps.every((e) => e.judge === undefined && /the judge could not score its group: the answer does not fit the schema/.test(e.left_out)),
    ).toBe(true);
    expect(logged.some((l) => /left out of the update: the judge/.test(l))).toBe(true);
    expect(logged.some((l) => /2 of 2 groups left out \(judge failed\)/.test(l))).toBe(true);
  }, 180_000);

  it('leaves the groups out and counts the failed calls when the judge is down, and the run finishes', async () => {
    const down = await new Judge().listen();
    const url = down.url;
    await down.close();
    const { dir, result } = await run('down', `{base_url: "${url}", model: judge, max_retries: 1, max_retry_wait_s: 0.1, cache: false}`);
    expect(result.iterations).toBe(2);
    expect(result.interrupted).toBe(false);
    for (const l of trainLines(dir)) {
      expect(l.judge).toMatchObject({ groups: 2, judged: 0, left_out: 2, reasked: 0 });
      expect(l.external.judge).toMatchObject({ calls: 2, failed: 2, retries: 2 });
    }
    expect(judge.open).toBe(0);
  }, 180_000);

  it("is trainAgent's reward: an agent that reports none is trained on the judge's scores", async () => {
    judge.chats = 0;
    judge.content = () => null;
    // 1 to 3 calls an episode, so that the judge's scores differ within a group.
    const calls = callingAgent(3);
    const logged: string[] = [];
    const result = await trainAgent<string>({
      agent: calls,
      tasks: ['say hello', 'count to three'],
      reward: judgeReward({ base_url: judge.url, model: 'judge', rubric: 'Reward varied answers.' }),
      set: [
        ...TINY_MODEL,
        `run_dir=${join(root, 'agent')}`,
        'train.iterations=1',
        'train.eval_every=0',
        'algo.name=grpo',
        'rollout.tasks_per_batch=2',
        'rollout.group_size=3',
        'rollout.max_tokens=4',
        'trajectories.train_per_iteration=6',
      ],
      log: (l) => logged.push(l),
    });
    expect(result.iterations).toBe(1);
    expect(logged.filter((l) => l.includes('failed and is left out'))).toEqual([]);
    const [line] = trainLines(result.runDir);
    expect(line.judge).toEqual({ groups: 2, judged: 2, left_out: 0, left_out_episodes: 0, reasked: 0 });
    expect(line.sequences).toBeGreaterThan(0);
    const eps = episodes(result.runDir);
    expect(eps).toHaveLength(6);
    for (const e of eps) {
      const actions = e.steps.map((s: { action: string }) => s.action);
      expect(e.judge.score).toBe(Number(distinctShare(actions).toFixed(4)));
      expect(e.steps.at(-1).reward).toBeCloseTo(100 * e.judge.score, 6);
    }
    expect(new Set(eps.map((e) => e.judge.score)).size).toBeGreaterThan(1);
    expect(() => judgeReward({ base_url: judge.url } as never)).toThrow(/judge\(\): model/);
  }, 180_000);
});
