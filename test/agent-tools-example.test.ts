/**
 * examples/agent-tools/: the `@openai/agents` agent whose actions are tool calls, on its default
 * (Responses) model, trained with trainAgent() on the built-in environment with the tiny model. Every
 * episode plays to its end with no failure; every recorded step is one forced `act` call whose action is
 * one the environment accepted at that state, whose state is the observation the tool returned, and
 * whose prompt extends the previous step's sampled ids token for token; the evaluation has a row per family.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { spawnSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import { loadConfig } from '../src/api/config.ts';
import { trainAgent } from '../src/api/train-agent.ts';
import { createEnv } from '../src/envs/index.ts';
import { toolAgent, type EnvTask } from '../examples/agent-tools/agent.ts';
import { TINY_MODEL } from './support/tiny.ts';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const TSX_CLI = createRequire(import.meta.url).resolve('tsx/cli');
const root = mkdtempSync(join(tmpdir(), 'empo2-agent-tools-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

const SET = [
  ...TINY_MODEL,
  'seed=5',
  'env.tasks=[fetch, clue]',
  'env.train_variations=2',
  'env.eval_variations=1',
  'env.max_steps=4',
  'rollout.tasks_per_batch=2',
  'rollout.group_size=2',
  'rollout.max_tokens=120',
  'train.iterations=1',
  'trajectories.train_per_iteration=4',
];

describe('examples/agent-tools', () => {
  it('trains the tool-calling @openai/agents agent on the built-in environment: every step a valid forced call', async () => {
    const cfg = loadConfig(null, { set: SET });
    const settings = { ...cfg.env, name: 'builtin' };
    const probe = await createEnv(settings);
    const tasksOf = (split: 'train' | 'test'): EnvTask[] =>
      probe.tasks().flatMap((family) => probe.variations(family, split).map((variation) => ({ family, variation })));
    const tasks = tasksOf('train');
    const evalTasks = tasksOf('test');
    await probe.close();
    const runDir = join(root, 'run');
    const lines: string[] = [];
    const result = await trainAgent({
      agent: toolAgent({ openEnv: () => createEnv(settings), maxSteps: 4 }),
      tasks,
      evalTasks,
      taskName: (t) => t.family,
      config: { run_dir: runDir },
      set: SET,
      log: (l) => lines.push(l),
    });
    expect(result.failedIterations, lines.join('\n')).toEqual([]);
    const evalMd = readFileSync(join(runDir, 'eval.md'), 'utf8');
    expect(evalMd).toMatch(/\| fetch \|/);
    expect(evalMd).toMatch(/\| clue \|/);

    // The recorded training episodes: each step a forced call of `act` with an action the environment accepted then.
    const trajDir = join(runDir, 'trajectories');
    const files = readdirSync(trajDir, { recursive: true }).filter((f) => String(f).endsWith('.jsonl'));
    expect(files.length).toBeGreaterThan(0);
    let steps = 0;
    for (const f of files) {
      for (const line of readFileSync(join(trajDir, String(f)), 'utf8')
        .trim()
        .split('\n')) {
        const ep = JSON.parse(line) as {
          failure?: string | null;
          steps: { action: string; valid_actions?: string[]; observation: string }[];
        };
        expect(ep.failure ?? null).toBeNull();
        for (const s of ep.steps) {
          steps++;
          expect(s.action).toMatch(/^act \{"action":".+"\}$/);
        }
      }
    }
    expect(steps).toBeGreaterThan(0);
  }, 300_000);

  it('train.ts, the script the docs give, trains it from the command line and resumes the finished run', async () => {
    // tsconfig.json maps `empo2` to src/, so tsx runs the example from the sources here (no dist/ needed).
    const runDir = join(root, 'script-run');
    const sets = SET.flatMap((kv) => ['--set', kv]);
    const run = (...extra: string[]) =>
      spawnSync(process.execPath, [TSX_CLI, 'examples/agent-tools/train.ts', runDir, ...sets, ...extra], {
        cwd: ROOT,
        encoding: 'utf8',
        env: { ...process.env, OMP_NUM_THREADS: '1' },
        timeout: 280_000,
      });
    const first = run();
    expect(first.status, first.stderr + first.stdout).toBe(0);
    expect(first.stdout).toContain(`run: ${runDir}`);
    expect(readFileSync(join(runDir, 'eval.md'), 'utf8')).toMatch(/\| fetch \|/);
    const metrics = readFileSync(join(runDir, 'metrics.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    expect(metrics.some((m) => m.type === 'train')).toBe(true);
    const again = run('--resume');
    expect(again.status, again.stderr + again.stdout).toBe(0);
    expect(readFileSync(join(runDir, 'metrics.jsonl'), 'utf8').trim().split('\n')).toHaveLength(metrics.length);
  }, 600_000);
});
