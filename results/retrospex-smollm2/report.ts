/**
 * The Retrospex study's report (PROTOCOL.md, "Analysis"), from what study.sh wrote in --out: per set
 * (built-in, ScienceWorld), each arm's held-out score per seed, the paired differences (by seed, and by
 * episode), the trained checkpoints of results/real-model by their recorded final evaluations, the logged
 * data and the critics, and how often the critic overruled the likelihood. Writes <dest>/results.md and
 * <dest>/episodes.csv (every evaluation episode's score, so the pairing can be redone without the runs).
 *
 *   npx tsx results/retrospex-smollm2/report.ts --out results/retrospex-smollm2/runs --dest results/retrospex-smollm2
 */
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { formatPairedDifference, pairedDifference, summarize } from '../../src/index.ts';
import { TrajectoryFile, type EpisodeRecord } from '../../src/internals.ts';

const { values: a } = parseArgs({
  options: { out: { type: 'string', default: 'results/retrospex-smollm2/runs' }, dest: { type: 'string' } },
});
const OUT = a.out!;
const DEST = a.dest ?? 'results/retrospex-smollm2';
const ARMS = ['no-critic', 'retrospex', 'proposals'] as const;
type Arm = (typeof ARMS)[number];
const RL = ['grpo', 'empo2', 'gigpo'] as const;

const episodesOf = (file: string): EpisodeRecord[] => {
  if (!existsSync(file)) return [];
  const f = new TrajectoryFile(file);
  f.refresh();
  return f.episodes.map((e) => f.episode(e.line));
};
const mean = (xs: number[]) => (xs.length ? xs.reduce((s, x) => s + x, 0) / xs.length : NaN);
const f1 = (x: number) => (Number.isFinite(x) ? x.toFixed(1) : '–');
const pct = (x: number) => (Number.isFinite(x) ? `${(100 * x).toFixed(0)}%` : '–');

interface SeedRuns {
  seed: number;
  arms: Partial<Record<Arm, EpisodeRecord[]>>;
  logged: EpisodeRecord[];
  critic: { data?: Record<string, unknown>; training?: Record<string, unknown> } | null;
}

function readSet(set: string): SeedRuns[] {
  const dir = join(OUT, set);
  if (!existsSync(dir)) return [];
  return readdirSync(dir)
    .filter((d) => /^seed\d+$/.test(d))
    .map((d) => {
      const at = join(dir, d);
      const arms: SeedRuns['arms'] = {};
      // An arm counts once its evaluation finished (its --json is written last).
      for (const arm of ARMS) if (existsSync(join(at, `${arm}.json`))) arms[arm] = episodesOf(join(at, 'trajectories', `${arm}.jsonl`));
      const criticFile = join(at, 'critic.json');
      const critic = existsSync(criticFile) ? (({ weights: _, ...rest }) => rest)(JSON.parse(readFileSync(criticFile, 'utf8'))) : null;
      const logged = existsSync(join(at, 'logged', 'logged.json')) ? episodesOf(join(at, 'logged', 'trajectories', 'logged.jsonl')) : [];
      return { seed: Number(d.slice(4)), arms, logged, critic };
    })
    .sort((x, y) => x.seed - y.seed);
}

/** The final evaluation (iteration 8, 102 episodes) of the archived RL runs, per seed: overall and per family. */
function rlFinals(label: string): Map<number, { mean: number; perTask: Record<string, number> }> {
  const out = new Map<number, { mean: number; perTask: Record<string, number> }>();
  for (const seed of [0, 1, 2]) {
    const file = join('results/real-model/runs', label, `seed${seed}`, 'metrics.jsonl');
    if (!existsSync(file)) continue;
    const evals = readFileSync(file, 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l))
      .filter((l) => l.type === 'eval');
    const last = evals.at(-1);
    if (last?.iteration !== 8) continue;
    out.set(seed, {
      mean: last.mean_score,
      perTask: Object.fromEntries(last.per_task.map((t: { task: string; mean_score: number }) => [t.task, t.mean_score])),
    });
  }
  return out;
}

const armMean = (r: SeedRuns, arm: Arm, task?: string) =>
  mean((r.arms[arm] ?? []).filter((e) => !task || e.task === task).map((e) => e.score));
/** Each seed's mean score of `arm` (on `task`), for the seeds where it has episodes (of that task). */
const bySeed = (runs: SeedRuns[], arm: Arm, task?: string) =>
  new Map(
    runs
      .filter((r) => r.arms[arm]?.length)
      .map((r) => [r.seed, armMean(r, arm, task)] as const)
      .filter(([, m]) => Number.isFinite(m)),
  );

/** Episode pairs of two arms: the same seed, task and variation. */
function episodePairs(runs: SeedRuns[], reference: Arm, other: Arm): [Map<number, number>, Map<number, number>] {
  const ref = new Map<number, number>();
  const oth = new Map<number, number>();
  let k = 0;
  for (const r of runs) {
    const key = (e: EpisodeRecord) => `${e.task}#${e.variation}`;
    const refScores = new Map((r.arms[reference] ?? []).map((e) => [key(e), e.score]));
    for (const e of r.arms[other] ?? []) {
      if (!refScores.has(key(e))) continue;
      ref.set(k, refScores.get(key(e))!);
      oth.set(k++, e.score);
    }
  }
  return [ref, oth];
}

/** Of the rescored steps, the share whose action was not the candidate of highest likelihood; before and at λ's floor. */
function overruled(episodes: readonly EpisodeRecord[]): { early: number; floor: number; steps: number } {
  const counts = { early: [0, 0], floor: [0, 0] };
  let floor = Infinity;
  for (const e of episodes) for (const s of e.steps) if (s.rescored) floor = Math.min(floor, s.rescored.weight);
  for (const e of episodes)
    for (const s of e.steps) {
      if (!s.rescored || s.rescored.candidates.length < 2) continue;
      const best = s.rescored.candidates.reduce((b, c) => (c.likelihood > b.likelihood ? c : b));
      const c = s.rescored.weight > floor ? counts.early : counts.floor;
      c[1]++;
      if (best.action !== s.action) c[0]++;
    }
  return { early: counts.early[0] / counts.early[1], floor: counts.floor[0] / counts.floor[1], steps: counts.early[1] + counts.floor[1] };
}

function setReport(set: string, runs: SeedRuns[]): string[] {
  const lines: string[] = [`## ${set === 'builtin' ? 'Built-in power, clue, unlock' : 'ScienceWorld find-living-thing'}`, ''];
  const seeds = runs.map((r) => r.seed);
  const tasks = [...new Set(runs.flatMap((r) => Object.values(r.arms).flatMap((es) => es!.map((e) => e.task))))].sort();
  lines.push(`| arm | ${seeds.map((s) => `seed ${s}`).join(' | ')} | mean ± std | success | ${tasks.join(' | ')} |`);
  lines.push(`|---|${seeds.map(() => '---|').join('')}---|---|${tasks.map(() => '---|').join('')}`);
  const row = (name: string, perSeed: Map<number, number>, success: number, perTask: (t: string) => number) => {
    const s = summarize([...perSeed.values()]);
    const spread = s ? `${f1(s.mean)}${s.std !== null ? ` ± ${f1(s.std)}` : ''}` : '–';
    lines.push(
      `| ${name} | ${seeds.map((k) => f1(perSeed.get(k) ?? NaN)).join(' | ')} | ${spread} | ${pct(success)} | ${tasks.map((t) => f1(perTask(t))).join(' | ')} |`,
    );
  };
  for (const arm of ARMS) {
    const eps = runs.flatMap((r) => r.arms[arm] ?? []);
    if (eps.length === 0) continue;
    row(arm, bySeed(runs, arm), mean(eps.map((e) => (e.success ? 1 : 0))), (t) =>
      mean(eps.filter((e) => e.task === t).map((e) => e.score)),
    );
  }
  const finals = set === 'builtin' ? RL.map((l) => [l, rlFinals(l)] as const) : [];
  for (const [label, m] of finals)
    if (m.size)
      row(`${label} (final, archived)`, new Map([...m].map(([k, v]) => [k, v.mean])), NaN, (t) =>
        mean([...m.values()].map((v) => v.perTask[t])),
      );
  lines.push('', '**Paired differences** (mean, 95% t-interval, seeds or episodes ahead / behind):', '');
  const pairs: [string, Arm, Arm][] = [
    ['Retrospex − no critic', 'no-critic', 'retrospex'],
    ['Retrospex − proposals only', 'proposals', 'retrospex'],
    ['proposals only − no critic', 'no-critic', 'proposals'],
  ];
  for (const [name, ref, oth] of pairs) {
    const bySeedDiff = pairedDifference(bySeed(runs, ref), bySeed(runs, oth));
    if (!bySeedDiff) continue;
    const [er, eo] = episodePairs(runs, ref, oth);
    lines.push(
      `- ${name}: by seed ${formatPairedDifference(bySeedDiff)}; by episode (${er.size} pairs) ${formatPairedDifference(pairedDifference(er, eo))}`,
    );
    for (const t of tasks)
      lines.push(`  - ${t}: by seed ${formatPairedDifference(pairedDifference(bySeed(runs, ref, t), bySeed(runs, oth, t)))}`);
  }
  for (const [label, m] of finals) {
    const d = pairedDifference(new Map([...m].map(([k, v]) => [k, v.mean])), bySeed(runs, 'retrospex'));
    if (d) lines.push(`- Retrospex − ${label} (final evaluation, archived): by seed ${formatPairedDifference(d)}`);
  }
  lines.push(
    '',
    '**Logged data and critics**',
    '',
    '| seed | logged episodes | steps | steps with a reward | logged mean score | critic: transitions, passes | last V loss | last Q loss | critic overruled the likelihood (λ above floor / at floor) |',
    '|---|---|---|---|---|---|---|---|---|',
  );
  for (const r of runs) {
    const steps = r.logged.flatMap((e) => e.steps);
    const losses = (r.critic?.training?.losses as { v_loss: number; q_loss: number }[] | undefined)?.at(-1);
    const o = overruled(r.arms.retrospex ?? []);
    lines.push(
      `| ${r.seed} | ${r.logged.length} | ${steps.length} | ${pct(steps.filter((s) => s.reward > 0).length / steps.length)} | ${f1(mean(r.logged.map((e) => e.score)))} | ${r.critic ? `${r.critic.data?.transitions}, ${r.critic.training?.epochs}` : '–'} | ${losses ? losses.v_loss.toExponential(2) : '–'} | ${losses ? losses.q_loss.toExponential(2) : '–'} | ${o.steps ? `${pct(o.early)} / ${pct(o.floor)} of ${o.steps} steps with 2+ candidates` : '–'} |`,
    );
  }
  return [...lines, ''];
}

const sets = ['builtin', 'scienceworld'].map((s) => [s, readSet(s)] as const).filter(([, r]) => r.length > 0);
if (sets.length === 0) throw new Error(`${OUT} holds no seed folders yet (run study.sh first)`);
const md = [
  '# Retrospex with SmolLM2-135M-Instruct: results',
  '',
  `Made by \`npx tsx results/retrospex-smollm2/report.ts --out ${OUT}\` on ${new Date().toISOString().slice(0, 10)}. Held-out scores (0–100), mean per seed of the evaluation's episodes; protocol in PROTOCOL.md.`,
  '',
  ...sets.flatMap(([s, r]) => setReport(s, r)),
];
writeFileSync(join(DEST, 'results.md'), md.join('\n'));
const csv = ['set,seed,arm,task,variation,score,success,steps'];
for (const [s, runs] of sets)
  for (const r of runs)
    for (const arm of ARMS)
      for (const e of r.arms[arm] ?? []) csv.push([s, r.seed, arm, e.task, e.variation, e.score, e.success, e.steps.length].join(','));
writeFileSync(join(DEST, 'episodes.csv'), csv.join('\n') + '\n');
console.log(md.join('\n'));
console.log(`(written: ${join(DEST, 'results.md')}, ${join(DEST, 'episodes.csv')})`);
