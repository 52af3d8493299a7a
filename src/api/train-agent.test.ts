/**
 * trainAgent's task names: tasks of the same name form one task family, so the evaluation tables
 * (eval.md, the result's table, the eval lines of metrics.jsonl) have a row per name; tasks without a
 * name stay in the one family `agent`. Names that would leave a family untrained or unevaluated are refused.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { TINY_MODEL } from '../../test/support/tiny.ts';
import { createEnv } from '../envs/index.ts';
import { AGENT_TASK, agentConfig, registerAgentEnv } from '../gateway/tasks-env.ts';
import type { AgentInput } from '../gateway/index.ts';
import { loadConfig } from './config.ts';
import { trainAgent } from './train-agent.ts';

const root = mkdtempSync(join(tmpdir(), 'empo2-train-agent-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

interface Sum {
  kind: 'add' | 'spell';
  q: string;
}
const TASKS: Sum[] = [
  { kind: 'add', q: '2 + 2' },
  { kind: 'spell', q: 'apple' },
  { kind: 'add', q: '3 + 4' },
  { kind: 'spell', q: 'river' },
];
const HELD_OUT: Sum[] = [
  { kind: 'spell', q: 'stone' },
  { kind: 'add', q: '5 + 1' },
];

/** One call through the gateway with plain fetch; the reward says which family the task was in (add 1, spell 0.25). */
async function agent({ baseURL, apiKey, model, task, signal }: AgentInput<Sum>) {
  const res = await fetch(`${baseURL}/chat/completions`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${apiKey}` },
    body: JSON.stringify({ model, messages: [{ role: 'user', content: task.q }], max_tokens: 4 }),
    signal,
  });
  if (res.status !== 200) throw new Error(`gateway answered ${res.status}`);
  return task.kind === 'add' ? 1 : 0.25;
}

const families = (tasks: readonly Sum[], evalTasks: readonly Sum[], taskName?: (t: Sum) => string | undefined) => {
  registerAgentEnv();
  return agentConfig(loadConfig(null, { set: TINY_MODEL }), { tasks, evalTasks, taskName });
};

describe('trainAgent task names', () => {
  it('gives the evaluation table one row per name', async () => {
    const lines: string[] = [];
    const result = await trainAgent<Sum>({
      agent,
      tasks: TASKS,
      evalTasks: HELD_OUT,
      taskName: (t) => t.kind,
      set: [
        ...TINY_MODEL,
        `run_dir=${join(root, 'named')}`,
        'train.iterations=1',
        'train.eval_every=0',
        'algo.name=grpo',
        'rollout.tasks_per_batch=2',
        'rollout.group_size=2',
        'rollout.max_tokens=4',
      ],
      log: (l) => lines.push(l),
    });
    expect(lines.filter((l) => l.includes('failed and is left out of the update'))).toEqual([]);
    const rows = (table: string) => table.split('\n').filter((l) => l.startsWith('| ') && !l.startsWith('| task'));
    const table = readFileSync(join(result.runDir, 'eval.md'), 'utf8');
    expect(rows(table)).toEqual([
      '| add | 1 | 100.0 | 100.0 | 100.0% | 100.0% |',
      '| spell | 1 | 25.0 | 25.0 | 0.0% | 0.0% |',
      '| **all** | 2 | 62.5 | 62.5 | 50.0% | 50.0% |',
    ]);
    expect(result.evalTable).toContain('| spell | 1 |');
    expect(result.finalEval?.perTask.map((t) => t.task)).toEqual(['add', 'spell']);
    // Each row's episodes played that family's held-out task (at iterations 0 and 1).
    const played = readFileSync(join(result.runDir, 'trajectories', 'eval.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { task: string; description: string });
    expect([...new Set(played.map((e) => JSON.stringify([e.task, e.description])))].map((p) => JSON.parse(p)).sort()).toEqual([
      ['add', JSON.stringify(HELD_OUT[1])],
      ['spell', JSON.stringify(HELD_OUT[0])],
    ]);
  }, 300_000);

  it('puts tasks of a name in one family, its variations the indices of its tasks; no name keeps the one family `agent`', async () => {
    const named = await createEnv(families(TASKS, HELD_OUT, (t) => t.kind).env);
    expect(named.tasks()).toEqual(['add', 'spell']);
    expect(named.variations('add', 'train')).toEqual([0, 2]);
    expect(named.variations('spell', 'train')).toEqual([1, 3]);
    expect(named.variations('spell', 'test')).toEqual([4]);
    expect(named.variations('add', 'test')).toEqual([5]);
    const onTraining = await createEnv(families(TASKS, [], (t) => t.kind).env);
    expect(onTraining.variations('spell', 'test')).toEqual([1, 3]);
    const partly = await createEnv(families(TASKS, [], (t) => (t.kind === 'add' ? 'add' : undefined)).env);
    expect(partly.tasks()).toEqual(['add', AGENT_TASK]);
    expect(partly.variations(AGENT_TASK, 'train')).toEqual([1, 3]);
    for (const cfg of [families(TASKS, HELD_OUT), families(TASKS, HELD_OUT, () => undefined)]) {
      expect(cfg.env.options).not.toHaveProperty('task_names');
      const env = await createEnv(cfg.env);
      expect(env.tasks()).toEqual([AGENT_TASK]);
      expect(env.variations(AGENT_TASK, 'test')).toEqual([4, 5]);
    }
  });

  it('refuses names that leave a family untrained or unevaluated, or that are not strings', () => {
    expect(() => families(TASKS, [{ kind: 'add', q: '1 + 1' }], (t) => t.kind)).toThrow(
      'no held-out task is named "spell": give every training name held-out tasks',
    );
    expect(() => families(TASKS, [...HELD_OUT, { kind: 'spell', q: 'x' }], (t) => (t.q === 'x' ? 'other' : t.kind))).toThrow(
      'held-out task 3 is named "other", which no training task is (names: add, spell)',
    );
    expect(() => families(TASKS, [], (t) => (t.q === 'apple' ? '' : t.kind))).toThrow('training task 2 is named ""');
  });
});
