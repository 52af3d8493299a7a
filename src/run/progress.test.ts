import { describe, expect, it } from 'vitest';
import { EpisodeProgress, watchUpdate } from './progress.ts';
import { policyCalls } from './interrupt.ts';
import type { PolicyEngine, ProgressListener } from '../policy/types.ts';

const jobs = [
  { task: 'fetch', variation: 250, group: 0 },
  { task: 'fetch', variation: 251, group: 1 },
  { task: 'boil', variation: 250, group: 2 },
];

describe('episode progress', () => {
  it('off a terminal: one line per task once all its episodes have ended', () => {
    const lines: string[] = [];
    const p = new EpisodeProgress(jobs, { label: 'eval', terminal: false, write: (t) => lines.push(t) });
    jobs.forEach((_, i) => p.started(i, 10));
    p.stepped([0, 1, 2]);
    p.ended(0, 20);
    expect(lines).toEqual([]);
    p.stepped([1, 2]);
    p.ended(1, 40);
    p.ended(2, 100);
    p.finish();
    expect(lines).toHaveLength(2);
    expect(lines[0]).toMatch(/^eval: fetch done, 2 episodes, mean score 30\.0 \| 2\/3 episodes, 5 steps, \d+s elapsed\n$/);
    expect(lines[1]).toMatch(/^eval: boil done, 1 episodes, mean score 100\.0 \| 3\/3 episodes, 5 steps/);
  });

  it('on a terminal: one line updated in place with episodes, steps, elapsed and ETA', () => {
    const out: string[] = [];
    const p = new EpisodeProgress(jobs, { label: 'trial 1/5', terminal: true, write: (t) => out.push(t), intervalMs: 0 });
    jobs.forEach((_, i) => p.started(i, 10));
    p.stepped([0, 1, 2]);
    expect(out.at(-1)).toMatch(/^\r\x1b\[2Ktrial 1\/5: 0\/3 episodes \| 3 steps \| \d+s elapsed \| ETA \d+s$/);
    p.ended(0, 0);
    // One ended episode counts whole, the others by steps over their limit: (1 + 0.1 + 0.1) / 3.
    expect(p.fraction()).toBeCloseTo(1.2 / 3, 10);
    p.ended(1, 0);
    p.ended(2, 0);
    p.finish();
    expect(out.at(-2)).toMatch(/3\/3 episodes/);
    expect(out.at(-1)).toBe('\n');
  });

  it('off a terminal with a log interval: status lines while episodes run, none once all have ended', () => {
    const lines: string[] = [];
    const p = new EpisodeProgress(jobs, {
      label: 'iter 3 rollouts',
      terminal: false,
      write: (t) => lines.push(t),
      logIntervalMs: 0,
      taskLines: false,
    });
    jobs.forEach((_, i) => p.started(i, 10));
    p.stepped([0, 1, 2]);
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(/^iter 3 rollouts: 0\/3 episodes \| 3 steps \| \d+s elapsed \| ETA \d+s\n$/);
    p.ended(0, 20);
    p.stepped([1, 2]);
    expect(lines.at(-1)).toMatch(/^iter 3 rollouts: 1\/3 episodes \| 5 steps/);
    const before = lines.length;
    p.ended(1, 40);
    p.ended(2, 100);
    p.finish();
    // No task lines (taskLines: false) and no status line after the last episode.
    expect(lines.slice(before).every((l) => !l.includes('done') && !l.includes('3/3'))).toBe(true);

    const quiet: string[] = [];
    const q = new EpisodeProgress(jobs, {
      label: 'iter 4 rollouts',
      terminal: false,
      write: (t) => quiet.push(t),
      logIntervalMs: 60_000,
      taskLines: false,
    });
    jobs.forEach((_, i) => q.started(i, 10));
    q.stepped([0, 1, 2]);
    jobs.forEach((_, i) => q.ended(i, 0));
    expect(quiet).toEqual([]);
  });
});

describe('update progress (engines that report it)', () => {
  it('a status line at most every interval, naming the train step and its micro-batches; stopped after', () => {
    let listener: ProgressListener | null = null;
    const engine = { setProgressListener: (l: ProgressListener | null) => (listener = l) } as unknown as PolicyEngine;
    let clock = 0;
    const lines: string[] = [];
    const stop = watchUpdate(engine, 'iter 5 update', (l) => lines.push(l), { intervalMs: 120_000, now: () => clock });
    const report = (op: string, done: number, total: number, at: number) => {
      clock = at;
      listener!(op, done, total);
    };
    report('train_step', 1, 3, 60_000); // too soon for a line
    report('logprobs', 1, 1, 130_000); // scoring is not the update's train step
    report('train_step', 2, 3, 130_000);
    report('train_step', 3, 3, 200_000);
    report('train_step', 1, 4, 251_000);
    expect(lines).toEqual([
      'iter 5 update: train step 1, micro-batch 2/3 | 2m10s elapsed',
      'iter 5 update: train step 2, micro-batch 1/4 | 4m11s elapsed',
    ]);
    stop();
    expect(listener).toBeNull();
  });

  it("through the trainer's engine wrapper (policyCalls), the worker's reports still reach the watcher", () => {
    let listener: ProgressListener | null = null;
    const worker = { setProgressListener: (l: ProgressListener | null) => (listener = l) } as unknown as PolicyEngine;
    let clock = 0;
    const lines: string[] = [];
    const stop = watchUpdate(
      policyCalls(worker, () => null),
      'iter 5 update',
      (l) => lines.push(l),
      { intervalMs: 120_000, now: () => clock },
    );
    clock = 130_000;
    listener!('train_step', 1, 18);
    expect(lines).toEqual(['iter 5 update: train step 1, micro-batch 1/18 | 2m10s elapsed']);
    stop();
    expect(listener).toBeNull();
  });

  it('a resumed update counts its steps done; a step taken up from its part-way save is said at once', () => {
    let listener: ProgressListener | null = null;
    const engine = { setProgressListener: (l: ProgressListener | null) => (listener = l) } as unknown as PolicyEngine;
    let clock = 0;
    const lines: string[] = [];
    const stop = watchUpdate(engine, 'iter 5 update', (l) => lines.push(l), { intervalMs: 120_000, now: () => clock, stepsDone: 1 });
    const report = (done: number, total: number, at: number, resumed = false) => {
      clock = at;
      listener!('train_step', done, total, resumed);
    };
    report(1, 18, 1_000, true); // even one micro-batch taken from the save is said
    report(2, 18, 60_000);
    report(3, 18, 130_000);
    report(1, 18, 400_000);
    stop();
    expect(lines).toEqual([
      'iter 5 update: train step 2 goes on from its part-way save (1/18 micro-batches done)',
      'iter 5 update: train step 2, micro-batch 3/18 | 2m10s elapsed',
      'iter 5 update: train step 3, micro-batch 1/18 | 6m40s elapsed',
    ]);
  });

  it('an engine without progress reports: nothing to watch', () => {
    const stop = watchUpdate({} as PolicyEngine, 'iter 1 update', () => {
      throw new Error('no line expected');
    });
    expect(stop).not.toThrow();
  });
});
