/**
 * Total failure (issue #90): a run in which every episode fails, iteration after iteration (an agent
 * command with a typo exits 127), stops after three such iterations in a row with one clear error,
 * instead of running to its end: trainAgent() rejects with an AllEpisodesFailedError, `empo2 train`
 * exits with status 1. The log names each failed episode by the id its agent was given.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { TINY_MODEL } from '../../test/support/tiny.ts';
import { trainAgent } from '../api/train-agent.ts';
import { AllEpisodesFailedError } from '../run/failure-streak.ts';
import type { AgentInput } from './player.ts';

const root = mkdtempSync(join(tmpdir(), 'empo2-total-failure-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

const RUN = ['rollout.tasks_per_batch=2', 'rollout.group_size=2', 'rollout.max_tokens=3', 'env.eval_variations=1', 'algo.name=grpo'];
const FAILED_LINE = /^iter (\d+): episode (\S+) \(task agent #\d+\) failed and is left out of the update: (.*)$/;

describe('a run in which every episode fails', () => {
  it('trainAgent rejects after three such iterations in a row, and the log names the episodes as their agents saw them', async () => {
    const seen = new Set<string>();
    const agent = async (input: AgentInput<string>): Promise<number> => {
      if (input.task !== 'held-out') seen.add(input.episode.id);
      throw new Error('the tool is missing');
    };
    const lines: string[] = [];
    const run = trainAgent<string>({
      agent,
      tasks: ['a', 'b'],
      evalTasks: ['held-out'],
      set: [...TINY_MODEL, ...RUN, `run_dir=${join(root, 'lib')}`, 'train.iterations=6', 'train.checkpoint_every=2'],
      batchWaitMs: 50,
      log: (l) => lines.push(l),
    });
    const error = await run.then(
      () => null,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(AllEpisodesFailedError);
    const e = error as AllEpisodesFailedError;
    expect(e.iterations).toEqual([1, 2, 3]);
    expect(e.lastFailure).toBe('the agent threw: the tool is missing');
    expect(e.message).toMatch(/^every episode failed in iterations 1, 2 and 3 in a row, so the run stopped: /);
    const failed = lines.map((l) => FAILED_LINE.exec(l)).filter((m) => m !== null);
    expect(failed.map((m) => Number(m[1]))).toEqual([1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3]);
    // The ids in the log are the ids the agents were given, each once.
    expect(new Set(failed.map((m) => m[2]))).toEqual(seen);
    expect(seen.size).toBe(12);
    const trainLines = readFileSync(join(root, 'lib', 'metrics.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .filter((l) => l.includes('"type":"train"'));
    expect(trainLines).toHaveLength(3);
    // Closed as after any error: the lock is released and the checkpoint so far kept.
    expect(existsSync(join(root, 'lib', 'run.lock'))).toBe(false);
    expect(existsSync(join(root, 'lib', 'checkpoints'))).toBe(true);
  }, 240_000);

  it('empo2 train --agent with a command that does not exist stops after 3 iterations, with one error and status 1', () => {
    writeFileSync(join(root, 'tasks.jsonl'), '"a"\n"b"\n');
    const main = resolve(import.meta.dirname, '..', 'cli', 'main.ts');
    const args = ['train', '--agent', 'nonexistent-cmd-xyz --flag', '--tasks', join(root, 'tasks.jsonl'), '--run-dir', join(root, 'cli')];
    const set = [...TINY_MODEL, ...RUN, 'train.iterations=6'];
    const r = spawnSync(process.execPath, ['--import', 'tsx', main, ...args, '--iterations', '6', ...set.flatMap((s) => ['--set', s])], {
      encoding: 'utf8',
      timeout: 240_000,
      env: { ...process.env, OMP_NUM_THREADS: '1' },
    });
    expect(r.status, r.stderr.slice(-2000)).toBe(1);
    const errors = r.stderr.split('\n').filter((l) => l.startsWith('empo2:'));
    expect(errors).toHaveLength(1);
    expect(errors[0]).toMatch(
      /^empo2: error: every episode failed in iterations 1, 2 and 3 in a row, so the run stopped: .* The last failure: the agent threw: the agent command exited with code 127; its last stderr: .*nonexistent-cmd-xyz: (command )?not found/,
    );
    const failed = r.stdout
      .split('\n')
      .map((l) => FAILED_LINE.exec(l))
      .filter((m) => m !== null);
    expect(failed).toHaveLength(12);
    expect(r.stdout).not.toMatch(/^iter 4/m);
    // Each failed episode's id in the log is the one its process was given (its stderr lines carry it).
    const agentIds = new Set([...r.stderr.matchAll(/^\[agent (\S+)\] /gm)].map((m) => m[1]));
    for (const m of failed) expect(agentIds.has(m[2]), m[2]).toBe(true);
  }, 300_000);
});
