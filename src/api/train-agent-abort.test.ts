/**
 * trainAgent's AbortSignal during an iteration's rollouts: the agents' own signals are aborted at once
 * (not by their timeout), the iteration is logged as stopped, not as failed episodes, nothing of it is
 * written, and resuming plays it again.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { TINY_MODEL } from '../../test/support/tiny.ts';
import type { AgentInput } from '../gateway/index.ts';
import { trainAgent } from './train-agent.ts';

const root = mkdtempSync(join(tmpdir(), 'empo2-train-agent-abort-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

const TASKS = ['alpha', 'beta'];
const HELD_OUT = ['gamma'];
const SET = [
  ...TINY_MODEL,
  `run_dir=${join(root, 'run')}`,
  'train.iterations=2',
  'train.eval_every=0',
  'train.checkpoint_every=5', // iteration 1 is saved by the stop in iteration 2
  'algo.name=grpo',
  'rollout.tasks_per_batch=2',
  'rollout.group_size=2',
  'rollout.max_tokens=4',
];

async function oneCall({ baseURL, apiKey, model, task }: AgentInput<string>): Promise<void> {
  const res = await fetch(`${baseURL}/chat/completions`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${apiKey}` },
    body: JSON.stringify({ model, messages: [{ role: 'user', content: task }], max_tokens: 4 }),
  });
  if (res.status !== 200) throw new Error(`gateway answered ${res.status}: ${await res.text()}`);
}

const records = (file: string) =>
  readFileSync(file, 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as { type: string; iteration: number });

describe('trainAgent stopped by its signal', () => {
  it("aborts the agents' signals at once, logs the iteration as stopped, keeps nothing of it; resuming plays it again", async () => {
    const controller = new AbortController();
    const lines: string[] = [];
    let trainingEpisodes = 0;
    const aborted: string[] = [];
    // Iteration 1 plays normally; iteration 2's agents make a call and then wait for their signal, which
    // only the stop (or, before the fix, their 60 s timeout) aborts. The run is stopped once all 4 wait.
    const agent = async (input: AgentInput<string>) => {
      await oneCall(input);
      if (HELD_OUT.includes(input.task) || ++trainingEpisodes <= 4) return 1;
      if (trainingEpisodes === 8) controller.abort();
      await new Promise<void>((resolve) => input.signal.addEventListener('abort', () => resolve(), { once: true }));
      aborted.push(input.signal.reason instanceof Error ? input.signal.reason.message : String(input.signal.reason));
      return 1;
    };
    const result = await trainAgent<string>({
      agent,
      tasks: TASKS,
      evalTasks: HELD_OUT,
      set: SET,
      timeoutSeconds: 60,
      signal: controller.signal,
      log: (l) => lines.push(l),
    });
    const output = lines.join('\n');
    expect(aborted, output).toHaveLength(4);
    for (const reason of aborted) expect(reason).toMatch(/^the run is stopping \(its signal was aborted\)/);
    expect(result.interrupted).toBe(true);
    expect(result.iterations).toBe(1);
    expect(output).toContain('aborted: stopping the agents and this iteration, of which nothing is kept');
    expect(output).toContain(
      'iter 2: stopped during its rollouts; nothing of this iteration was kept, --resume plays it again from the checkpoint of iteration 1',
    );
    expect(lines.filter((l) => l.startsWith('checkpoint '))).toEqual([`checkpoint ${join(result.runDir, 'checkpoints', 'iter-000001')}`]);
    expect(lines.filter((l) => l.includes('failed and is left out of the update'))).toEqual([]);
    const metrics = join(result.runDir, 'metrics.jsonl');
    expect(records(metrics).map((m) => `${m.type} ${m.iteration}`)).toEqual(['eval 0', 'train 1']);
    expect(existsSync(join(result.runDir, 'run.lock'))).toBe(false);

    const resumed = await trainAgent<string>({
      agent: async (input) => {
        await oneCall(input);
        return 1;
      },
      tasks: TASKS,
      evalTasks: HELD_OUT,
      set: SET,
      resume: true,
      log: () => {},
    });
    expect(resumed.interrupted).toBe(false);
    expect(records(metrics).map((m) => `${m.type} ${m.iteration}`)).toEqual(['eval 0', 'train 1', 'train 2', 'eval 2']);
  }, 180_000);

  it('during an evaluation between iterations: drops it, saves the iteration, and aborts the agents at once', async () => {
    const controller = new AbortController();
    const lines: string[] = [];
    let trainingEpisodes = 0;
    const aborted: string[] = [];
    // The held-out task waits for its signal in the evaluation after iteration 1 (the one before training plays).
    const agent = async (input: AgentInput<string>) => {
      await oneCall(input);
      if (!HELD_OUT.includes(input.task)) {
        trainingEpisodes++;
        return 1;
      }
      if (trainingEpisodes < 4) return 1;
      controller.abort();
      await new Promise<void>((resolve) => input.signal.addEventListener('abort', () => resolve(), { once: true }));
      aborted.push(input.signal.reason instanceof Error ? input.signal.reason.message : String(input.signal.reason));
      return 1;
    };
    const runDir = join(root, 'between');
    const result = await trainAgent<string>({
      agent,
      tasks: TASKS,
      evalTasks: HELD_OUT,
      set: [
        ...SET.filter((x) => !x.startsWith('run_dir=') && !x.startsWith('train.eval_every=')),
        `run_dir=${runDir}`,
        'train.eval_every=1',
      ],
      timeoutSeconds: 60,
      signal: controller.signal,
      log: (l) => lines.push(l),
    });
    const output = lines.join('\n');
    expect(aborted, output).toHaveLength(1);
    expect(aborted[0]).toMatch(/^the run is stopping \(its signal was aborted\)/);
    expect(result.interrupted).toBe(true);
    expect(result.iterations).toBe(1);
    expect(output).toContain('stopped the evaluation at iteration 1; nothing of it was kept');
    expect(lines.filter((l) => l.includes('failed'))).toEqual([]);
    expect(lines.filter((l) => l.startsWith('checkpoint '))).toEqual([`checkpoint ${join(runDir, 'checkpoints', 'iter-000001')}`]);
    expect(records(join(runDir, 'metrics.jsonl')).map((m) => `${m.type} ${m.iteration}`)).toEqual(['eval 0', 'train 1']);
  }, 180_000);
});
