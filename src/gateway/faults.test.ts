/**
 * Faults end episodes, never the run: 50 faulty episodes among 60 of one iteration (agents that throw,
 * hang past the timeout with or without a call waiting, never report a reward, make no call, go over
 * the call or the token budget; agent processes that hang, leave a child running, or exit with an
 * error) each end as a failed episode with its reason logged and left out of the update; the run
 * trains on the 10 good ones and finishes; afterwards no request is open and no process is left.
 */
import { describe, expect, it } from 'vitest';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadConfig } from '../config/load.ts';
import { train } from '../trainer/trainer.ts';
import { TINY_MODEL } from '../../test/support/tiny.ts';
import { openAgentPlay, runAgentProcess, type AgentInput } from './index.ts';
import { agentConfig, registerAgentEnv } from './tasks-env.ts';

const FAULTS = [
  'throws',
  'hangs',
  'hangs-in-call',
  'no-reward',
  'no-call',
  'call-budget',
  'token-budget',
  'process-hangs',
  'process-orphan',
  'process-exit',
] as const;

/** A marker in the fault processes' command lines, to find any left running. */
const MARK = 'sleep 98';

async function chat(input: AgentInput, maxTokens: number): Promise<string> {
  const res = await fetch(`${input.baseURL}/chat/completions`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${input.apiKey}` },
    body: JSON.stringify({
      model: input.model,
      messages: [{ role: 'user', content: `Play ${String(input.task)}.` }],
      max_tokens: maxTokens,
    }),
    signal: input.signal,
  });
  const json = (await res.json()) as { choices?: { message: { content: string } }[]; error?: { message: string } };
  if (!res.ok) throw new Error(`gateway ${res.status}: ${json.error?.message}`);
  return json.choices![0].message.content;
}

const never = () => new Promise<never>(() => {});

function faultyAgent() {
  let trainingEpisodes = 0;
  let good = 0;
  return async (input: AgentInput): Promise<number | undefined> => {
    const kind = input.task === 'held-out' ? 'good' : trainingEpisodes < 50 ? FAULTS[trainingEpisodes % FAULTS.length] : 'good';
    if (input.task !== 'held-out') trainingEpisodes++;
    switch (kind) {
      case 'throws':
        await chat(input, 4);
        throw new Error('the agent broke');
      case 'hangs':
        await chat(input, 4);
        return never();
      case 'hangs-in-call': {
        // Never reads its answer and never returns: the request stays open until the episode ends.
        void fetch(`${input.baseURL}/chat/completions`, {
          method: 'POST',
          headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${input.apiKey}` },
          body: JSON.stringify({ messages: [{ role: 'user', content: 'x' }], max_tokens: 2 }),
        }).catch(() => {});
        return never();
      }
      case 'no-reward':
        await chat(input, 4);
        return undefined;
      case 'no-call':
        return 1;
      case 'call-budget':
        for (;;) await chat(input, 1);
      case 'token-budget':
        for (;;) await chat(input, 8);
      case 'process-hangs':
        return (await runAgentProcess({ command: `${MARK}7` }, input)) as number;
      case 'process-orphan':
        return (await runAgentProcess({ command: `${MARK}8 & echo "reward: 1"` }, input)) as number;
      case 'process-exit':
        return (await runAgentProcess({ command: 'echo broken >&2; exit 3' }, input)) as number;
      default:
        await chat(input, 4);
        return (good++ % 3) / 2; // rewards that differ within a group, so the good episodes train
    }
  };
}

function leftoverProcesses(): string[] {
  return execFileSync('ps', ['-eo', 'pid,args'], { encoding: 'utf8' })
    .split('\n')
    .filter((l) => l.includes(MARK) && !l.includes('ps -eo'));
}

describe('faults through the gateway', () => {
  it('50 faulty episodes fail with their reasons, the run goes on, and no request or process is left', async () => {
    const root = mkdtempSync(join(tmpdir(), 'empo2-gateway-faults-'));
    registerAgentEnv();
    const tasks = Array.from({ length: 12 }, (_, i) => `task ${i}`);
    const cfg = agentConfig(
      loadConfig(null, [
        ...TINY_MODEL,
        `run_dir=${join(root, 'run')}`,
        'train.iterations=1',
        'algo.name=grpo',
        'rollout.tasks_per_batch=12',
        'rollout.group_size=5',
        'rollout.max_tokens=8',
        'env.max_steps=6',
        'env.eval_variations=1',
      ]),
      { tasks, evalTasks: ['held-out'] },
    );
    const lines: string[] = [];
    const play = await openAgentPlay<unknown>(cfg, {
      agent: faultyAgent(),
      taskOf: (job) => (job.variation < tasks.length ? tasks[job.variation] : 'held-out'),
      // Long enough that the good episodes finish on a loaded 2-core machine, each of their lockstep calls
      // crossing the HTTP front's thread twice (../util/http-front.ts); the hanging ones wait it out together.
      timeoutSeconds: 15,
      maxTokens: 12,
      batchWaitMs: 100,
      log: (l) => lines.push(l),
    });
    try {
      const result = await train(cfg, { resume: false, log: (l) => lines.push(l), player: play.player });
      expect(result.iterations).toBe(1);
      expect(result.finalEval?.summary.episodes).toBe(1);
      const failed = lines.filter((l) => l.includes('failed and is left out of the update'));
      expect(failed).toHaveLength(50);
      const reasons = [
        'the agent threw: the agent broke',
        "no reward within 15 s of the agent's own time",
        'never reported a reward',
        'made no call to the gateway',
        'went over its budget of 6 calls',
        'went over its budget of 12 response tokens',
        'the agent command exited with code 3',
      ];
      for (const reason of reasons)
        expect(
          failed.some((l) => l.includes(reason)),
          reason,
        ).toBe(true);
      const metrics = readFileSync(join(cfg.run_dir, 'metrics.jsonl'), 'utf8')
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l));
      const trainLine = metrics.find((m) => m.type === 'train');
      // The failed episodes stay in the batch as outcome 'failed' (as an environment failure does): counted, not scored or trained on.
      expect(Object.values(trainLine.modes as Record<string, number>).reduce((a, b) => a + b, 0)).toBe(60);
      expect(trainLine.failed).toBe(50);
      expect(trainLine.sequences).toBeGreaterThan(0);
      expect(play.gateway.openRequests()).toBe(0);
      expect(leftoverProcesses()).toEqual([]);
    } finally {
      await play.close();
      rmSync(root, { recursive: true, force: true });
    }
  }, 300_000);
});
