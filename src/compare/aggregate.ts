/**
 * Turning several runs per config into one comparison: final held-out score and success over
 * seeds, score at equal environment steps, normalised area under the learning curve, wall time,
 * per-task final scores and a mean/min/max learning curve per config.
 *
 * x is always `train_env_steps` (training environment steps consumed when the evaluation ran),
 * because configs differ in how many steps one iteration takes; comparing at equal iterations
 * would favour whichever algorithm spends more steps per iteration.
 */
import { checkpointScoreAt, checkpointTaskScoresAt, type EvalSetting, type KeptCheckpoint } from './checkpoint-evals.ts';
import type { FinalEval } from './final-eval.ts';
import type { EvalLine, RunMetrics } from './metrics.ts';
import {
  interpolateAt,
  normalizedArea,
  pairedDifference,
  summarize,
  type CurvePoint,
  type PairedDifference,
  type Summary,
} from './stats.ts';

export type RunStatus = 'finished' | 'unfinished' | 'missing';

export interface RunRecord {
  label: string;
  seed: number;
  dir: string;
  status: RunStatus;
  metrics: RunMetrics | null;
  /** Seconds the run took; see wallSource for what was measured. */
  wallSeconds: number | null;
  /**
   * 'trainer': the trainer's clock, iterations and every evaluation, summed over resumed attempts;
   * 'compare': child-process wall time measured by `empo2 compare` (summed over the attempts it saw
   * end); 'iterations': the trainer's elapsed_seconds alone (the first and last evaluation untimed).
   */
  wallSource: 'trainer' | 'compare' | 'iterations' | null;
  /** Why the run is not finished, or what went wrong, for the notes under the table. */
  note?: string;
  /** The larger evaluation of the run's last checkpoint (`compare --final-eval`), if it has one. */
  finalEval?: FinalEval | null;
  /** Why a final-eval.json in the run folder was not used. */
  finalEvalNote?: string;
  /** The run's checkpoints on disk with their larger evaluations (`compare --equal-steps-eval`), by env steps. */
  checkpoints?: KeptCheckpoint[];
  /** Checkpoints or evaluation files that could not be used, and why. */
  checkpointNotes?: string[];
}

export interface CurveSummaryPoint {
  x: number;
  n: number;
  mean: number;
  std: number | null;
  min: number;
  max: number;
}

export interface ConfigResult {
  label: string;
  /** Runs whose numbers are in this result. */
  included: RunRecord[];
  /** Planned runs left out (unfinished or missing), with the reason in their note. */
  excluded: RunRecord[];
  finalScore: Summary | null;
  finalSuccess: Summary | null;
  finalEnvSteps: Summary | null;
  scoreAtSteps: { steps: number; score: Summary | null }[];
  /** Average held-out score over the common env-step range (area under the curve / range width). */
  auc: Summary | null;
  wallSeconds: Summary | null;
  perTask: { task: string; score: Summary | null; success: Summary | null }[];
  curve: CurveSummaryPoint[];
  /** Over the counted runs that have a final evaluation in the comparison's setting (Comparison.finalEval). */
  finalEval: {
    runs: { seed: number; score: number; success: number }[];
    score: Summary | null;
    success: Summary | null;
    perTask: { task: string; score: Summary | null; success: Summary | null }[];
  } | null;
  /** Per equal-steps point, the score interpolated between the evaluated checkpoints around it (Comparison.checkpointEval); empty without such evaluations. */
  checkpointScoreAtSteps: {
    steps: number;
    runs: { seed: number; score: number }[];
    score: Summary | null;
    /** The same per task (family), over the runs that have both bracketing evaluations. */
    perTask: { task: string; runs: { seed: number; score: number }[]; score: Summary | null }[];
  }[];
}

/** One metric of one config against the first config, seed by seed. */
export interface PairedResult {
  label: string;
  reference: string;
  metric: string;
  difference: PairedDifference;
}

export interface Comparison {
  configs: ConfigResult[];
  /** Every other config against the first on the seeds both ran: the final evaluation (when there is one), the score at each equal-steps point, the AUC. */
  paired: PairedResult[];
  /** Env-step counts at which every config's score is compared. */
  equalSteps: number[];
  /** The env-step range every included run covers; the AUC is taken over it. Null when no run is included. */
  commonRange: { from: number; to: number } | null;
  /** The setting every counted run's final evaluation shares; null when no run has one, or they differ (a note says so). */
  finalEval: { split: string; variations: number; episodesPerRun: number } | null;
  /** The setting of the checkpoint evaluations behind ConfigResult.checkpointScoreAtSteps; null when there are none. */
  checkpointEval: EvalSetting | null;
  notes: string[];
}

export interface AggregateOptions {
  /** Env-step points for the equal-steps columns (default: the end of the common range). */
  atSteps?: number[];
  /** Also use runs that stopped before their last iteration (their last evaluation counts as final). */
  includeUnfinished?: boolean;
  /** Use checkpoint evaluations on this many variations per task (default: the setting most of them share). */
  checkpointEvalVariations?: number;
}

export function evalCurve(evals: EvalLine[], field: 'mean_score' | 'success_rate' = 'mean_score'): CurvePoint[] {
  // Sorted by iteration; env steps never decrease with iteration, so the curve is sorted by x too.
  return evals.map((e) => ({ x: e.train_env_steps, y: e[field] }));
}

export function aggregate(groups: { label: string; runs: RunRecord[] }[], opts: AggregateOptions = {}): Comparison {
  const notes: string[] = [];
  const usable = (r: RunRecord) =>
    (r.metrics?.evals.length ?? 0) > 0 && (r.status === 'finished' || (opts.includeUnfinished === true && r.status === 'unfinished'));
  const split = groups.map((g) => ({ label: g.label, included: g.runs.filter(usable), excluded: g.runs.filter((r) => !usable(r)) }));
  const allIncluded = split.flatMap((g) => g.included);
  for (const r of allIncluded) for (const w of r.metrics!.warnings) notes.push(w);
  const curves = new Map(allIncluded.map((r) => [r, evalCurve(r.metrics!.evals)]));
  const { range, equalSteps } = equalStepsPoints(allIncluded, curves, opts.atSteps, notes);
  const finalEval = finalEvalSetting(allIncluded, notes);
  const checkpointEval = checkpointEvalSetting(allIncluded, opts.checkpointEvalVariations, notes);
  const scores = runScores({ runs: allIncluded, curves, equalSteps, checkpointEval, range }, notes);
  const configs = split.map((g) => configResult(g, { scores, curves, equalSteps, finalEval, checkpointEval }));
  for (const c of configs) {
    for (const r of c.excluded) notes.push(`${c.label}/seed${r.seed}: not counted (${r.note ?? r.status})`);
    const iterationsOnly = c.included.filter((r) => r.wallSource === 'iterations');
    if (iterationsOnly.length > 0)
      notes.push(
        `${c.label}: wall time of ${iterationsOnly.length} run(s) is the trainer's elapsed_seconds (not launched by compare; excludes the first and last evaluation)`,
      );
  }
  const paired = pairedResults(configs, comparedMetrics({ scores, equalSteps, finalEval, checkpointEval, range }));
  return { configs, paired, equalSteps, commonRange: range, finalEval, checkpointEval, notes };
}

/**
 * The env-step range every included run covers (null when there is none) and the equal-steps points
 * (opts.atSteps, else the end of that range), with notes on runs that do not reach a point.
 */
function equalStepsPoints(runs: RunRecord[], curves: Map<RunRecord, CurvePoint[]>, atSteps: number[] | undefined, notes: string[]) {
  const commonRange =
    runs.length === 0
      ? null
      : { from: Math.max(...runs.map((r) => curves.get(r)![0].x)), to: Math.min(...runs.map((r) => curves.get(r)!.at(-1)!.x)) };
  if (commonRange && commonRange.from > commonRange.to) {
    notes.push(
      `the runs cover no common env-step range (latest start ${commonRange.from}, earliest end ${commonRange.to}): no equal-steps score or AUC`,
    );
  }
  const rangeOk = commonRange !== null && commonRange.from <= commonRange.to;
  const equalSteps = atSteps ?? (rangeOk ? [commonRange.to] : []);
  for (const steps of equalSteps) {
    if (!Number.isFinite(steps) || steps < 0) throw new Error(`equal-steps point must be a non-negative number, got ${steps}`);
    const outside = runs.filter((r) => interpolateAt(curves.get(r)!, steps) === null);
    if (outside.length > 0)
      notes.push(
        `score @ ${fmtSteps(steps)} steps leaves out ${outside.length} run(s) that did not reach it (${outside.map((r) => `${r.label}/seed${r.seed}`).join(', ')})`,
      );
  }
  return { range: rangeOk ? commonRange : null, equalSteps };
}

/** A run's number for one metric (null where the run has none). */
type RunValue = (r: RunRecord) => number | null;

/** Per-run metrics, shared by the summaries over seeds and the paired differences. */
interface RunScores {
  scoreAt: (steps: number) => RunValue;
  checkpointScoreOf: (steps: number) => RunValue;
  checkpointTaskScoreOf: (steps: number, task: string) => RunValue;
  /** Tasks with checkpoint scores at some equal-steps point. */
  checkpointTasks: string[];
  auc: RunValue | null;
}

function runScores(
  a: {
    runs: RunRecord[];
    curves: Map<RunRecord, CurvePoint[]>;
    equalSteps: number[];
    checkpointEval: EvalSetting | null;
    range: { from: number; to: number } | null;
  },
  notes: string[],
): RunScores {
  const { runs, curves, equalSteps, checkpointEval, range } = a;
  const checkpointScore = new Map<RunRecord, Map<number, number>>();
  if (checkpointEval) {
    for (const r of runs) {
      const byStep = new Map<number, number>();
      for (const steps of equalSteps) {
        const s = checkpointScoreAt(r.checkpoints ?? [], steps, checkpointEval);
        if ('score' in s) byStep.set(steps, s.score);
        else notes.push(`${r.label}/seed${r.seed}: no checkpoint score @ ${fmtSteps(steps)} steps: ${s.missing}`);
      }
      checkpointScore.set(r, byStep);
    }
  }
  return {
    scoreAt: (steps) => (r) => interpolateAt(curves.get(r)!, steps),
    checkpointScoreOf: (steps) => (r) => checkpointScore.get(r)?.get(steps) ?? null,
    checkpointTaskScoreOf: (steps, task) => (r) =>
      checkpointEval
        ? (checkpointTaskScoresAt(r.checkpoints ?? [], steps, checkpointEval).find((t) => t.task === task)?.score ?? null)
        : null,
    checkpointTasks: checkpointEval
      ? [
          ...new Set(
            runs.flatMap((r) =>
              equalSteps.flatMap((steps) => checkpointTaskScoresAt(r.checkpoints ?? [], steps, checkpointEval).map((t) => t.task)),
            ),
          ),
        ]
      : [],
    auc: range ? (r) => normalizedArea(curves.get(r)!, range.from, range.to) : null,
  };
}

/** One config's numbers over its counted runs. */
function configResult(
  g: { label: string; included: RunRecord[]; excluded: RunRecord[] },
  a: {
    scores: RunScores;
    curves: Map<RunRecord, CurvePoint[]>;
    equalSteps: number[];
    finalEval: Comparison['finalEval'];
    checkpointEval: EvalSetting | null;
  },
): ConfigResult {
  const { label, included, excluded } = g;
  const { scores, equalSteps } = a;
  const finals = included.map((r) => r.metrics!.evals.at(-1)!);
  const values = (f: RunValue) => summarize(included.map(f).filter((v): v is number => v !== null));
  return {
    label,
    included,
    excluded,
    finalScore: summarize(finals.map((e) => e.mean_score)),
    finalSuccess: summarize(finals.map((e) => e.success_rate)),
    finalEnvSteps: summarize(finals.map((e) => e.train_env_steps)),
    scoreAtSteps: equalSteps.map((steps) => ({ steps, score: values(scores.scoreAt(steps)) })),
    auc: scores.auc ? values(scores.auc) : null,
    wallSeconds: values((r) => r.wallSeconds),
    perTask: summarizeTasks(finals.map((e) => e.per_task)),
    curve: meanCurve(included.map((r) => a.curves.get(r)!)),
    finalEval: a.finalEval ? summarizeFinalEvals(included.flatMap((r) => (r.finalEval ? [[r.seed, r.finalEval] as const] : []))) : null,
    checkpointScoreAtSteps: a.checkpointEval ? equalSteps.map((steps) => checkpointScoresAt(included, steps, scores)) : [],
  };
}

/** The checkpoint scores of a config's runs at one equal-steps point, overall and per task. */
function checkpointScoresAt(included: RunRecord[], steps: number, scores: RunScores): ConfigResult['checkpointScoreAtSteps'][number] {
  const seedScores = (value: RunValue) =>
    included.flatMap((r) => {
      const score = value(r);
      return score === null ? [] : [{ seed: r.seed, score }];
    });
  const runs = seedScores(scores.checkpointScoreOf(steps));
  const perTask = scores.checkpointTasks.map((task) => {
    const taskRuns = seedScores(scores.checkpointTaskScoreOf(steps, task));
    return { task, runs: taskRuns, score: summarize(taskRuns.map((x) => x.score)) };
  });
  return { steps, runs, score: summarize(runs.map((x) => x.score)), perTask };
}

/** The metrics compared seed by seed between configs, in the order the report lists them. */
function comparedMetrics(a: {
  scores: RunScores;
  equalSteps: number[];
  finalEval: Comparison['finalEval'];
  checkpointEval: EvalSetting | null;
  range: { from: number; to: number } | null;
}): { metric: string; value: RunValue }[] {
  const { scores, equalSteps, finalEval, checkpointEval, range } = a;
  const metrics: { metric: string; value: RunValue }[] = [];
  if (finalEval)
    metrics.push({
      metric: `score on ${finalEval.variations} ${finalEval.split} variations per task (final checkpoint)`,
      value: (r) => r.finalEval?.mean_score ?? null,
    });
  if (checkpointEval) {
    for (const steps of equalSteps)
      metrics.push({
        metric: `score @ ${fmtSteps(steps)} steps (checkpoints on ${checkpointEval.variations} ${checkpointEval.split} variations per task)`,
        value: scores.checkpointScoreOf(steps),
      });
    for (const steps of equalSteps) {
      for (const task of scores.checkpointTasks)
        metrics.push({
          metric: `${task}: score @ ${fmtSteps(steps)} steps (checkpoints)`,
          value: scores.checkpointTaskScoreOf(steps, task),
        });
    }
  }
  for (const steps of equalSteps) metrics.push({ metric: `score @ ${fmtSteps(steps)} steps`, value: scores.scoreAt(steps) });
  if (range && scores.auc) metrics.push({ metric: `AUC ${fmtSteps(range.from)}–${fmtSteps(range.to)}`, value: scores.auc });
  return metrics;
}

/** Every other config against the first, metric by metric, on the seeds both ran. */
function pairedResults(configs: ConfigResult[], metrics: { metric: string; value: RunValue }[]): PairedResult[] {
  const bySeed = (runs: RunRecord[], value: RunValue) => {
    const out = new Map<number, number>();
    for (const r of runs) {
      const v = value(r);
      if (v !== null) out.set(r.seed, v);
    }
    return out;
  };
  const paired: PairedResult[] = [];
  const [reference, ...others] = configs;
  for (const other of others) {
    for (const { metric, value } of metrics) {
      const difference = pairedDifference(bySeed(reference.included, value), bySeed(other.included, value));
      if (difference) paired.push({ label: other.label, reference: reference.label, metric, difference });
    }
  }
  return paired;
}

/**
 * The setting of the checkpoint evaluations to report: `variations` when given, and the split most
 * of those evaluations share (the first such when tied). Null when no counted run has any.
 */
function checkpointEvalSetting(runs: RunRecord[], variations: number | undefined, notes: string[]): EvalSetting | null {
  for (const r of runs) for (const n of r.checkpointNotes ?? []) notes.push(`${r.label}/seed${r.seed}: ${n}`);
  const counts = new Map<string, { setting: EvalSetting; n: number }>();
  for (const r of runs) {
    for (const c of r.checkpoints ?? []) {
      // Final evaluations alone do not turn the section on, except when asked for their setting (runs that all ended at the point).
      for (const e of variations === undefined ? [c.evaluated] : [c.evaluated, c.final]) {
        if (!e || (variations !== undefined && e.eval_variations !== variations)) continue;
        const key = `${e.eval_variations} variations per task of the ${e.eval_split} split`;
        counts.set(key, { setting: { split: e.eval_split, variations: e.eval_variations }, n: (counts.get(key)?.n ?? 0) + 1 });
      }
    }
  }
  if (counts.size === 0) return null;
  const ranked = [...counts.entries()].sort((a, b) => b[1].n - a[1].n);
  if (ranked.length > 1)
    notes.push(
      `checkpoint evaluations were made in several settings; the report uses ${ranked[0][0]} (others: ${ranked
        .slice(1)
        .map(([k]) => k)
        .join('; ')})`,
    );
  return ranked[0][1].setting;
}

/** The final-evaluation setting shared by every counted run that has one; notes the runs without. */
function finalEvalSetting(runs: RunRecord[], notes: string[]): Comparison['finalEval'] {
  for (const r of runs) if (r.finalEvalNote) notes.push(`${r.label}/seed${r.seed}: ${r.finalEvalNote}`);
  const evaluated = runs.filter((r) => r.finalEval);
  if (evaluated.length === 0) return null;
  const settings = new Set(
    evaluated.map((r) => `${r.finalEval!.eval_variations} variations per task of the ${r.finalEval!.eval_split} split`),
  );
  if (settings.size > 1) {
    // Averaging a 30-episode evaluation with a 150-episode one would hide which runs were measured how.
    notes.push(
      `the runs' final evaluations differ in setting (${[...settings].join('; ')}), so they are not summarised; re-run compare with one --final-eval`,
    );
    return null;
  }
  const first = evaluated[0].finalEval!;
  const missing = runs.filter((r) => !r.finalEval);
  if (missing.length > 0)
    notes.push(
      `final evaluation on ${first.eval_variations} variations per task is missing for ${missing.map((r) => `${r.label}/seed${r.seed}`).join(', ')} (compare --final-eval ${first.eval_variations} adds it)`,
    );
  return { split: first.eval_split, variations: first.eval_variations, episodesPerRun: first.episodes };
}

function summarizeFinalEvals(runs: (readonly [number, FinalEval])[]): NonNullable<ConfigResult['finalEval']> {
  return {
    runs: runs.map(([seed, e]) => ({ seed, score: e.mean_score, success: e.success_rate })),
    score: summarize(runs.map(([, e]) => e.mean_score)),
    success: summarize(runs.map(([, e]) => e.success_rate)),
    perTask: summarizeTasks(runs.map(([, e]) => e.per_task)),
  };
}

/** Per task, score and success over runs (each run's list of per-task results; a run without the task is skipped). */
function summarizeTasks(runs: { task: string; mean_score: number; success_rate: number }[][]): ConfigResult['perTask'] {
  const tasks = [...new Set(runs.flatMap((r) => r.map((t) => t.task)))];
  return tasks.map((task) => {
    const rows = runs.map((r) => r.find((t) => t.task === task)).filter((t) => t !== undefined);
    return { task, score: summarize(rows.map((t) => t.mean_score)), success: summarize(rows.map((t) => t.success_rate)) };
  });
}

/**
 * Mean, spread and range over seeds at every env-step count where some seed evaluated, within
 * the range all seeds cover (each seed interpolated there).
 */
export function meanCurve(curves: CurvePoint[][]): CurveSummaryPoint[] {
  const nonEmpty = curves.filter((c) => c.length > 0);
  if (nonEmpty.length === 0) return [];
  const from = Math.max(...nonEmpty.map((c) => c[0].x));
  const to = Math.min(...nonEmpty.map((c) => c.at(-1)!.x));
  const xs = [...new Set(nonEmpty.flatMap((c) => c.map((p) => p.x)))].filter((x) => x >= from && x <= to).sort((a, b) => a - b);
  return xs.map((x) => {
    const s = summarize(nonEmpty.map((c) => interpolateAt(c, x)!))!;
    return { x, n: s.n, mean: s.mean, std: s.std, min: s.min, max: s.max };
  });
}

export function fmtSteps(steps: number): string {
  return Number.isInteger(steps) ? steps.toLocaleString('en-US') : steps.toFixed(1);
}
