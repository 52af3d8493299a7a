/**
 * Issue #89's report (PROTOCOL.md, "Measures"), from whatever the runs have left so far; it says what is
 * missing. The comparisons are `empo2 compare --report-only`'s (src/compare/runner.ts reportCompare, whose
 * paired differences are src/compare/stats.ts pairedDifference); nothing here computes a statistic of its own
 * beyond counting steps.
 *
 *   npx tsx results/strong-writer/report.ts [--runs results/strong-writer/runs/empo2] \
 *     [--grpo results/real-model/runs/grpo] [--own results/real-model/runs/empo2] [--out results/strong-writer]
 *       writes <out>/results.md (the primary measure and its verdict, EMPO²(stand-in) − EMPO²(own tips), the
 *       tips per iteration) and compare's own reports beside it: compare-grpo.md, compare-own-tips.md
 *   npx tsx results/strong-writer/report.ts summarise <run folder>
 *       writes <run>/tip-following.json from <run>/trajectories/train.jsonl (run.sh does, after each run):
 *       per training iteration, the memory-rollout steps, those shown a tip that named an action, and those
 *       whose action was one a shown tip named (`followed_tip`); small, so it is archived with the run
 *
 * The measures (fixed in PROTOCOL.md): EMPO²(stand-in) − GRPO held-out score at equal environment steps (the
 * largest step count every run of the two arms reached; checkpoints on 34 test variations per task), paired by
 * seed, mean with its 95% t interval; the verdict "better" if the interval is above 0, "worse" if below, else
 * "no difference detected at this size". The share of memory-rollout steps that followed a tip and
 * `tips_skipped`, per iteration. EMPO²(stand-in) − EMPO²(own tips) (results/real-model/runs/empo2), paired.
 */
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
// The study reads its runs exactly as `empo2 compare --report-only` does (its report, config comparison and
// statistics, not part of the library's API), so deep on purpose: compare's result type.
import type { Comparison } from '../../src/compare/aggregate.ts';
// Deep on purpose: compare's report and config differences (above).
import { configDifferences, reportCompare } from '../../src/compare/runner.ts';
// Deep on purpose: the config loader compare uses (a file path and sets, quiet), not the library's loadConfig.
import { loadConfig } from '../../src/config/load.ts';
// Deep on purpose: the settings compare leaves out of a config difference.
import { inertInBoth } from '../../src/config/schema.ts';
// Deep on purpose: the paired-difference type of compare's statistics.
import type { PairedDifference } from '../../src/compare/stats.ts';

export const SEEDS = [0, 1, 2];
export const STAND_IN = 'empo2-stand-in';
const LABEL = `EMPO² (stand-in writer: the environment's solver, not a model)`;

// ---------------------------------------------------------------- tip following, from the trajectories

export interface IterationTips {
  iteration: number;
  /** Training episodes recorded for the iteration (all of them: run.sh records every one). */
  episodes: number;
  /** Those rolled out with tips from memory (modes tips-on-policy, tips-off-policy). */
  memory_episodes: number;
  memory_steps: number;
  /** Memory-rollout steps shown at least one tip. */
  tipped_steps: number;
  /** Memory-rollout steps where a shown tip named an action (`followed_tip` not null). */
  named_steps: number;
  /** Memory-rollout steps whose action was one a shown tip named (`followed_tip` true). */
  followed_steps: number;
}

interface StepLine {
  tips: unknown[];
  followed_tip: boolean | null;
}
interface EpisodeLine {
  type: string;
  source: string;
  iteration: number | null;
  index: number;
  mode: string;
  steps: StepLine[];
}

/** Per iteration, from a run's trajectories/train.jsonl; an iteration redone after a resume counts once (its last recording). */
export function tipFollowing(trainJsonl: string): IterationTips[] {
  const byKey = new Map<string, EpisodeLine>();
  for (const line of readFileSync(trainJsonl, 'utf8').split('\n')) {
    if (!line.trim()) continue;
    const e = JSON.parse(line) as EpisodeLine;
    if (e.type !== 'episode' || e.source !== 'train' || e.iteration === null) continue;
    byKey.set(`${e.iteration}/${e.index}`, e);
  }
  const out = new Map<number, IterationTips>();
  for (const e of byKey.values()) {
    const it = out.get(e.iteration!) ?? {
      iteration: e.iteration!,
      episodes: 0,
      memory_episodes: 0,
      memory_steps: 0,
      tipped_steps: 0,
      named_steps: 0,
      followed_steps: 0,
    };
    it.episodes++;
    if (e.mode.startsWith('tips')) {
      it.memory_episodes++;
      for (const s of e.steps) {
        it.memory_steps++;
        if (s.tips.length > 0) it.tipped_steps++;
        if (s.followed_tip !== null) it.named_steps++;
        if (s.followed_tip === true) it.followed_steps++;
      }
    }
    out.set(it.iteration, it);
  }
  return [...out.values()].sort((a, b) => a.iteration - b.iteration);
}

export function summarise(runDir: string): string {
  const file = join(runDir, 'trajectories', 'train.jsonl');
  if (!existsSync(file)) throw new Error(`${file} does not exist: the run recorded no training episodes`);
  const iterations = tipFollowing(file);
  const out = join(runDir, 'tip-following.json');
  writeFileSync(out, JSON.stringify({ source: 'trajectories/train.jsonl', iterations }, null, 2) + '\n');
  return out;
}

// ---------------------------------------------------------------- the report

interface TrainLine {
  type: 'train';
  iteration: number;
  env_steps: number;
  mean_score: number;
  modes: Record<string, number>;
  tips_added: number;
  tips_skipped?: number;
  memory_size: number;
  tips_followed: number | null;
  external?: { reflector?: { calls: number; cached: number; failed: number } };
}

function trainLines(runDir: string): TrainLine[] {
  const file = join(runDir, 'metrics.jsonl');
  if (!existsSync(file)) return [];
  return readFileSync(file, 'utf8')
    .split('\n')
    .filter((l) => l.trim())
    .map((l) => JSON.parse(l) as { type: string })
    .filter((l): l is TrainLine => l.type === 'train');
}

const f1 = (x: number) => (x > 0 ? '+' : x < 0 ? '−' : '') + Math.abs(x).toFixed(1);
const pct = (a: number, b: number) => (b > 0 ? `${((100 * a) / b).toFixed(1)}%` : '–');

/** The protocol's verdict on a paired difference. */
export function verdict(d: PairedDifference | null): string {
  if (!d) return 'no seed has both values yet';
  if (!d.ci95) return `${d.seeds.length} seed only: no interval, no verdict`;
  const interval = `mean ${f1(d.mean)}, 95% interval [${f1(d.ci95[0])}, ${f1(d.ci95[1])}]`;
  if (d.ci95[0] > 0) return `**better** (${interval})`;
  if (d.ci95[1] < 0) return `**worse** (${interval})`;
  return `**no difference detected at this size** (${interval})`;
}

/** `compare --report-only` over labelled run folders (a scratch folder of links, in this order). */
async function compareReport(arms: { label: string; dir: string }[]): Promise<{ cmp: Comparison; markdown: string }> {
  const scratch = mkdtempSync(join(tmpdir(), 'strong-writer-report-'));
  try {
    for (const a of arms) {
      if (existsSync(a.dir)) symlinkSync(resolve(a.dir), join(scratch, a.label));
      else mkdirSync(join(scratch, a.label));
    }
    const manifest = { configs: arms.map((a) => ({ label: a.label, config: '', set: [], seeds: SEEDS })) };
    writeFileSync(join(scratch, 'compare.json'), JSON.stringify(manifest));
    const r = await reportCompare({ out: scratch, log: () => {} });
    let markdown = r.markdown;
    for (const a of arms) markdown = markdown.split(join(scratch, a.label)).join(a.dir);
    return { cmp: r.comparison, markdown: markdown.split(scratch).join('(report folder)') };
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }
}

/** The paired difference at the equal-steps point from checkpoints (the protocol's measure), with its point. */
function primaryOf(cmp: Comparison, label: string): { metric: string; d: PairedDifference } | null {
  const p = cmp.paired.find((x) => x.label === label && /^score @ .* steps \(checkpoints on \d+ /.test(x.metric));
  return p ? { metric: p.metric, d: p.difference } : null;
}

function pairedSection(title: string, cmp: Comparison, reference: string): string[] {
  const lines = [`## ${title}`, ''];
  const p = primaryOf(cmp, STAND_IN);
  const at = cmp.equalSteps.map((s) => Math.round(s).toLocaleString('en-US')).join(', ');
  lines.push(`Equal-steps point: ${at || 'none yet'} environment steps (the largest every counted run of the two arms reached).`, '');
  for (const c of cmp.configs) {
    const at0 = c.checkpointScoreAtSteps[0];
    const runs = (at0?.runs ?? []).map((r) => `seed ${r.seed}: ${r.score.toFixed(1)}`).join(', ') || '–';
    lines.push(
      `- ${c.label === STAND_IN ? LABEL : c.label}: ${c.included.length} of ${SEEDS.length} runs counted; held-out score there (checkpoints) ${runs}`,
    );
    for (const r of c.excluded) lines.push(`  - seed ${r.seed} not counted: ${r.note ?? r.status}`);
  }
  lines.push('');
  if (p) {
    lines.push(
      `${STAND_IN} − ${reference}, ${p.metric}, paired by seed: per seed ${p.d.seeds.map((s, i) => `${s}: ${f1(p.d.diffs[i])}`).join(', ')}; ` +
        `${p.d.wins} ahead / ${p.d.losses} behind / ${p.d.ties} level.`,
      '',
      `Verdict: ${verdict(p.d)}.`,
    );
  } else lines.push(`No paired difference at equal steps from checkpoints yet (${verdict(null)}).`);
  if (cmp.notes.length > 0) lines.push('', 'Notes (compare):', '', ...cmp.notes.map((n) => `- ${n}`));
  return lines;
}

function tipsSection(runsDir: string): string[] {
  const lines = [
    '## Tips per iteration',
    '',
    'Per run and training iteration: the rollout mode (metrics.jsonl `modes`), tips added, `tips_skipped` (episodes that got no tip: ' +
      'the writer could not place them, or its call failed: `failed`, from `external.reflector`), and, for memory iterations, the share of ' +
      'memory-rollout steps whose action was one a shown tip named (`followed_tip`, from tip-following.json: over all memory-rollout steps, ' +
      'and over those where a shown tip named an action, which is metrics.jsonl `tips_followed`).',
    '',
    '| seed | iteration | mode | score | tips added | tips skipped | writer calls failed | memory size | memory-rollout steps | followed / all memory steps | followed / steps a tip named |',
    '| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |',
  ];
  let skipped = 0;
  let memSteps = 0;
  let followed = 0;
  let named = 0;
  for (const seed of SEEDS) {
    const dir = join(runsDir, `seed${seed}`);
    const train = trainLines(dir);
    const tf = join(dir, 'tip-following.json');
    const tips: IterationTips[] = existsSync(tf)
      ? (JSON.parse(readFileSync(tf, 'utf8')) as { iterations: IterationTips[] }).iterations
      : [];
    for (const t of train) {
      const mode = Object.entries(t.modes)
        .filter(([, n]) => n > 0)
        .map(([m]) => m)
        .join(', ');
      const it = tips.find((x) => x.iteration === t.iteration);
      skipped += t.tips_skipped ?? 0;
      if (it) {
        memSteps += it.memory_steps;
        followed += it.followed_steps;
        named += it.named_steps;
      }
      const memory = it && it.memory_episodes > 0;
      lines.push(
        `| ${seed} | ${t.iteration} | ${mode} | ${t.mean_score.toFixed(1)} | ${t.tips_added} | ${t.tips_skipped ?? '–'} | ${t.external?.reflector?.failed ?? '–'} | ${t.memory_size} | ` +
          `${memory ? it.memory_steps : it ? 0 : '?'} | ${memory ? pct(it.followed_steps, it.memory_steps) : '–'} | ${memory ? pct(it.followed_steps, it.named_steps) : t.tips_followed === null ? '–' : pct(t.tips_followed, 1)} |`,
      );
    }
  }
  lines.push(
    '',
    `All memory iterations together: ${followed} of ${memSteps} memory-rollout steps followed a tip (${pct(followed, memSteps)}), ` +
      `${pct(followed, named)} of the ${named} steps where a shown tip named an action; ${skipped} episodes got no tip.`,
  );
  return lines;
}

/**
 * Where each stand-in run's config.yaml differs from the own-tips run's of its seed (the protocol: the writer
 * only; run.sh also sets what is saved and recorded, RESUMABLE_OPTIONS, which changes nothing trained).
 */
function configSection(runsDir: string, ownDir: string): string[] {
  const lines = ['## Config against EMPO² (own tips), seed by seed', ''];
  for (const seed of SEEDS) {
    const mine = join(runsDir, `seed${seed}`, 'config.yaml');
    const theirs = join(ownDir, `seed${seed}`, 'config.yaml');
    if (!existsSync(mine) || !existsSync(theirs)) {
      lines.push(`- seed ${seed}: no config.yaml to compare yet`);
      continue;
    }
    const quiet = () => {};
    const a = loadConfig(theirs, [], quiet);
    const b = loadConfig(mine, [], quiet);
    const diff = configDifferences(b, a, '', inertInBoth(a, b));
    lines.push(
      `- seed ${seed}: ${diff.length === 0 ? 'no difference' : diff.map((d) => d.replace(' there, ', ' (own tips), ').replace(/ now$/, ' (stand-in)')).join('; ')}`,
    );
  }
  return lines;
}

function statusSection(runsDir: string): { lines: string[]; missing: string[] } {
  const missing: string[] = [];
  const lines = [
    '## What the runs have left',
    '',
    '| seed | trained (eval.md) | last iteration | iter-000006 evaluated | tip-following.json |',
    '| --- | --- | --- | --- | --- |',
  ];
  for (const seed of SEEDS) {
    const dir = join(runsDir, `seed${seed}`);
    const trained = existsSync(join(dir, 'eval.md'));
    const evaluated = existsSync(join(dir, 'checkpoint-evals', 'iter-000006.json'));
    const tf = existsSync(join(dir, 'tip-following.json'));
    const last = trainLines(dir).at(-1)?.iteration ?? '–';
    lines.push(`| ${seed} | ${trained ? 'yes' : 'no'} | ${last} | ${evaluated ? 'yes' : 'no'} | ${tf ? 'yes' : 'no'} |`);
    if (!trained) missing.push(`seed ${seed}: training ${existsSync(dir) ? `stopped after iteration ${last}` : 'not started'}`);
    if (!evaluated) missing.push(`seed ${seed}: the iter-000006 checkpoint evaluation`);
    if (!tf) missing.push(`seed ${seed}: tip-following.json`);
  }
  return { lines, missing };
}

export async function report(o: { runs: string; grpo: string; own: string; out: string }): Promise<string> {
  const status = statusSection(o.runs);
  const vsGrpo = await compareReport([
    { label: 'grpo', dir: o.grpo },
    { label: STAND_IN, dir: o.runs },
  ]);
  const vsOwn = await compareReport([
    { label: 'empo2-own-tips', dir: o.own },
    { label: STAND_IN, dir: o.runs },
  ]);
  const md = [
    `# Strong-writer study (issue #89): ${LABEL} against GRPO`,
    '',
    `Made by \`npx tsx results/strong-writer/report.ts\` from ${o.runs} (${LABEL}), ${o.grpo} (GRPO, the real-model study's runs) and ${o.own} ` +
      "(EMPO² with the policy as its own writer). Protocol: PROTOCOL.md; deviations: RUNS.md. The writer is a **stand-in (the environment's solver, not a model)**.",
    '',
    status.missing.length > 0 ? `**Incomplete**: ${status.missing.join('; ')}.` : 'All three runs of the EMPO² (stand-in) arm are in.',
    '',
    ...pairedSection(`Primary: ${STAND_IN} − GRPO, held-out score at equal environment steps`, vsGrpo.cmp, 'grpo'),
    '',
    ...pairedSection(`The writer's difference: ${STAND_IN} − EMPO² (own tips)`, vsOwn.cmp, 'empo2-own-tips'),
    '',
    ...tipsSection(o.runs),
    '',
    ...status.lines,
    '',
    ...configSection(o.runs, o.own),
    '',
    "compare's full reports: [compare-grpo.md](compare-grpo.md), [compare-own-tips.md](compare-own-tips.md).",
    '',
  ].join('\n');
  mkdirSync(o.out, { recursive: true });
  writeFileSync(join(o.out, 'results.md'), md);
  writeFileSync(join(o.out, 'compare-grpo.md'), vsGrpo.markdown);
  writeFileSync(join(o.out, 'compare-own-tips.md'), vsOwn.markdown);
  return md;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const { values, positionals } = parseArgs({
    allowPositionals: true,
    options: {
      runs: { type: 'string', default: 'results/strong-writer/runs/empo2' },
      grpo: { type: 'string', default: 'results/real-model/runs/grpo' },
      own: { type: 'string', default: 'results/real-model/runs/empo2' },
      out: { type: 'string', default: 'results/strong-writer' },
    },
  });
  if (positionals[0] === 'summarise') {
    if (!positionals[1]) throw new Error('usage: report.ts summarise <run folder>');
    console.log(`wrote ${summarise(positionals[1])}`);
  } else {
    const md = await report({ runs: values.runs, grpo: values.grpo, own: values.own, out: values.out });
    console.log(md);
  }
}
