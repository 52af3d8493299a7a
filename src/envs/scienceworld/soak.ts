/**
 * Soak test: many short episodes on a pool of simulators with random valid actions, while
 * simulators are killed (SIGKILL of the JVM or the bridge) and frozen (SIGSTOP, caught by the
 * per-call deadline) along the way. At the end every simulator process ever started must be gone
 * and this process must have no more child processes than before.
 *
 *   npx tsx src/envs/scienceworld/soak.ts --episodes 200 --pool 2 --fault-every 25
 *
 * Exits 1 if an episode threw, or if any simulator process outlived the pool.
 */
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import pidtree from 'pidtree';
import { ScienceWorldPool } from './pool.ts';

function processGone(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).startsWith('Z');
  } catch {
    return true;
  }
}

/** Small seeded generator so a soak run can be repeated exactly (mulberry32). */
function random(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      episodes: { type: 'string', default: '200' },
      pool: { type: 'string', default: '2' },
      'fault-every': { type: 'string', default: '25' },
      'max-steps': { type: 'string', default: '8' },
      seed: { type: 'string', default: '1' },
    },
  });
  const episodes = Number(values.episodes);
  const poolSize = Number(values.pool);
  const faultEvery = Number(values['fault-every']);
  const maxSteps = Number(values['max-steps']);
  const next = random(Number(values.seed));
  const childrenBefore = (await pidtree(process.pid)).length;

  const pool = new ScienceWorldPool(poolSize, { stepTimeoutMs: 5_000 });
  const tasks = await pool.use(async (env) => env.tasks());
  const outcomes = new Map<string, number>();
  const seenPids = new Set<number>();
  const errors: string[] = [];
  const faults = ['kill-java', 'kill-bridge', 'freeze'] as const;
  let injected = 0;
  let steps = 0;
  const queue = Array.from({ length: episodes }, (_, index) => index);
  const started = performance.now();
  try {
    await pool.start();
    await Promise.all(
      Array.from({ length: poolSize }, async () => {
        for (let index = queue.shift(); index !== undefined; index = queue.shift()) {
          const episode = index;
          await pool
            .use(async (env) => {
              // The paper's training set: the first 5 train variations of each task.
              const task = tasks[Math.floor(next() * tasks.length)];
              const firstFive = env.variations(task, 'train').slice(0, 5);
              const variation = firstFive[Math.floor(next() * firstFive.length)];
              const reset = await env.reset(task, variation, episode);
              const pids = env.simulatorPids;
              if (pids) seenPids.add(pids.bridge).add(pids.java ?? pids.bridge);
              const fault =
                faultEvery > 0 && episode % faultEvery === faultEvery - 1
                  ? faults[((episode / faultEvery) % faults.length) | 0]
                  : undefined;
              const faultAt = Math.floor(next() * 3);
              let valid = reset.validActions;
              for (let step = 0; step < Math.min(maxSteps, env.maxSteps(task)); step++) {
                if (fault && step === faultAt && pids) {
                  injected++;
                  if (fault === 'kill-java' && pids.java) process.kill(pids.java, 'SIGKILL');
                  if (fault === 'kill-bridge') process.kill(pids.bridge, 'SIGKILL');
                  if (fault === 'freeze') process.kill(pids.bridge, 'SIGSTOP');
                }
                const result = await env.step(valid[Math.floor(next() * valid.length)] ?? 'look around');
                steps++;
                valid = result.validActions;
                if (result.done) {
                  const outcome = String(result.info?.outcome);
                  outcomes.set(outcome, (outcomes.get(outcome) ?? 0) + 1);
                  return;
                }
              }
              outcomes.set('cut short by soak', (outcomes.get('cut short by soak') ?? 0) + 1);
            })
            .catch((error: Error) => errors.push(`episode ${episode}: ${error.message}`));
        }
      }),
    );
  } finally {
    await pool.close();
  }
  const seconds = (performance.now() - started) / 1000;
  const deadline = Date.now() + 10_000;
  let survivors = [...seenPids].filter((pid) => !processGone(pid));
  let childrenAfter = (await pidtree(process.pid)).length;
  while ((survivors.length > 0 || childrenAfter > childrenBefore) && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 200));
    survivors = survivors.filter((pid) => !processGone(pid));
    childrenAfter = (await pidtree(process.pid)).length;
  }

  console.log(
    `${episodes} episodes, ${steps} steps on ${poolSize} simulators in ${seconds.toFixed(0)} s (${(steps / seconds).toFixed(1)} steps/s)`,
  );
  console.log(
    `faults injected: ${injected} (the rest of the scheduled ones fell after their episode had ended); simulators restarted: ${pool.restarts}`,
  );
  console.log(`episode endings: ${[...outcomes].map(([outcome, count]) => `${outcome} ${count}`).join(', ')}`);
  console.log(`simulator processes started: ${seenPids.size}; still alive after close: ${survivors.length}`);
  console.log(`child processes of this process: ${childrenBefore} before, ${childrenAfter} after`);
  for (const error of errors) console.log(`ERROR ${error}`);
  const ok = errors.length === 0 && survivors.length === 0 && childrenAfter <= childrenBefore && pool.restarts === injected;
  console.log(ok ? 'soak passed: no episode threw, no simulator process leaked' : 'soak FAILED');
  if (!ok) process.exitCode = 1;
}

main().catch((error: unknown) => {
  console.error(error instanceof Error ? error.message : error);
  process.exit(1);
});
