/**
 * results/strong-writer/oracle-writer.ts, the STAND-IN strong tip writer of issue #89's study (tips from the
 * built-in environment's solver, served over the OpenAI API): a reflection prompt of a built-in episode is
 * answered with the solver's plan, which, followed from the start, solves the episode; a prompt it cannot
 * place gets no tip; and through `memory.reflector: openai` a tiny EMPO² run stores its plans as tips.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createEnv } from '../src/envs/index.ts';
import type { Env } from '../src/envs/types.ts';
import { reflectionPrompt, type Trajectory } from '../src/memory/reflector.ts';
import { loadConfig } from '../src/config/load.ts';
import { train } from '../src/trainer/trainer.ts';
import { MEMORY_FILE, latestCheckpoint } from '../src/run/checkpoint.ts';
import { startOracleWriter, type OracleWriter } from '../results/strong-writer/oracle-writer.ts';
import { TINY_MODEL } from './support/tiny.ts';

const TASKS = ['power', 'clue', 'unlock'];
let writer: OracleWriter;
let env: Env;
const root = mkdtempSync(join(tmpdir(), 'empo2-oracle-writer-'));
beforeAll(async () => {
  writer = await startOracleWriter({ port: 0, tasks: TASKS });
  env = await createEnv({ name: 'builtin', tasks: TASKS });
}, 120_000);
afterAll(async () => {
  await writer?.close();
  await env?.close();
  rmSync(root, { recursive: true, force: true });
});

async function ask(prompt: string): Promise<string> {
  const r = await fetch(`${writer.url}/chat/completions`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ model: 'oracle-writer', messages: [{ role: 'user', content: prompt }] }),
  });
  expect(r.status).toBe(200);
  return ((await r.json()) as { choices: { message: { content: string } }[] }).choices[0].message.content;
}

/** A failed episode of `family` #`variation`: its first valid action `steps` times. */
async function trajectory(family: string, variation: number, steps: number): Promise<Trajectory> {
  const start = await env.reset(family, variation);
  const t: Trajectory = { task: start.task, steps: [], finalObservation: start.observation, score: 0, success: false };
  let observation = start.observation;
  let valid = start.validActions;
  for (let k = 0; k < steps && !env.done(); k++) {
    const action = valid[0];
    const r = await env.step(action);
    t.steps.push({ observation, action, score: r.score });
    ({ observation, validActions: valid } = r);
    t.finalObservation = observation;
    t.score = r.score;
  }
  return t;
}

describe('the stand-in oracle tip writer', () => {
  /** The tip's plan ("To <task>: a, then b.") played from the episode's start reaches a full score. */
  const solves = async (family: string, variation: number, tip: string) => {
    const plan = tip
      .slice(tip.indexOf(': ') + 2)
      .replace(/\.$/, '')
      .split(', then ');
    await env.reset(family, variation);
    for (const a of plan) await env.step(a);
    expect(env.score(), `${family} #${variation}: ${tip}`).toBe(100);
  };

  it("answers a built-in episode's reflection with the solver's plan, which solves the episode", async () => {
    for (const family of TASKS)
      for (const variation of [0, 7]) {
        const t = await trajectory(family, variation, 3);
        const tip = await ask(reflectionPrompt(t, 12));
        expect(tip.startsWith(`To ${t.task.replace(/\.$/, '')}: `), tip).toBe(true);
        await solves(family, variation, tip);
      }
  });

  it("places an episode by step 1 inside an agent's message, and a long one by the first observation under its task", async () => {
    for (const family of TASKS) {
      // Step 1 as a chat agent's first user message shows it (the memory proxy's observation is the whole message).
      const short = await trajectory(family, 3, 2);
      const start = await env.reset(family, 3);
      short.steps[0].observation = `Task: ${start.task}\n\n${start.observation}\n\nValid actions: ${start.validActions.join(', ')}`;
      await solves(family, 3, await ask(reflectionPrompt(short, 12)));
      // 20 steps: the prompt shows the last 12 only; no task text of these families is unique.
      const long = await trajectory(family, 5, 20);
      expect(long.steps.length).toBeGreaterThan(12);
      expect(await ask(reflectionPrompt(long, 12))).toBe('');
      const first = await env.reset(family, 5);
      await solves(family, 5, await ask(reflectionPrompt({ ...long, task: `${first.task}\n${first.observation}` }, 12)));
    }
  });

  it('gives no tip to a prompt it cannot place', async () => {
    expect(await ask('Task: something no built-in episode asks\nYour trajectory:\n')).toBe('');
    expect(await ask('hello')).toBe('');
  });

  it('writes the tips of an EMPO² run through memory.reflector: openai', async () => {
    const runDir = join(root, 'run');
    const cfg = loadConfig(null, [
      `run_dir=${runDir}`,
      ...TINY_MODEL,
      'seed=3',
      `env.tasks=[${TASKS.join(', ')}]`,
      'env.train_variations=2',
      'env.eval_variations=1',
      'env.max_steps=5',
      'rollout.tasks_per_batch=2',
      'rollout.group_size=2',
      'train.iterations=1',
      'train.eval_every=0',
      'algo.name=empo2',
      'algo.p=1',
      'memory.reflector=openai',
      `memory.reflector_model={base_url: "${writer.url}", model: oracle-writer}`,
    ]);
    const asked = writer.stats().asked;
    await train(cfg, { resume: false, log: () => {} });
    const line = readFileSync(join(runDir, 'metrics.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, any>)
      .find((l) => l.type === 'train')!;
    expect(writer.stats().asked - asked).toBe(4);
    expect(line.tips_skipped).toBe(0);
    expect(line.tips_added).toBeGreaterThan(0);
    const saved = JSON.parse(readFileSync(join(latestCheckpoint(runDir)!, MEMORY_FILE), 'utf8'));
    const texts = Object.values(saved.tips.slots as Record<string, { texts: string[] }>).flatMap((s) => s.texts);
    expect(texts.some((t) => t.startsWith('To '))).toBe(true);
  }, 180_000);
});
