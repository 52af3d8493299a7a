/**
 * Memory-only adaptation against its paired no-tip control, measured in one run.
 *
 * A rise across trials means little on its own: with a new draw each trial, a score also moves
 * with the luck of the draw. So every (task, seed) is played twice with the same per-trial draws:
 * once with tips (the arm), once with the same memory written but never shown
 * (`experimental.min_tip_score` above any score). Trial 1 shows no tips in either, so the two must agree
 * there; the effect of the memory is the difference over trials 2..K, paired by (task, seed).
 *
 *   npx tsx bench/adapt-vs-no-tips.ts --checkpoint models/tipreader-explore-gain \
 *     [-c configs/variants/builtin-explore-adapt.yaml] [--tasks fetch,boil,sort,power,clue,unlock] [--seeds 0-2] \
 *     [--trials 5] [--variations 30] [--jobs 2] [--out /tmp/adapt-vs-no-tips] [--set memory.key=value ...]
 *
 * Each run is an `empo2 adapt` child process writing <out>/<arm>/<task>/seed<k>/adapt.json; runs
 * already there are kept, and a run stopped midway goes on after its last finished trial (`adapt
 * --resume`), so re-running resumes. Prints and writes <out>/adapt-vs-no-tips.md and <out>/runs.csv.
 * Asserts nothing.
 */
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import pLimit from 'p-limit';
import { formatPairedDifference, pairedDifference, summarize } from '../src/index.ts';
import { parseSeeds, runChild, type TrialResult } from '../src/internals.ts';

const { values: a } = parseArgs({
  options: {
    checkpoint: { type: 'string' },
    config: { type: 'string', short: 'c', default: 'configs/variants/builtin-explore-adapt.yaml' },
    tasks: { type: 'string', default: 'fetch,boil,sort,power,clue,unlock' },
    seeds: { type: 'string', default: '0-2' },
    trials: { type: 'string', default: '5' },
    variations: { type: 'string', default: '30' },
    jobs: { type: 'string', default: '2' },
    out: { type: 'string', default: '/tmp/adapt-vs-no-tips' },
    set: { type: 'string', short: 's', multiple: true, default: [] },
  },
});
if (!a.checkpoint) throw new Error('--checkpoint <dir> is required (a run directory or a model directory)');
const trials = Number(a.trials);
if (!Number.isInteger(trials) || trials < 2) throw new Error(`--trials must be an integer ≥ 2 (trial 1 never shows tips), got ${a.trials}`);
const tasks = a
  .tasks!.split(',')
  .map((t) => t.trim())
  .filter(Boolean);
const seeds = parseSeeds(a.seeds!);
const BIN = fileURLToPath(new URL('../bin/empo2.js', import.meta.url));
const NEVER_SHOWN = 'experimental.min_tip_score=1000000';
const ARMS = { tips: a.set!, 'no-tips': [...a.set!, NEVER_SHOWN] } as const;
type Arm = keyof typeof ARMS;

interface Run {
  arm: Arm;
  task: string;
  seed: number;
  dir: string;
}
const runs: Run[] = [];
for (const task of tasks)
  for (const seed of seeds)
    for (const arm of Object.keys(ARMS) as Arm[]) runs.push({ arm, task, seed, dir: join(a.out!, arm, task, `seed${seed}`) });

const limit = pLimit(Math.max(1, Number(a.jobs)));
const children = new Set<import('node:child_process').ChildProcess>();
process.on('SIGINT', () => {
  for (const c of children) if (c.pid) process.kill(-c.pid, 'SIGTERM');
  process.exit(130);
});
const todo = runs.filter((r) => !existsSync(join(r.dir, 'adapt.json')));
console.log(
  `adapt vs no tips: ${runs.length} runs (${tasks.length} tasks × ${seeds.length} seeds × 2 arms), ${runs.length - todo.length} already in ${a.out}`,
);
let done = 0;
const t0 = performance.now();
await Promise.all(
  todo.map((r) =>
    limit(async () => {
      mkdirSync(r.dir, { recursive: true });
      const sets = [...ARMS[r.arm], `seed=${r.seed}`].flatMap((s) => ['--set', s]);
      const args = [
        BIN,
        'adapt',
        '--checkpoint',
        a.checkpoint!,
        '-c',
        a.config!,
        '--fresh-memory',
        '--new-draw-each-trial',
        '--resume',
        '--task',
        r.task,
        '--trials',
        String(trials),
        '--variations',
        a.variations!,
        '--out',
        r.dir,
        ...sets,
      ];
      const res = await runChild(args, Number(a.jobs), join(r.dir, 'log.txt'), children, `adapt ${r.task} seed ${r.seed}`);
      done++;
      const eta = ((performance.now() - t0) / 1000 / done) * (todo.length - done);
      if (res.code !== 0)
        throw new Error(
          `${r.arm} ${r.task} seed ${r.seed} failed (exit ${res.code ?? res.signal}); see ${join(r.dir, 'log.txt')}: ${res.tail.trim().split('\n').slice(-3).join(' / ')}`,
        );
      console.log(
        `[${done}/${todo.length}] ${r.arm} ${r.task} seed ${r.seed}: ${res.seconds.toFixed(0)} s, ETA ${(eta / 60).toFixed(1)} min`,
      );
    }),
  ),
);

const results = new Map<string, TrialResult[]>();
for (const r of runs) {
  const saved = JSON.parse(readFileSync(join(r.dir, 'adapt.json'), 'utf8')) as { trials: TrialResult[] };
  if (saved.trials.length !== trials)
    throw new Error(`${join(r.dir, 'adapt.json')}: ${saved.trials.length} trials, expected ${trials} (delete it to re-run)`);
  results.set(r.dir, saved.trials);
}
const trialsOf = (arm: Arm, task: string, seed: number) => results.get(join(a.out!, arm, task, `seed${seed}`))!;
const later = (ts: TrialResult[]) => ts.slice(1).reduce((s, t) => s + t.mean_score, 0) / (ts.length - 1);
const mean = (xs: number[]) => (xs.length ? xs.reduce((s, x) => s + x, 0) / xs.length : NaN);
const pct = (x: number) => (Number.isFinite(x) ? `${(x * 100).toFixed(0)}%` : '–');

const pairs = tasks.flatMap((task) => seeds.map((seed) => ({ task, seed })));
// pairedDifference pairs by numeric key: a pair's index in `pairs` is that key.
const byPair = (f: (p: { task: string; seed: number }) => number, only?: string) =>
  new Map(pairs.flatMap((p, i): [number, number][] => (!only || p.task === only ? [[i, f(p)]] : [])));
const firstMismatch = pairs.filter(
  (p) => trialsOf('tips', p.task, p.seed)[0].mean_score !== trialsOf('no-tips', p.task, p.seed)[0].mean_score,
);

const lines: string[] = [];
lines.push(
  `Checkpoint \`${a.checkpoint}\`, config \`${a.config}\`${a.set!.length ? ` + ${a.set!.map((s) => `\`${s}\``).join(' ')}` : ''}; ${tasks.join(', ')} × seeds ${seeds.join(',')}, ${a.variations} variations, ${trials} trials, a new draw each trial. The control sets \`${NEVER_SHOWN}\`.`,
);
lines.push('');
lines.push(`| arm | runs | ${Array.from({ length: trials }, (_, i) => `trial ${i + 1}`).join(' | ')} | trials 2–${trials} − trial 1 |`);
lines.push(`|---|---|${'---|'.repeat(trials)}---|`);
for (const arm of Object.keys(ARMS) as Arm[]) {
  const per = Array.from({ length: trials }, (_, t) => mean(pairs.map((p) => trialsOf(arm, p.task, p.seed)[t].mean_score)));
  const rise = pairedDifference(
    byPair((p) => trialsOf(arm, p.task, p.seed)[0].mean_score),
    byPair((p) => later(trialsOf(arm, p.task, p.seed))),
  );
  lines.push(`| ${arm} | ${pairs.length} | ${per.map((x) => x.toFixed(1)).join(' | ')} | ${formatPairedDifference(rise)} |`);
}
lines.push('');
lines.push(`Tips − no tips, mean of trials 2–${trials}, paired by (task, seed), 95% t-interval:`);
lines.push('');
lines.push('| tasks | pairs | no tips | tips | tips − no tips |');
lines.push('|---|---|---|---|---|');
for (const only of [undefined, ...tasks]) {
  const control = byPair((p) => later(trialsOf('no-tips', p.task, p.seed)), only);
  const arm = byPair((p) => later(trialsOf('tips', p.task, p.seed)), only);
  lines.push(
    `| ${only ?? 'all'} | ${arm.size} | ${mean([...control.values()]).toFixed(1)} | ${mean([...arm.values()]).toFixed(1)} | ${formatPairedDifference(pairedDifference(control, arm))} |`,
  );
}
lines.push('');
const diag = (pick: (t: TrialResult) => number | null | undefined) => {
  const xs = pairs.flatMap((p) => trialsOf('tips', p.task, p.seed).slice(1).map(pick)).filter((x): x is number => typeof x === 'number');
  return summarize(xs)?.mean ?? NaN;
};
lines.push(
  `With tips, trials 2–${trials}: ${diag((t) => t.tips_shown_per_step).toFixed(2)} tips per step; the action taken was one a tip named on ${pct(diag((t) => t.tips_followed))} of the steps shown tips; ` +
    `the best tip named the solver's next action on ${pct(diag((t) => t.best_tip_is_solver))}; the solver's action was taken on ${pct(diag((t) => t.solver_action_share?.with_tips))} of steps with tips and ${pct(diag((t) => t.solver_action_share?.without_tips))} without.`,
);
if (firstMismatch.length)
  lines.push(
    `\nWarning: trial 1 differs between the arms for ${firstMismatch.map((p) => `${p.task}/${p.seed}`).join(', ')}: the pairing is broken (different draws).`,
  );
const report = lines.join('\n') + '\n';
console.log('\n' + report);
writeFileSync(join(a.out!, 'adapt-vs-no-tips.md'), report);
const csv = [
  [
    'arm',
    'task',
    'seed',
    ...Array.from({ length: trials }, (_, i) => `trial${i + 1}`),
    'tips_per_step_later',
    'tips_followed_later',
    'best_tip_is_solver_later',
  ].join(','),
  ...runs.map((r) => {
    const ts = results.get(r.dir)!;
    const avg = (pick: (t: TrialResult) => number | null) => {
      const xs = ts
        .slice(1)
        .map(pick)
        .filter((x): x is number => x !== null);
      return xs.length ? mean(xs).toFixed(3) : '';
    };
    return [
      r.arm,
      r.task,
      r.seed,
      ...ts.map((t) => t.mean_score.toFixed(2)),
      avg((t) => t.tips_shown_per_step),
      avg((t) => t.tips_followed),
      avg((t) => t.best_tip_is_solver),
    ].join(',');
  }),
].join('\n');
writeFileSync(join(a.out!, 'runs.csv'), csv + '\n');
console.log(`(written: ${join(a.out!, 'adapt-vs-no-tips.md')}, ${join(a.out!, 'runs.csv')})`);
