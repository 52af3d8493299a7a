/**
 * The report of issue #89's memory-only result from the state file ./memory-only.ts writes: per trial and
 * arm the mean score, success and tip use; and the protocol's measure: the paired difference, memory −
 * no memory, by episode, of the mean score over trials 2..K, with its 95% t interval (src/compare/stats.ts
 * pairedDifference, keyed by episode). A run still under way gives a partial report: an episode enters the
 * difference with the trials ≥ 2 that both arms have played for it, and the report says how many.
 *
 *   npx tsx results/strong-writer/memory-only-report.ts [runs/strong-writer/memory-only/state.json]
 */
import { readFileSync } from 'node:fs';
import { formatPairedDifference, pairedDifference, type PairedDifference } from '../../src/index.ts';
import { passes, playKey, WRITER_LABEL, type Arm, type MemoryOnlyState, type Play } from './memory-only.ts';

export interface MemoryOnlySummary {
  /** Plays recorded, of those the run will make. */
  recorded: number;
  planned: number;
  /** Episodes in the paired difference, and the plays of each arm it rests on. */
  paired: PairedDifference | null;
  pairedPlays: number;
  markdown: string;
}

const mean = (xs: number[]) => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : NaN);
const pct = (a: number, b: number) => (b ? `${((100 * a) / b).toFixed(1)}%` : '–');

export function summarizeMemoryOnly(state: MemoryOnlyState): MemoryOnlySummary {
  const trials = Number(state.settings.trials);
  const planned = passes(trials).length * state.episodes.length;
  const plays = Object.values(state.plays);
  const get = (arm: Arm, t: number, e: number): Play | undefined => state.plays[playKey(arm, t, e)];

  // The measure: per episode, mean over the trials ≥ 2 both arms played of (memory − no memory).
  const memory = new Map<number, number>();
  const none = new Map<number, number>();
  let pairedPlays = 0;
  state.episodes.forEach((_, e) => {
    const both: [Play, Play][] = [];
    for (let t = 2; t <= trials; t++) {
      const m = get('memory', t, e);
      const n = get('no-memory', t, e);
      if (m && n) both.push([m, n]);
    }
    if (both.length === 0) return;
    pairedPlays += both.length;
    memory.set(e, mean(both.map(([m]) => m.score)));
    none.set(e, mean(both.map(([, n]) => n.score)));
  });
  const paired = pairedDifference(none, memory);

  const rows: string[] = [];
  for (const [arm, t] of passes(trials).sort((a, b) => a[1] - b[1] || a[0].localeCompare(b[0]))) {
    const ps = plays.filter((p) => p.arm === arm && p.trial === t);
    if (ps.length === 0) continue;
    const steps = ps.reduce((n, p) => n + p.steps, 0);
    const withTips = ps.reduce((n, p) => n + p.steps_with_tips, 0);
    const named = ps.reduce((n, p) => n + p.steps_tip_named_action, 0);
    const took = ps.reduce((n, p) => n + p.steps_took_tip_action, 0);
    const solverWith = ps.reduce((n, p) => n + p.solver_taken_with_tips, 0);
    const solverWithout = ps.reduce((n, p) => n + p.solver_taken_without_tips, 0);
    const skipped = ps.filter((p) => p.tip_skipped).length;
    rows.push(
      `| ${arm} | ${t} | ${ps.length}/${state.episodes.length} | ${mean(ps.map((p) => p.score)).toFixed(1)} | ` +
        `${pct(ps.filter((p) => p.success).length, ps.length)} | ${pct(withTips, steps)} | ${pct(took, named)} | ` +
        `${pct(solverWith, withTips)} | ${pct(solverWithout, steps - withTips)} | ${arm === 'memory' ? skipped : '–'} |`,
    );
  }
  // The check: trial 1 shows no tip in either arm, and the calls are seeded alike, so the two must agree.
  const t1 = state.episodes
    .map((_, e) => [get('memory', 1, e), get('no-memory', 1, e)] as const)
    .filter((x): x is readonly [Play, Play] => x[0] !== undefined && x[1] !== undefined);
  const t1Same = t1.filter(([m, n]) => m.actions.join('\n') === n.actions.join('\n')).length;

  const trialsUsed = [...new Set(plays.filter((p) => p.trial >= 2).map((p) => p.trial))].sort();
  const complete = Object.keys(state.plays).length === planned;
  const markdown = [
    `Tip writer: **${WRITER_LABEL}**. Upstream: ${String(state.settings.model)}, frozen.`,
    '',
    complete
      ? `Complete: ${planned} plays.`
      : `**PARTIAL**: ${Object.keys(state.plays).length} of ${planned} plays recorded (trials ≥ 2 so far: ${trialsUsed.join(', ') || 'none'}).`,
    '',
    `Memory − no memory, mean score over trials 2–${trials} by episode (95% t interval; ahead/behind count episodes): ` +
      `**${formatPairedDifference(paired)}**, ${paired?.seeds.length ?? 0} of ${state.episodes.length} episodes, ${pairedPlays} paired plays.`,
    '',
    "| arm | trial | episodes | mean score | success | steps shown tips | took a tip's action (of steps whose tips name one) | solver's action, steps with tips | solver's action, steps without | tips skipped |",
    '|---|---|---|---|---|---|---|---|---|---|',
    ...rows,
    '',
    t1.length
      ? `Trial 1 check (no tips in either arm, same seeds): ${t1Same} of ${t1.length} episodes took the same actions in both arms.`
      : 'Trial 1 check (no-memory arm, trial 1): not played yet.',
  ].join('\n');
  return { recorded: Object.keys(state.plays).length, planned, paired, pairedPlays, markdown };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const file = process.argv[2] ?? 'runs/strong-writer/memory-only/state.json';
  console.log(summarizeMemoryOnly(JSON.parse(readFileSync(file, 'utf8')) as MemoryOnlyState).markdown);
}
