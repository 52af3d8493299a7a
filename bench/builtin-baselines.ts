/**
 * Baselines of the built-in environment on the test split: mean score and success rate of a
 * uniformly random policy (random choice among valid actions) and of the scripted oracle,
 * per task, plus env speed.
 *
 *   npx tsx bench/builtin-baselines.ts [randomRolloutsPerVariation=10]
 */
import { BuiltinRng as Rng, Game, createBuiltinEnv, generateWorld, oracleAct, randomAct } from '../src/internals.ts';

const rollouts = Number(process.argv[2] ?? 10);
const env = createBuiltinEnv();
const rng = new Rng('bench:random');

interface Stats {
  score: number;
  success: number;
  steps: number;
  n: number;
}
const fresh = (): Stats => ({ score: 0, success: 0, steps: 0, n: 0 });

async function episode(task: string, variation: number, pick: () => string | null, s: Stats): Promise<number> {
  await env.reset(task, variation);
  let steps = 0;
  while (!env.done()) {
    const a = pick();
    if (a === null) break;
    await env.step(a);
    steps++;
  }
  s.score += env.score();
  s.success += env.score() === 100 ? 1 : 0;
  s.steps += steps;
  s.n++;
  return steps;
}

const rows: string[][] = [
  ['task', 'max steps', 'random score', 'random success', 'oracle score', 'oracle success', 'oracle steps (mean/max)'],
];
let totalSteps = 0;
const t0 = performance.now();
const all = { random: fresh(), oracle: fresh() };
for (const task of env.tasks()) {
  const r = fresh();
  const o = fresh();
  let oMax = 0;
  for (const v of env.variations(task, 'test')) {
    oMax = Math.max(oMax, await episode(task, v, () => oracleAct(env), o));
    for (let k = 0; k < rollouts; k++) await episode(task, v, () => randomAct(env.validActions(), rng), r);
  }
  totalSteps += r.steps + o.steps;
  for (const [a, b] of [
    [all.random, r],
    [all.oracle, o],
  ] as const)
    for (const key of Object.keys(b) as (keyof Stats)[]) a[key] += b[key];
  rows.push([
    task,
    String(env.maxSteps(task)),
    (r.score / r.n).toFixed(1),
    `${((100 * r.success) / r.n).toFixed(1)}%`,
    (o.score / o.n).toFixed(1),
    `${((100 * o.success) / o.n).toFixed(1)}%`,
    `${(o.steps / o.n).toFixed(1)} / ${oMax}`,
  ]);
}
const seconds = (performance.now() - t0) / 1000;
rows.push([
  'all',
  '',
  (all.random.score / all.random.n).toFixed(1),
  `${((100 * all.random.success) / all.random.n).toFixed(1)}%`,
  (all.oracle.score / all.oracle.n).toFixed(1),
  `${((100 * all.oracle.success) / all.oracle.n).toFixed(1)}%`,
  (all.oracle.steps / all.oracle.n).toFixed(1),
]);

const widths = rows[0].map((_, i) => Math.max(...rows.map((row) => row[i].length)));
for (const row of rows) console.log(row.map((c, i) => c.padEnd(widths[i])).join('  '));
console.log(`\ntest split (variations 250-299), ${rollouts} random rollouts per variation, 1 oracle rollout`);
console.log(
  `${totalSteps} env steps (reset + step + validActions, async Env API, policy included) in ${seconds.toFixed(2)} s: ${Math.round(totalSteps / seconds)} steps/s`,
);

// The synchronous core alone (worlds already generated and cached above): step + validActions.
let syncSteps = 0;
const t1 = performance.now();
for (let rep = 0; rep < rollouts; rep++) {
  for (const task of env.tasks()) {
    for (const v of env.variations(task, 'test')) {
      const g = new Game(generateWorld(task, v));
      for (let acts = g.validActions(); !g.done; acts = g.validActions()) {
        g.step(randomAct(acts, rng));
        syncSteps++;
      }
    }
  }
}
const syncSeconds = (performance.now() - t1) / 1000;
console.log(
  `${syncSteps} steps of the sync core (Game.step + validActions, random policy) in ${syncSeconds.toFixed(2)} s: ${Math.round(syncSteps / syncSeconds)} steps/s`,
);
