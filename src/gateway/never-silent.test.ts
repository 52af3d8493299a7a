/**
 * The gateway answers while the trainer's thread is blocked (issue 88). TensorFlow.js computes
 * synchronously, so sampling, the update and checkpoint writes block the main thread for seconds with
 * a real model; here the tiny model's run is made to block as long (6 s, past the 5 s keep-alive
 * timeout the gateway had) while sampling, updating and checkpointing. From other processes, an agent
 * harness (the `openai` client, maxRetries 0, Node's kept-alive connections) plays every episode, its
 * calls arriving during the blocks, and a poller asks /health every 50 ms through the whole run.
 */
import { describe, expect, it } from 'vitest';
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { loadConfig } from '../config/load.ts';
import type { PolicyEngine } from '../policy/types.ts';
import { train } from '../trainer/trainer.ts';
import { TINY_MODEL } from '../../test/support/tiny.ts';
import { openAgentPlay, type AgentInput } from './index.ts';
import { agentConfig, registerAgentEnv } from './tasks-env.ts';

const BLOCK_MS = 6_000;

/** Blocks this thread as a synchronous computation does (without spinning a core of the shared machine). */
function block(ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

/** `engine`, blocking the thread for BLOCK_MS before its `nth` generate call. */
function blockingAt(engine: PolicyEngine, nth: number): PolicyEngine {
  let calls = 0;
  return new Proxy(engine, {
    get(target, prop) {
      if (prop === 'generate')
        return (...args: Parameters<PolicyEngine['generate']>) => {
          if (++calls === nth) block(BLOCK_MS);
          return target.generate(...args);
        };
      const value = Reflect.get(target, prop, target) as unknown;
      return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
    },
  });
}

/** The agent harness in its own process (test/support/openai-agent-host.mjs), one episode per line. */
function agentHost() {
  const child = spawn(process.execPath, ['test/support/openai-agent-host.mjs'], { stdio: ['pipe', 'pipe', 'inherit'] });
  const waiting = new Map<number, (r: { ok: boolean; error?: string }) => void>();
  createInterface({ input: child.stdout }).on('line', (line) => {
    const r = JSON.parse(line) as { id: number; ok: boolean; error?: string };
    waiting.get(r.id)?.(r);
    waiting.delete(r.id);
  });
  let next = 0;
  const results: { ok: boolean; error?: string }[] = [];
  const play = async (input: AgentInput, pauseMs: number[]) => {
    const id = next++;
    const done = new Promise<{ ok: boolean; error?: string }>((resolve) => waiting.set(id, resolve));
    const { baseURL, apiKey, model, task } = input;
    child.stdin.write(JSON.stringify({ id, baseURL, apiKey, model, task, calls: pauseMs.length, pauseMs }) + '\n');
    const r = await done;
    results.push(r);
    if (!r.ok) throw new Error(r.error);
    return ((id % 3) + 1) / 3; // rewards that differ within a group, so the update trains
  };
  return { play, results, stop: () => child.kill() };
}

interface PollLine {
  at: number;
  ms: number;
  status: number;
  phase: string | null;
  error?: string;
}

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

describe('a gateway that never goes silent', () => {
  it('answers /health within a second and every openai call of 22 episodes while the trainer blocks for 6 s at a time', async () => {
    const root = mkdtempSync(join(tmpdir(), 'empo2-never-silent-'));
    registerAgentEnv();
    const tasks = ['task a', 'task b'];
    const evalTasks = ['held-out a', 'held-out b'];
    const cfg = agentConfig(
      loadConfig(null, [
        ...TINY_MODEL,
        `run_dir=${join(root, 'run')}`,
        'train.iterations=2',
        'train.eval_every=1',
        'train.checkpoint_every=1',
        'algo.name=grpo',
        'rollout.tasks_per_batch=2',
        'rollout.group_size=4',
        'rollout.max_tokens=3',
        'env.max_steps=4',
        'env.eval_variations=2',
      ]),
      { tasks, evalTasks },
    );
    const host = agentHost();
    const lines: string[] = [];
    let episode = 0;
    const play = await openAgentPlay<unknown>(cfg, {
      // Every other episode pauses before its second call, which so arrives while the others' batch blocks.
      agent: (input) => host.play(input, [0, episode++ % 2 ? 300 : 0, 0]),
      taskOf: (job) => (job.variation < tasks.length ? tasks[job.variation] : evalTasks[job.variation - tasks.length]),
      batchWaitMs: 50,
      timeoutSeconds: 120,
      log: (l) => lines.push(l),
    });
    const pollFile = join(root, 'health.jsonl');
    const poller = spawn(process.execPath, ['test/support/health-poller.mjs', `${play.gateway.url}/health`, pollFile, '50'], {
      stdio: 'inherit',
    });
    const blocks: string[] = [];
    try {
      while (!readFileSync(pollFile, { encoding: 'utf8', flag: 'a+' }).includes('\n')) await new Promise((r) => setTimeout(r, 50));
      const result = await train(cfg, {
        resume: false,
        log: (l) => lines.push(l),
        // The second sampling of each rollout blocks, as a real model's does, while half the agents' calls are on their way.
        player: (engine, jobs, o) => play.player(o.evaluation ? engine : blockingAt(engine, 2), jobs, o),
        onPhase: (p) => {
          play.onPhase(p);
          const at = `${p.phase} ${p.iteration}`;
          if ((p.phase === 'update' || p.phase === 'checkpoint') && !blocks.includes(at)) {
            blocks.push(at);
            block(BLOCK_MS);
          }
        },
      });
      expect(result.iterations).toBe(2);
      expect(result.failedIterations).toEqual([]);
      expect(result.finalEval?.invalid ?? null).toBeNull();
    } finally {
      poller.kill('SIGTERM');
      await new Promise((r) => poller.once('exit', r));
      host.stop();
      await play.close();
    }
    try {
      // 2 iterations × 8 episodes, and 2 held-out episodes in each of 3 evaluations (before, after iteration 1, final).
      expect(host.results).toHaveLength(22);
      expect(host.results.filter((r) => !r.ok)).toEqual([]);
      expect(lines.filter((l) => /failed and is left out|evaluation is invalid|every episode failed/.test(l))).toEqual([]);
      expect(blocks.length).toBeGreaterThanOrEqual(4);

      const polls = readFileSync(pollFile, 'utf8')
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l) as PollLine);
      expect(polls.filter((p) => p.status !== 200)).toEqual([]);
      const phases = new Set(polls.map((p) => p.phase));
      for (const phase of ['rollout', 'update', 'checkpoint', 'evaluation']) expect(phases, phase).toContain(phase);
      const ms = polls.map((p) => p.ms).sort((a, b) => a - b);
      const gaps = polls.slice(1).map((p, i) => p.at - polls[i].at);
      console.log(
        `/health from another process: ${ms.length} answers, p50 ${percentile(ms, 50).toFixed(1)} ms, p99 ${percentile(ms, 99).toFixed(1)} ms, ` +
          `max ${ms.at(-1)!.toFixed(1)} ms; longest gap between answers ${Math.max(...gaps)} ms; the trainer's thread blocked ${BLOCK_MS} ms ` +
          `${blocks.length + 2} times`,
      );
      // The machine the suite runs on may be loaded (two test files at once on two cores, other jobs): the
      // bounds are half a block, which a front on the blocked thread could not meet, not the 100 ms the
      // answers take unloaded (p99 24 ms, longest gap 98 ms with this file alone on the machine).
      expect(ms.at(-1)!).toBeLessThan(BLOCK_MS / 2);
      expect(Math.max(...gaps)).toBeLessThan(BLOCK_MS / 2);
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  }, 300_000);
});
