/**
 * WebShop benchmark on the real 1000-product catalogue: start-up time to the first observation (in a
 * fresh process, Node + tsx start included, and inside the process), search latency p50 / p99 over
 * every goal instruction, and environment steps per second for a random-action agent and for the
 * scripted oracle. usage: npx tsx bench/webshop.ts [--episodes 300]
 */
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { PyRandom } from '../src/internals.ts';

const { values } = parseArgs({
  options: { episodes: { type: 'string', default: '300' }, 'startup-probe': { type: 'boolean', default: false } },
});

if (values['startup-probe']) {
  // Child mode: report how long this fresh process took to show its first observation.
  const t0 = performance.now();
  // A deep import on purpose: this measures the WebShop module's own start-up, which the package's entries would add to.
  const { WebShopEnv } = await import('../src/envs/webshop/env.ts');
  const env = new WebShopEnv();
  const first = await env.reset('webshop', 0);
  const t1 = performance.now();
  if (!first.observation.startsWith('WebShop [SEP] Instruction:')) throw new Error('unexpected first observation');
  console.log(JSON.stringify({ inProcessMs: t1 - t0, processUptimeMs: process.uptime() * 1000 }));
  process.exit(0);
}

const self = fileURLToPath(import.meta.url);
const startups: Array<{ inProcessMs: number; processUptimeMs: number; wallMs: number }> = [];
for (let i = 0; i < 3; i++) {
  const t = performance.now();
  const out = execFileSync(process.execPath, ['--import', 'tsx', self, '--startup-probe'], { encoding: 'utf8' });
  startups.push({ ...JSON.parse(out.trim().split('\n').pop()!), wallMs: performance.now() - t });
}
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const quantile = (xs: number[], q: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.ceil(q * s.length) - 1)];
};

const { WebShopEnv, runOracle } = await import('../src/internals.ts');
const env = new WebShopEnv();
const world = env.world;

// Search latency over every goal instruction (lower-cased, as WebShop searches).
const queries = world.goals.map((g) => g.instruction_text.toLowerCase());
for (const q of queries.slice(0, 200)) world.search.search(q); // warm-up
const latencies: number[] = [];
for (const q of queries) {
  const t = performance.now();
  world.search.search(q);
  latencies.push(performance.now() - t);
}

// Random agent: on the search page it searches the instruction, elsewhere it clicks at random.
const episodes = Number(values.episodes);
const rng = new PyRandom(1);
const train = env.variations('webshop', 'train');
let steps = 0;
const tRandom = performance.now();
for (let e = 0; e < episodes; e++) {
  const goalIndex = train[rng.randbelow(train.length)];
  let r = await env.reset('webshop', goalIndex);
  let actions = r.validActions;
  let done = false;
  while (!done) {
    const action = actions[0].startsWith('search[')
      ? `search[${world.goals[goalIndex].instruction_text}]`
      : actions[rng.randbelow(actions.length)];
    const s = await env.step(action);
    steps++;
    actions = s.validActions;
    done = s.done;
  }
}
const randomSeconds = (performance.now() - tRandom) / 1000;

const test = env.variations('webshop', 'test');
let oracleSteps = 0;
let oracleWins = 0;
const tOracle = performance.now();
for (const i of test) {
  const o = await runOracle(env, world.goals[i], i);
  oracleSteps += o.steps;
  if (o.reward === 1) oracleWins++;
}
const oracleSeconds = (performance.now() - tOracle) / 1000;

const report = {
  catalogue: `${world.catalogue.products.length} products (${world.catalogue.files.products.split('/').pop()}), ${world.goals.length} ${world.goalSource} goals`,
  startupToFirstObservationMs: {
    freshProcessWallMedian: +median(startups.map((s) => s.wallMs)).toFixed(0),
    inProcessMedian: +median(startups.map((s) => s.inProcessMs)).toFixed(0),
  },
  searchLatencyMs: {
    queries: latencies.length,
    p50: +quantile(latencies, 0.5).toFixed(3),
    p99: +quantile(latencies, 0.99).toFixed(3),
    max: +Math.max(...latencies).toFixed(3),
  },
  randomAgent: { episodes, steps, stepsPerSecond: +(steps / randomSeconds).toFixed(0) },
  oracle: {
    testGoals: test.length,
    successShare: oracleWins / test.length,
    steps: oracleSteps,
    stepsPerSecond: +(oracleSteps / oracleSeconds).toFixed(0),
  },
};
console.log(JSON.stringify(report, null, 2));
