/**
 * Does a policy still read tips? Each checkpoint plays every task once without tips and once shown
 * the built-in solver's next action as its one tip (`experimental.tip_source: oracle`), frozen weights, the
 * same variations. The gain from a perfect tip bounds what any memory could add for that policy;
 * a policy that has lost tip reading gains nothing from it.
 *
 *   npx tsx bench/oracle-tips.ts --checkpoint warm=models/tipreader-explore-gain --checkpoint empo2-s0=runs/a \
 *     [-c configs/variants/builtin-explore-adapt.yaml] [--tasks power,clue,unlock,fetch,boil,sort] [--trained power,clue,unlock] \
 *     [--variations 30] [--jobs 2] [--out /tmp/oracle-tips] [--set memory.key=value ...]
 *
 * Each run is an `empo2 adapt --trials 1 --fresh-memory` child writing <out>/<name>/<task>-<source>/adapt.json
 * (source `memory`: the fresh memory is empty, so no tip is shown); runs already there are kept
 * (re-running resumes). Prints and writes <out>/oracle-tips.md and <out>/runs.csv. Asserts nothing.
 */
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import pLimit from 'p-limit';
import { runChild, type TrialResult } from '../src/internals.ts';

const { values: a } = parseArgs({
  options: {
    checkpoint: { type: 'string', multiple: true, default: [] },
    config: { type: 'string', short: 'c', default: 'configs/variants/builtin-explore-adapt.yaml' },
    tasks: { type: 'string', default: 'power,clue,unlock,fetch,boil,sort' },
    trained: { type: 'string', default: 'power,clue,unlock' },
    variations: { type: 'string', default: '30' },
    jobs: { type: 'string', default: '2' },
    out: { type: 'string', default: '/tmp/oracle-tips' },
    set: { type: 'string', short: 's', multiple: true, default: [] },
  },
});
const checkpoints = a.checkpoint!.map((spec) => {
  const eq = spec.indexOf('=');
  if (eq <= 0 || eq === spec.length - 1 || !/^[\w.-]+$/.test(spec.slice(0, eq)))
    throw new Error(`--checkpoint "${spec}": expected name=dir (name: letters, digits, . _ -)`);
  return { name: spec.slice(0, eq), dir: spec.slice(eq + 1) };
});
if (!checkpoints.length) throw new Error('--checkpoint name=dir is required (repeatable)');
const dupName = checkpoints.find((c, i) => checkpoints.findIndex((d) => d.name === c.name) !== i);
if (dupName) throw new Error(`--checkpoint: the name "${dupName.name}" is used twice`);
const tasks = a
  .tasks!.split(',')
  .map((t) => t.trim())
  .filter(Boolean);
const trained = new Set(
  a
    .trained!.split(',')
    .map((t) => t.trim())
    .filter(Boolean),
);
const SOURCES = ['memory', 'oracle'] as const;
type Source = (typeof SOURCES)[number];
const BIN = fileURLToPath(new URL('../bin/empo2.js', import.meta.url));
const dirOf = (name: string, task: string, source: Source) => join(a.out!, name, `${task}-${source}`);

const runs = checkpoints.flatMap((c) =>
  tasks.flatMap((task) => SOURCES.map((source) => ({ ...c, task, source, out: dirOf(c.name, task, source) }))),
);
const todo = runs.filter((r) => !existsSync(join(r.out, 'adapt.json')));
console.log(
  `oracle tips: ${runs.length} runs (${checkpoints.length} checkpoints × ${tasks.length} tasks × 2), ${runs.length - todo.length} already in ${a.out}`,
);
const children = new Set<import('node:child_process').ChildProcess>();
process.on('SIGINT', () => {
  for (const c of children) if (c.pid) process.kill(-c.pid, 'SIGTERM');
  process.exit(130);
});
const limit = pLimit(Math.max(1, Number(a.jobs)));
let done = 0;
await Promise.all(
  todo.map((r) =>
    limit(async () => {
      mkdirSync(r.out, { recursive: true });
      const args = [
        BIN,
        'adapt',
        '-c',
        a.config!,
        '--checkpoint',
        r.dir,
        '--task',
        r.task,
        '--trials',
        '1',
        '--variations',
        a.variations!,
        '--fresh-memory',
        ...a.set!.flatMap((s) => ['--set', s]),
        '--set',
        `experimental.tip_source=${r.source}`,
        '--out',
        r.out,
      ];
      const res = await runChild(args, Number(a.jobs), join(r.out, 'log.txt'), children, `${r.name} ${r.task} ${r.source}`);
      if (res.code !== 0)
        throw new Error(`${r.name} ${r.task} ${r.source} failed (exit ${res.code ?? res.signal}); see ${join(r.out, 'log.txt')}`);
      console.log(`[${++done}/${todo.length}] ${r.name} ${r.task} ${r.source}: ${res.seconds.toFixed(0)} s`);
    }),
  ),
);

const trials = new Map(
  runs.map((r) => {
    const file = join(r.out, 'adapt.json');
    const saved = JSON.parse(readFileSync(file, 'utf8')) as { trials: TrialResult[] };
    if (!saved.trials?.length) throw new Error(`${file}: no trials`);
    return [r.out, saved.trials[0]] as const;
  }),
);
const trialOf = (name: string, task: string, source: Source): TrialResult => trials.get(dirOf(name, task, source))!;
const mean = (xs: number[]) => xs.reduce((s, x) => s + x, 0) / xs.length;
const groups = [
  { label: 'trained tasks', tasks: tasks.filter((t) => trained.has(t)) },
  { label: 'other tasks', tasks: tasks.filter((t) => !trained.has(t)) },
].filter((g) => g.tasks.length);

const lines = [
  `Config \`${a.config}\`${a.set!.length ? ` + ${a.set!.map((s) => `\`${s}\``).join(' ')}` : ''}, ${a.variations} test variations per task, one trial, frozen weights: no tips → the solver's next action as the one tip. Gain = with − without.`,
  '',
  `| checkpoint | ${tasks.join(' | ')} | ${groups.map((g) => `${g.label}: without → with (gain)`).join(' | ')} | oracle tip taken | solver's action taken without tips |`,
  `|---|${'---|'.repeat(tasks.length + groups.length)}---|---|`,
];
const csv = ['checkpoint,dir,task,no_tips,oracle,oracle_tip_taken'];
for (const c of checkpoints) {
  const cells = tasks.map(
    (t) => `${trialOf(c.name, t, 'memory').mean_score.toFixed(1)} → ${trialOf(c.name, t, 'oracle').mean_score.toFixed(1)}`,
  );
  const summary = groups.map((g) => {
    const without = mean(g.tasks.map((t) => trialOf(c.name, t, 'memory').mean_score));
    const withTip = mean(g.tasks.map((t) => trialOf(c.name, t, 'oracle').mean_score));
    return `${without.toFixed(1)} → ${withTip.toFixed(1)} (${withTip - without >= 0 ? '+' : ''}${(withTip - without).toFixed(1)})`;
  });
  const taken = mean(tasks.map((t) => trialOf(c.name, t, 'oracle').tips_followed ?? 0));
  // The same share without tips: how often the policy picks the solver's action on its own.
  const own = tasks
    .map((t) => trialOf(c.name, t, 'memory').solver_action_share?.without_tips)
    .filter((x): x is number => typeof x === 'number');
  lines.push(
    `| ${c.name} | ${cells.join(' | ')} | ${summary.join(' | ')} | ${(taken * 100).toFixed(0)}% | ${own.length ? `${(mean(own) * 100).toFixed(0)}%` : '–'} |`,
  );
  for (const t of tasks)
    csv.push(
      [
        c.name,
        c.dir,
        t,
        trialOf(c.name, t, 'memory').mean_score,
        trialOf(c.name, t, 'oracle').mean_score,
        (trialOf(c.name, t, 'oracle').tips_followed ?? 0).toFixed(3),
      ].join(','),
    );
}
const report = lines.join('\n') + '\n';
console.log('\n' + report);
writeFileSync(join(a.out!, 'oracle-tips.md'), report);
writeFileSync(join(a.out!, 'runs.csv'), csv.join('\n') + '\n');
console.log(`(written: ${join(a.out!, 'oracle-tips.md')}, ${join(a.out!, 'runs.csv')})`);
