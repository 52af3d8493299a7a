/**
 * What each training iteration of the study's runs did, from their metrics.jsonl: the mode the
 * iteration drew (EMPO²: plain, or tips from memory with on- or off-policy updates), its training
 * score, the update's clipped share, the time it took and the memory's size. Prints Markdown.
 *
 *   npx tsx results/real-model/per-iteration.ts runs/real-model > results/real-model/per-iteration.md
 */
import { readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { readRunMetrics } from '../../src/index.ts';

const out = process.argv[2] ?? 'runs/real-model';
const num = (v: unknown) => (typeof v === 'number' ? v : null);
const f1 = (v: unknown) => (num(v) === null ? '–' : (v as number).toFixed(1));
const pct = (v: unknown) => (num(v) === null ? '–' : `${((v as number) * 100).toFixed(1)}%`);
const secs = (v: unknown) => (num(v) === null ? '–' : `${Math.round(v as number)}`);

function modeOf(modes: unknown): string {
  if (!modes || typeof modes !== 'object') return 'plain';
  const drawn = Object.entries(modes as Record<string, number>)
    .filter(([, n]) => n > 0)
    .map(([m]) => m);
  return drawn.length > 0 ? drawn.join(' + ') : '–';
}

const lines = [
  "# Training iterations of the study's runs",
  '',
  `From each run's \`metrics.jsonl\` under \`${out}\` (made by \`results/real-model/per-iteration.ts\`). Training scores are over the iteration's 16 episodes at temperature 1 (not held-out); clipped: share of tokens whose ratio was clipped in the update; seconds of rollout and update (one thread, two for EMPO² seed 2: RUNS.md).`,
];
// statSync, not the entry's type: report.sh hands over a folder of links to the runs.
for (const label of readdirSync(out)
  .filter((n) => statSync(join(out, n)).isDirectory())
  .sort()) {
  for (const seedDir of readdirSync(join(out, label))
    .filter((n) => /^seed\d+$/.test(n))
    .sort()) {
    const metrics = readRunMetrics(join(out, label, seedDir));
    if (!metrics) continue;
    const start = metrics.evals.find((e) => e.iteration === 0);
    const hasMemory = metrics.train.some((t) => (num(t.memory_size) ?? 0) > 0);
    const mem = (v: unknown) => (hasMemory ? (num(v) ?? '–') : '–');
    lines.push(
      '',
      `## ${label} ${seedDir}`,
      '',
      `Held-out score before training (iteration 0): ${start ? f1(start.mean_score) : '–'}.`,
      '',
      '| iteration | mode | train score | train success | env steps | clipped | rollout s | update s | tips added | memory | held-out after it |',
      '|---|---|---|---|---|---|---|---|---|---|---|',
    );
    for (const t of metrics.train) {
      const held = metrics.evals.find((e) => e.iteration === t.iteration);
      lines.push(
        `| ${t.iteration} | ${modeOf(t.modes)} | ${f1(t.mean_score)} | ${pct(t.success_rate)} | ${num(t.env_steps) ?? '–'} | ${pct(t.clip_fraction)} | ${secs(t.rollout_seconds)} | ${secs(t.update_seconds)} | ${mem(t.tips_added)} | ${mem(t.memory_size)} | ${held ? f1(held.mean_score) : ''} |`,
      );
    }
  }
}
console.log(lines.join('\n'));
