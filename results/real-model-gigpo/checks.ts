/**
 * The protocol's two checks (PROTOCOL.md, "Code") and its step-group statistics, from the run
 * folders of one `compare`:
 *   1. the held-out evaluation at iteration 0 of each seed, episode for episode (task, variation,
 *      actions, score), against the reference label's run of the same seed;
 *   2. iteration 1: training score and environment steps (metrics.jsonl), and the training episodes
 *      recorded for it (trajectories/train.jsonl), against the reference's;
 * then, per run of the checked label, what GiGPO's step groups looked like in each iteration
 * (`step_groups` in metrics.jsonl, written by src/trainer/update.ts). Prints Markdown.
 *
 *   npx tsx results/real-model-gigpo/checks.ts runs/real-model [--reference grpo] [--label gigpo] > results/real-model-gigpo/checks.md
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { readRunMetrics } from '../../src/index.ts';

const { values: a, positionals } = parseArgs({
  allowPositionals: true,
  options: { reference: { type: 'string', default: 'grpo' }, label: { type: 'string', default: 'gigpo' } },
});
const out = positionals[0] ?? 'runs/real-model';
const [reference, label] = [a.reference!, a.label!];

interface Episode {
  source: string;
  iteration: number;
  index: number;
  task: string;
  variation: number;
  score: number;
  steps: { action: string }[];
}

/** Recorded episodes of one source and iteration by index; a resumed run re-records, and the last record counts. */
function episodes(run: string, file: 'eval' | 'train', iteration: number): Map<number, Episode> {
  const path = join(run, 'trajectories', `${file}.jsonl`);
  const byIndex = new Map<number, Episode>();
  if (!existsSync(path)) return byIndex;
  for (const line of readFileSync(path, 'utf8').split('\n')) {
    if (!line.trim()) continue;
    let e: Episode;
    try {
      e = JSON.parse(line) as Episode;
    } catch {
      continue; // a line cut off by a stop mid-write
    }
    if (e.iteration === iteration) byIndex.set(e.index, e);
  }
  return byIndex;
}

const key = (e: Episode) => JSON.stringify([e.task, e.variation, e.score, e.steps.map((s) => s.action)]);

/** "102/102 the same", or how many differ and the first that does. */
function sameEpisodes(ref: Map<number, Episode>, other: Map<number, Episode>): string {
  if (ref.size === 0 || other.size === 0) return `not recorded (${ref.size} and ${other.size} episodes)`;
  const indices = [...new Set([...ref.keys(), ...other.keys()])].sort((x, y) => x - y);
  const differ = indices.filter((i) => !ref.has(i) || !other.has(i) || key(ref.get(i)!) !== key(other.get(i)!));
  if (differ.length === 0) return `${indices.length}/${indices.length} the same`;
  const i = differ[0];
  const where = ref.has(i) && other.has(i) ? `${ref.get(i)!.task} variation ${ref.get(i)!.variation}` : 'recorded in one run only';
  return `${differ.length}/${indices.length} differ (first: episode ${i}, ${where})`;
}

const seedsOf = (l: string) =>
  existsSync(join(out, l))
    ? readdirSync(join(out, l))
        .filter((d) => /^seed\d+$/.test(d))
        .map((d) => Number(d.slice(4)))
        .sort((x, y) => x - y)
    : [];
const seeds = seedsOf(label).filter((s) => seedsOf(reference).includes(s));
const lines: string[] = [`# ${label} against ${reference}: the protocol's checks`, '', `Run folders: \`${out}\`.`, ''];
lines.push(
  '| seed | eval @ iteration 0, episode for episode | iteration 1: train score | iteration 1: env steps | iteration 1: recorded training episodes |',
  '|---|---|---|---|---|',
);
const f1 = (v: unknown) => (typeof v === 'number' ? v.toFixed(1) : '–');
for (const seed of seeds) {
  const [refRun, run] = [join(out, reference, `seed${seed}`), join(out, label, `seed${seed}`)];
  const [refTrain, train] = [refRun, run].map(
    (r) => readRunMetrics(r)?.train.find((t) => t.iteration === 1) as Record<string, unknown> | undefined,
  );
  const same = (field: string, fmt: (v: unknown) => string) => {
    if (!refTrain || !train) return 'not run';
    const [x, y] = [refTrain[field], train[field]];
    return x === y ? `${fmt(x)} both` : `${fmt(x)} against ${fmt(y)}`;
  };
  // A run whose trajectories were lost with its machine (the archive keeps none) is checked on what its
  // metrics line records instead: coarser, and said so in the cell.
  const [refEval, evalAt0] = [refRun, run].map(
    (r) => readRunMetrics(r)?.evals.find((e) => e.iteration === 0) as Record<string, unknown> | undefined,
  );
  const sameFields = (x: Record<string, unknown> | undefined, y: Record<string, unknown> | undefined, fields: string[]) => {
    if (!x || !y) return 'not run';
    const differ = fields.filter((f) => JSON.stringify(x[f]) !== JSON.stringify(y[f]));
    return differ.length === 0 ? `${fields.join(', ')} equal` : `${differ.join(', ')} differ`;
  };
  const orMetrics = (
    byEpisode: string,
    x: Record<string, unknown> | undefined,
    y: Record<string, unknown> | undefined,
    fields: string[],
  ) => (byEpisode.startsWith('not recorded') ? `trajectories not kept; metrics: ${sameFields(x, y, fields)}` : byEpisode);
  lines.push(
    `| ${seed} | ${orMetrics(sameEpisodes(episodes(refRun, 'eval', 0), episodes(run, 'eval', 0)), refEval, evalAt0, ['episodes', 'mean_score', 'env_steps', 'per_task'])} | ${same('mean_score', f1)} | ${same('env_steps', String)} | ${orMetrics(sameEpisodes(episodes(refRun, 'train', 1), episodes(run, 'train', 1)), refTrain, train, ['prompt_tokens', 'sequence_tokens', 'modes'])} |`,
  );
}

lines.push(
  '',
  `## Step groups of ${label}`,
  '',
  "Per iteration: step groups formed (identical observations across a group's rollouts), their mean and largest size, the share of singletons (no step term), and the share of multi-step rollouts whose advantage varied from step to step (where the step term changed GRPO's one advantage per rollout).",
  '',
);
lines.push(
  '| seed | iteration | groups | mean size | largest | singleton share | rollouts with varied step advantages |',
  '|---|---|---|---|---|---|---|',
);
for (const seed of seeds) {
  for (const t of (readRunMetrics(join(out, label, `seed${seed}`))?.train ?? []) as Record<string, unknown>[]) {
    const g = t.step_groups as
      { count: number; mean_size: number; max_size: number; singleton_share: number; varied_rollouts: number } | undefined;
    if (!g) continue;
    lines.push(
      `| ${seed} | ${t.iteration} | ${g.count} | ${g.mean_size.toFixed(2)} | ${g.max_size} | ${(g.singleton_share * 100).toFixed(1)}% | ${(g.varied_rollouts * 100).toFixed(1)}% |`,
    );
  }
}
if (seeds.length === 0) lines.push('', `No seed has runs of both ${reference} and ${label} in ${out}.`);
console.log(lines.join('\n'));
