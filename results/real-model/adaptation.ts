/**
 * The study's memory-only adaptation over all final checkpoints (PROTOCOL.md): for each checkpoint,
 * tips − no tips over trials 2–K on `fetch` (from the runs.csv that bench/adapt-vs-no-tips.ts wrote
 * for it), then the mean over checkpoints with its 95% t-interval, paired by checkpoint, for all of
 * them and for each training arm's. Prints Markdown.
 *
 * Each checkpoint is measured first (resumable; one at a time, one thread each):
 *   for ck in grpo/seed0 grpo/seed1 grpo/seed2 empo2/seed0 empo2/seed1 empo2/seed2; do
 *     npx tsx bench/adapt-vs-no-tips.ts --checkpoint runs/real-model/$ck -c configs/real-empo2.yaml \
 *       --set env.max_instances=34 --tasks fetch --seeds 0 --trials 5 --variations 10 --jobs 1 \
 *       --out runs/real-model-adapt/${ck/\//-}
 *   done
 *   npx tsx results/real-model/adaptation.ts runs/real-model-adapt > results/real-model/adaptation.md
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { formatPairedDifference, pairedDifference } from '../../src/index.ts';

const root = process.argv[2] ?? 'runs/real-model-adapt';
const mean = (xs: number[]) => xs.reduce((s, x) => s + x, 0) / xs.length;

interface Checkpoint {
  name: string;
  arm: string;
  noTips: number[];
  tips: number[];
  followed: number | null;
  /** Why this checkpoint is a retrained run's, not the archived run's (retrained.md, written by study.sh). */
  retrained: string | null;
}

/** One checkpoint's two arms from its runs.csv (one task, one seed: one row per arm). */
function readCheckpoint(name: string): Checkpoint | null {
  const file = join(root, name, 'runs.csv');
  if (!existsSync(file)) return null;
  const [header, ...rows] = readFileSync(file, 'utf8')
    .trim()
    .split('\n')
    .map((l) => l.split(','));
  const trialCols = header.flatMap((h, i) => (/^trial\d+$/.test(h) ? [i] : []));
  const arm = (which: string) => {
    const matching = rows.filter((r) => r[0] === which);
    if (matching.length !== 1) throw new Error(`${file}: expected one '${which}' row (one task, one seed), found ${matching.length}`);
    return matching[0];
  };
  const tips = arm('tips');
  const followed = tips[header.indexOf('tips_followed_later')];
  return {
    name,
    arm: name.replace(/-seed\d+$/, ''),
    noTips: trialCols.map((i) => Number(arm('no-tips')[i])),
    tips: trialCols.map((i) => Number(tips[i])),
    followed: followed ? Number(followed) : null,
    retrained: existsSync(join(root, name, 'retrained.md')) ? readFileSync(join(root, name, 'retrained.md'), 'utf8').trim() : null,
  };
}

const names = existsSync(root)
  ? readdirSync(root, { withFileTypes: true })
      .filter((d) => d.isDirectory())
      .map((d) => d.name)
      .sort()
  : [];
const checkpoints = names.map(readCheckpoint).filter((c): c is Checkpoint => c !== null);
if (checkpoints.length === 0)
  throw new Error(`${root}: no checkpoint folder with a runs.csv (run bench/adapt-vs-no-tips.ts first; see this script's comment)`);
const later = (xs: number[]) => mean(xs.slice(1));
const K = checkpoints[0].tips.length;

const lines = [
  '# Memory-only adaptation of the final checkpoints',
  '',
  `From \`${root}/<checkpoint>/runs.csv\` (made by \`results/real-model/adaptation.ts\`): frozen weights on \`fetch\`, ${K} trials of 10 test variations, tips from the memory the trials write, against the paired control that writes the same memory and never shows it. Trial 1 shows no tips in either arm and must agree.`,
  '',
  `| checkpoint | no tips, trials 1–${K} | tips, trials 1–${K} | trial 1 agrees | no tips, 2–${K} | tips, 2–${K} | tips − no tips | tip-named actions taken |`,
  '|---|---|---|---|---|---|---|---|',
];
for (const c of checkpoints) {
  const f = (xs: number[]) => xs.map((x) => x.toFixed(1)).join(' / ');
  lines.push(
    `| ${c.name}${c.retrained ? ' (retrained)' : ''} | ${f(c.noTips)} | ${f(c.tips)} | ${c.noTips[0] === c.tips[0] ? 'yes' : '**no**'} | ${later(c.noTips).toFixed(1)} | ${later(c.tips).toFixed(1)} | ${(later(c.tips) - later(c.noTips)).toFixed(1)} | ${c.followed === null ? '–' : `${(c.followed * 100).toFixed(0)}%`} |`,
  );
}
for (const c of checkpoints.filter((c) => c.retrained)) lines.push('', `**${c.name} (retrained).** ${c.retrained!.replace(/\n+/g, ' ')}`);
lines.push(
  '',
  `Tips − no tips over trials 2–${K}, paired by checkpoint, mean and 95% t-interval:`,
  '',
  '| checkpoints | n | tips − no tips |',
  '|---|---|---|',
);
for (const arm of [null, ...new Set(checkpoints.map((c) => c.arm))]) {
  const chosen = checkpoints.filter((c) => arm === null || c.arm === arm);
  const control = new Map(chosen.map((c, i) => [i, later(c.noTips)]));
  const withTips = new Map(chosen.map((c, i) => [i, later(c.tips)]));
  lines.push(`| ${arm ?? 'all'} | ${chosen.length} | ${formatPairedDifference(pairedDifference(control, withTips))} |`);
}
console.log(lines.join('\n'));
