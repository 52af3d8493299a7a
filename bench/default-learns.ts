/**
 * Does the README's main job learn? Runs the default command (`empo2 train`, nothing changed but the
 * seed and the run folder) for several seeds, one after another, and prints each seed's held-out score
 * before and after training, the rise, its mean with a 95% Student-t interval, and the wall time.
 * Exits 1 below the bar: a seed whose score does not rise, a mean rise under --min-rise, or (with
 * --max-minutes) a run slower than that.
 *
 *   npx tsx bench/default-learns.ts                                  # seeds 0,1,2 into runs/default-learns
 *   npx tsx bench/default-learns.ts --seeds 0,1,2,3,4 --set algo.name=empo2 --out runs/dl-empo2
 *
 * A seed whose run already finished is read back, not run again; one that stopped part-way is resumed,
 * so the bench can be stopped and started again.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { pairedDifference, summarize } from '../src/index.ts';

const { values } = parseArgs({
  options: {
    seeds: { type: 'string', default: '0,1,2' },
    out: { type: 'string', default: 'runs/default-learns' },
    set: { type: 'string', multiple: true, default: [] },
    'min-rise': { type: 'string', default: '10' },
    'max-minutes': { type: 'string' },
  },
});
const seeds = values.seeds.split(',').map((s) => {
  const n = Number(s.trim());
  if (!Number.isInteger(n) || n < 0) throw new Error(`--seeds: ${JSON.stringify(s)} is not a non-negative integer`);
  return n;
});
const minRise = Number(values['min-rise']);
const maxMinutes = values['max-minutes'] === undefined ? null : Number(values['max-minutes']);
if (!Number.isFinite(minRise)) throw new Error(`--min-rise: ${values['min-rise']} is not a number`);
if (maxMinutes !== null && !(maxMinutes > 0)) throw new Error(`--max-minutes: ${values['max-minutes']} is not a positive number`);
const out = resolve(values.out);
mkdirSync(out, { recursive: true });
const cli = resolve(import.meta.dirname, '..', 'bin', 'empo2.js');

interface EvalLine {
  type: string;
  iteration: number;
  mean_score: number;
  success_rate: number;
  seconds: number;
}
interface TrainLine {
  type: string;
  iteration: number;
  elapsed_seconds: number;
}

interface SeedResult {
  seed: number;
  before: number;
  after: number;
  iterations: number;
  minutes: number;
}

/** The run's held-out scores at iteration 0 and at its last iteration, and its training wall time. */
function readRun(dir: string, seed: number): SeedResult | null {
  const file = join(dir, 'metrics.jsonl');
  if (!existsSync(join(dir, 'eval.md')) || !existsSync(file)) return null;
  const lines = readFileSync(file, 'utf8')
    .split('\n')
    .filter((l) => l.trim())
    .map((l) => JSON.parse(l) as EvalLine & TrainLine);
  const evals = lines.filter((l) => l.type === 'eval');
  const trains = lines.filter((l) => l.type === 'train');
  const first = evals.find((e) => e.iteration === 0);
  const last = evals.at(-1);
  if (!first || !last || last.iteration === 0 || trains.length === 0) return null;
  // The training clock covers the iterations and the evaluations between them; the first and the final
  // evaluation run outside it.
  const seconds = trains.at(-1)!.elapsed_seconds + first.seconds + last.seconds;
  return { seed, before: first.mean_score, after: last.mean_score, iterations: last.iteration, minutes: seconds / 60 };
}

const results: SeedResult[] = [];
for (const seed of seeds) {
  const dir = join(out, `seed-${seed}`);
  let result = readRun(dir, seed);
  if (!result) {
    const resume = existsSync(join(dir, 'checkpoints'));
    const args = [cli, 'train', '--seed', String(seed), '--run-dir', dir, ...(resume ? ['--resume'] : [])];
    for (const s of values.set) args.push('--set', s);
    console.log(`seed ${seed}: ${resume ? 'resuming' : 'running'} empo2 ${args.slice(1).join(' ')}`);
    const t0 = performance.now();
    const r = spawnSync(process.execPath, args, { stdio: ['ignore', 'inherit', 'inherit'] });
    if (r.status !== 0) {
      console.error(`seed ${seed}: empo2 train exited with ${r.status ?? r.signal}; run this bench again to resume it`);
      process.exit(2);
    }
    result = readRun(dir, seed);
    if (!result)
      throw new Error(
        `seed ${seed}: ${dir} has no finished run after empo2 train returned (${((performance.now() - t0) / 1000).toFixed(0)} s)`,
      );
  }
  results.push(result);
}

const f1 = (x: number) => x.toFixed(1);
const signed = (x: number) => (x >= 0 ? '+' : '') + x.toFixed(1);
console.log(`\nThe default command's held-out score (${out}${values.set.length ? `, --set ${values.set.join(' ')}` : ''})\n`);
console.log('| seed | before | after | rise | iterations | wall minutes |');
console.log('|---|---|---|---|---|---|');
for (const r of results)
  console.log(
    `| ${r.seed} | ${f1(r.before)} | ${f1(r.after)} | ${signed(r.after - r.before)} | ${r.iterations} | ${r.minutes.toFixed(1)} |`,
  );
const rise = pairedDifference(new Map(results.map((r) => [r.seed, r.before])), new Map(results.map((r) => [r.seed, r.after])))!;
const before = summarize(results.map((r) => r.before))!;
const after = summarize(results.map((r) => r.after))!;
console.log(
  `| **mean** | ${f1(before.mean)} | ${f1(after.mean)} | **${signed(rise.mean)}**${rise.ci95 ? ` [${signed(rise.ci95[0])}, ${signed(rise.ci95[1])}]` : ''} | | ${f1(summarize(results.map((r) => r.minutes))!.mean)} |`,
);

const failures: string[] = [];
for (const r of results) if (!(r.after > r.before)) failures.push(`seed ${r.seed} did not rise (${f1(r.before)} → ${f1(r.after)})`);
if (rise.mean < minRise) failures.push(`mean rise ${signed(rise.mean)} is under the bar of +${minRise}`);
if (maxMinutes !== null)
  for (const r of results) if (r.minutes > maxMinutes) failures.push(`seed ${r.seed} took ${r.minutes.toFixed(1)} min (bar ${maxMinutes})`);
if (failures.length) {
  console.log(`\nBELOW THE BAR: ${failures.join('; ')}`);
  process.exit(1);
}
console.log(
  `\nat the bar: every seed rose, mean rise ${signed(rise.mean)} ≥ +${minRise}${maxMinutes !== null ? `, every run ≤ ${maxMinutes} min` : ''}`,
);
