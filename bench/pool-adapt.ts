/**
 * Pools the paired adaptation bench over several checkpoints, from the runs.csv files that
 * `bench/adapt-vs-no-tips.ts` saved, without re-running anything.
 *
 *   npx tsx bench/pool-adapt.ts <dir> [<dir> ...] [--seeds 0-1] [--trained power,clue,unlock] \
 *     [--against <dir> [--against <dir> ...]]
 *
 * For every (checkpoint, task, seed) the effect of the memory is the mean of trials 2..K with tips
 * minus the same mean in the never-shown control, as in the bench. Prints that effect per directory,
 * pooled over all of them, and split into the families the checkpoints were trained on and the rest.
 * With --against (one per directory, in the same order: e.g. GRPO checkpoints trained with the same
 * seeds), also prints each directory's effect minus its counterpart's, paired by (task, seed).
 * Asserts nothing; warns when trial 1 differs between the arms (the pairing is then broken).
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { formatPairedDifference, pairedDifference } from '../src/index.ts';
import { parseSeeds } from '../src/internals.ts';

const { values: a, positionals: dirs } = parseArgs({
  allowPositionals: true,
  options: {
    seeds: { type: 'string' },
    trained: { type: 'string', default: 'power,clue,unlock' },
    against: { type: 'string', multiple: true, default: [] },
  },
});
if (dirs.length === 0) throw new Error('give at least one directory holding a runs.csv from bench/adapt-vs-no-tips.ts');
if (a.against!.length && a.against!.length !== dirs.length)
  throw new Error(`--against needs one directory per directory pooled (${dirs.length}), got ${a.against!.length}`);
const onlySeeds = a.seeds === undefined ? null : new Set(parseSeeds(a.seeds));
const trained = new Set(a.trained!.split(',').map((t) => t.trim()));

interface Effect {
  task: string;
  seed: number;
  /** Mean of trials 2..K without and with tips. */
  control: number;
  tips: number;
}

/** The per-(task, seed) effects saved in one bench directory. */
function effects(dir: string): Effect[] {
  const file = join(dir, 'runs.csv');
  const [header, ...lines] = readFileSync(file, 'utf8').trim().split('\n');
  const cols = header.split(',');
  const trialCols = cols.flatMap((c, i) => (/^trial\d+$/.test(c) ? [i] : []));
  const [armCol, taskCol, seedCol] = ['arm', 'task', 'seed'].map((c) => cols.indexOf(c));
  if (armCol < 0 || taskCol < 0 || seedCol < 0 || trialCols.length < 2)
    throw new Error(`${file}: expected columns arm, task, seed, trial1..trialK (K ≥ 2), got: ${header}`);
  const runs = new Map<string, number[]>();
  lines.forEach((line, i) => {
    const f = line.split(',');
    const trials = trialCols.map((c) => Number(f[c]));
    if (trials.some((x) => !Number.isFinite(x))) throw new Error(`${file}:${i + 2}: a trial score is not a number: ${line}`);
    runs.set(`${f[armCol]}/${f[taskCol]}/${f[seedCol]}`, trials);
  });
  const later = (ts: number[]) => ts.slice(1).reduce((s, x) => s + x, 0) / (ts.length - 1);
  const out: Effect[] = [];
  for (const [key, tips] of runs) {
    const [arm, task, seedText] = key.split('/');
    const seed = Number(seedText);
    if (arm !== 'tips' || (onlySeeds && !onlySeeds.has(seed))) continue;
    const control = runs.get(`no-tips/${task}/${seedText}`);
    if (!control) throw new Error(`${file}: ${task} seed ${seed} has a tips run but no no-tips run`);
    if (tips[0] !== control[0])
      console.warn(`warning: ${file}: trial 1 differs between the arms for ${task} seed ${seed}; the pairing is broken`);
    out.push({ task, seed, control: later(control), tips: later(tips) });
  }
  return out;
}

/** other − reference over a list of pairs, with its 95% interval; each pair is its own key. */
const summary = (pairs: [reference: number, other: number][]) =>
  formatPairedDifference(pairedDifference(new Map(pairs.map(([r], i) => [i, r])), new Map(pairs.map(([, o], i) => [i, o]))));
const memoryEffect = (es: Effect[]) => summary(es.map((e) => [e.control, e.tips]));
const effectOf = (e: Effect) => e.tips - e.control;

const perDir = dirs.map(effects);
dirs.forEach((d, i) => console.log(`${d}: ${memoryEffect(perDir[i])}, n=${perDir[i].length}`));
const all = perDir.flat();
console.log(`pooled: ${memoryEffect(all)}, n=${all.length}`);
console.log(`trained families (${[...trained].join(', ')}): ${memoryEffect(all.filter((e) => trained.has(e.task)))}`);
console.log(`other families: ${memoryEffect(all.filter((e) => !trained.has(e.task)))}`);

if (a.against!.length) {
  const pooled: [number, number][] = [];
  dirs.forEach((d, i) => {
    const theirs = new Map(effects(a.against![i]).map((e) => [`${e.task}/${e.seed}`, effectOf(e)]));
    const pairs = perDir[i]
      .filter((e) => theirs.has(`${e.task}/${e.seed}`))
      .map((e): [number, number] => [theirs.get(`${e.task}/${e.seed}`)!, effectOf(e)]);
    console.log(`${d} − ${a.against![i]}: ${summary(pairs)}, n=${pairs.length}`);
    pooled.push(...pairs);
  });
  console.log(`pooled difference: ${summary(pooled)}, n=${pooled.length}`);
}
