/**
 * `empo2 train --agent "<command>" --tasks <file>`: a process per episode that finds its base URL, key,
 * model and task in EMPO2_* variables, calls the gateway and prints "reward: <number>" last; the run
 * trains an iteration on its episodes and evaluates on --eval-tasks, a row per --task-name.
 */
import { describe, expect, it } from 'vitest';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { TINY_MODEL } from '../../test/support/tiny.ts';

const AGENT = `
const task = JSON.parse(process.env.EMPO2_TASK_JSON);
const res = await fetch(process.env.EMPO2_BASE_URL + '/chat/completions', {
  method: 'POST',
  headers: { 'Content-Type': 'application/json', Authorization: 'Bearer ' + process.env.EMPO2_API_KEY },
  body: JSON.stringify({ model: process.env.EMPO2_MODEL, messages: [{ role: 'user', content: 'Say ' + task.word }], max_tokens: 6 }),
});
const answer = (await res.json()).choices[0].message.content;
console.log('some output first');
console.log('reward: ' + (answer.includes(task.word[0]) ? 1 : 0.25));
`;

describe('empo2 train --agent', () => {
  it('runs the command per episode with the episode in its environment and trains on the reward it prints', () => {
    const root = mkdtempSync(join(tmpdir(), 'empo2-cli-agent-'));
    try {
      writeFileSync(join(root, 'agent.mjs'), AGENT);
      writeFileSync(join(root, 'tasks.jsonl'), '{"word": "apple", "kind": "fruit"}\n{"word": "river", "kind": "place"}\n');
      writeFileSync(join(root, 'eval.jsonl'), '{"word": "stone", "kind": "place"}\n{"word": "pear", "kind": "fruit"}\n');
      const main = resolve(import.meta.dirname, '..', 'cli', 'main.ts');
      const set = [...TINY_MODEL, 'rollout.tasks_per_batch=2', 'rollout.group_size=2', 'rollout.max_tokens=6', 'env.eval_variations=1'];
      const r = spawnSync(
        process.execPath,
        [
          '--import',
          'tsx',
          main,
          'train',
          '--agent',
          `node ${join(root, 'agent.mjs')}`,
          '--tasks',
          join(root, 'tasks.jsonl'),
          '--eval-tasks',
          join(root, 'eval.jsonl'),
          '--task-name',
          'kind',
          '--run-dir',
          join(root, 'run'),
          '--iterations',
          '1',
          ...set.flatMap((s) => ['--set', s]),
        ],
        { encoding: 'utf8', timeout: 240_000, env: { ...process.env, OMP_NUM_THREADS: '1' } },
      );
      expect(r.status, r.stderr).toBe(0);
      expect(r.stdout).toContain('gateway: http://127.0.0.1:');
      const metrics = readFileSync(join(root, 'run', 'metrics.jsonl'), 'utf8')
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l));
      const trainLine = metrics.find((m) => m.type === 'train');
      expect(Object.values(trainLine.modes as Record<string, number>).reduce((a, b) => a + b, 0)).toBe(4);
      expect(trainLine.mean_score).toBeGreaterThanOrEqual(25);
      expect(r.stdout).not.toContain('left out of the update');
      const rows = readFileSync(join(root, 'run', 'eval.md'), 'utf8')
        .split('\n')
        .filter((l) => l.startsWith('| ') && !l.startsWith('| task'))
        .map((l) => l.split(' | ').slice(0, 2).join(' | '));
      expect(rows).toEqual(['| fruit | 1', '| place | 1', '| **all** | 2']);
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  }, 300_000);
});
