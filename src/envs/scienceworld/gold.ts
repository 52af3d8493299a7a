/**
 * Replaying the simulator's gold action sequences through the adapter: the end-to-end check
 * that our reset/step/score path reproduces what the simulator's own solver achieves.
 *
 *   npx tsx src/envs/scienceworld/gold.ts --tasks all --split test --count 3 --pool 2
 *   npx tsx src/envs/scienceworld/gold.ts --tasks boil,melt --variations 21,25
 *
 * Prints one line per episode and a closing "N passed, M failed" line; exits 1 on any failure.
 */
import { parseArgs } from 'node:util';
import type { Split } from '../types.ts';
import { taskNames } from './catalog.ts';
import { ScienceWorldEnv, type ScienceWorldEnvOptions } from './env.ts';
import { ScienceWorldPool } from './pool.ts';

/** Gold paths can be longer than the reference step limits (boil variation 22: 174 actions). */
export function goldReplayOptions(extra: ScienceWorldEnvOptions = {}): ScienceWorldEnvOptions {
  const unlimited = 100_000;
  return {
    ...extra,
    goldPath: extra.goldPath ?? true,
    stepLimits: Object.fromEntries(taskNames().map((task) => [task, unlimited])),
    defaultStepLimit: unlimited,
    moveLimit: unlimited,
  };
}

export interface GoldReplay {
  task: string;
  variation: number;
  goldLength: number;
  steps: number;
  score: number;
  done: boolean;
  outcome: string;
  seconds: number;
}

/** Resets (task, variation) and plays the gold actions until the episode ends. */
export async function replayGold(env: ScienceWorldEnv, task: string, variation: number): Promise<GoldReplay> {
  const started = performance.now();
  await env.reset(task, variation);
  const gold = env.goldActions();
  let steps = 0;
  let outcome = 'running';
  for (const action of gold) {
    const result = await env.step(action);
    steps++;
    outcome = String(result.info?.outcome);
    if (result.done) break;
  }
  return {
    task,
    variation,
    goldLength: gold.length,
    steps,
    score: env.score(),
    done: env.done(),
    outcome,
    seconds: (performance.now() - started) / 1000,
  };
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      tasks: { type: 'string', default: 'all' },
      split: { type: 'string', default: 'test' },
      count: { type: 'string', default: '1' },
      offset: { type: 'string', default: '0' },
      variations: { type: 'string' },
      pool: { type: 'string', default: '1' },
      simplification: { type: 'string', default: 'easy' },
    },
  });
  const split = values.split as Split;
  if (!['train', 'dev', 'test'].includes(split)) throw new Error(`--split must be train, dev or test, got '${values.split}'`);
  const tasks = values.tasks === 'all' ? taskNames() : values.tasks.split(',').map((task) => task.trim());
  const count = Number(values.count);
  const offset = Number(values.offset);
  const poolSize = Number(values.pool);
  const explicit = values.variations?.split(',').map(Number);

  const pool = new ScienceWorldPool(poolSize, goldReplayOptions({ simplification: values.simplification }));
  const probe = new ScienceWorldEnv(goldReplayOptions());
  const jobs = tasks.flatMap((task) =>
    (explicit ?? probe.variations(task, split).slice(offset, offset + count)).map((variation) => ({ task, variation })),
  );
  let passed = 0;
  let failed = 0;
  try {
    await pool.start();
    await Promise.all(
      Array.from({ length: poolSize }, async () => {
        for (let job = jobs.shift(); job; job = jobs.shift()) {
          const { task, variation } = job;
          const replay = await pool.use((env) => replayGold(env, task, variation)).catch((error: Error) => error);
          if (replay instanceof Error) {
            failed++;
            console.log(`FAIL ${task} variation ${variation}: ${replay.message}`);
            continue;
          }
          const ok = replay.score === 100 && replay.done;
          if (ok) passed++;
          else failed++;
          console.log(
            `${ok ? 'ok  ' : 'FAIL'} ${task} variation ${variation}: score ${replay.score}, ${replay.outcome} after ${replay.steps}/${replay.goldLength} gold actions, ${replay.seconds.toFixed(1)} s`,
          );
        }
      }),
    );
  } finally {
    await pool.close();
  }
  console.log(`${passed} passed, ${failed} failed`);
  if (failed > 0) process.exitCode = 1;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  main().catch((error: unknown) => {
    console.error(error instanceof Error ? error.message : error);
    process.exit(1);
  });
}
