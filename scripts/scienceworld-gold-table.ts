/**
 * Evidence that the ScienceWorld adapter scores gold action sequences correctly beyond the CI
 * sample: for every task, replays the simulator's gold sequence on test variations that the
 * tests do not use (by default the last 3 of each task's test split) and prints one table row
 * per task: did every replay reach score 100 with done = true?
 *
 *   npx tsx scripts/scienceworld-gold-table.ts                     # all 30 tasks x 3, 2 simulators
 *   npx tsx scripts/scienceworld-gold-table.ts --per-task 5 --tasks boil,melt --pool 1
 *
 * About 4 minutes for 90 replays on two cores. Exits 1 if any replay fails.
 */
import { parseArgs } from 'node:util';
import {
  GOLD_SAMPLE,
  goldReplayOptions,
  replayGold,
  ScienceWorldPool,
  splitVariations,
  taskNames,
  type GoldReplay,
} from '../src/internals.ts';

function positiveInt(text: string, name: string): number {
  const value = Number(text);
  if (!Number.isInteger(value) || value < 1) throw new Error(`${name} must be a positive integer, got '${text}'`);
  return value;
}

/** The last `count` test variations of a task that the CI sample leaves out. */
export function untestedVariations(task: string, count: number): number[] {
  const inTests = new Set(GOLD_SAMPLE.filter(([name]) => name === task).map(([, variation]) => variation));
  return splitVariations(task, 'test')
    .filter((variation) => !inTests.has(variation))
    .slice(-count);
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      tasks: { type: 'string', default: 'all' },
      'per-task': { type: 'string', default: '3' },
      pool: { type: 'string', default: '2' },
    },
  });
  const known = taskNames();
  const tasks = values.tasks === 'all' ? known : values.tasks.split(',').map((task) => task.trim());
  for (const task of tasks) if (!known.includes(task)) throw new Error(`--tasks: unknown ScienceWorld task '${task}'`);
  const perTask = positiveInt(values['per-task'], '--per-task');
  const poolSize = positiveInt(values.pool, '--pool');

  const jobs = tasks.flatMap((task) => untestedVariations(task, perTask).map((variation) => ({ task, variation })));
  const results = new Map<string, Array<GoldReplay | { task: string; variation: number; error: string }>>();
  const queue = [...jobs];
  const pool = new ScienceWorldPool(poolSize, goldReplayOptions());
  const started = performance.now();
  try {
    await pool.start();
    await Promise.all(
      Array.from({ length: poolSize }, async () => {
        for (let job = queue.shift(); job; job = queue.shift()) {
          const { task, variation } = job;
          const replay = await pool
            .use((env) => replayGold(env, task, variation))
            .catch((error: Error) => ({ task, variation, error: error.message }));
          results.set(task, [...(results.get(task) ?? []), replay]);
          const line =
            'error' in replay
              ? `error: ${replay.error}`
              : `score ${replay.score}, ${replay.outcome}, ${replay.steps} actions, ${replay.seconds.toFixed(1)} s`;
          process.stderr.write(`${task} ${variation}: ${line}\n`);
        }
      }),
    );
  } finally {
    await pool.close();
  }
  const seconds = (performance.now() - started) / 1000;

  let failures = 0;
  const rows = tasks.map((task) => {
    const replays = (results.get(task) ?? []).sort((a, b) => a.variation - b.variation);
    const bad = replays.filter((r) => 'error' in r || r.score !== 100 || !r.done);
    failures += bad.length;
    const steps = replays.map((r) => ('error' in r ? '-' : String(r.steps))).join(', ');
    const verdict =
      bad.length === 0
        ? 'yes'
        : `NO (${bad.map((r) => ('error' in r ? `${r.variation}: ${r.error}` : `${r.variation}: score ${r.score}, ${r.outcome}`)).join('; ')})`;
    return `| ${task} | ${replays.map((r) => r.variation).join(', ')} | ${steps} | ${verdict} |`;
  });
  console.log('| task | test variations | gold actions | all score 100 and done? |');
  console.log('|---|---|---|---|');
  for (const row of rows) console.log(row);
  console.log(
    `\n${jobs.length - failures}/${jobs.length} replays reached 100 and done, ${tasks.length} tasks, ${poolSize} simulators, ${seconds.toFixed(0)} s`,
  );
  if (failures > 0) process.exitCode = 1;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  main().catch((error: unknown) => {
    console.error(error instanceof Error ? error.message : error);
    process.exit(1);
  });
}
