/**
 * Reading one training run's `metrics.jsonl` for comparison. Only the evaluation fields the
 * comparison uses are checked; every other key (on eval and train lines alike) is kept as it is,
 * since the trainer adds keys over time.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { z } from 'zod';

/** One task's held-out result, as both metrics.jsonl eval lines and final-eval.json hold it. */
export const TaskScoreSchema = z.looseObject({
  task: z.string(),
  mean_score: z.number(),
  success_rate: z.number(),
});

const EvalLineSchema = z.looseObject({
  type: z.literal('eval'),
  iteration: z.number().int().min(0),
  train_env_steps: z.number().min(0),
  mean_score: z.number(),
  success_rate: z.number(),
  per_task: z.array(TaskScoreSchema).default([]),
});

const TrainLineSchema = z.looseObject({
  type: z.literal('train'),
  iteration: z.number().int().min(0),
});

export type EvalLine = z.infer<typeof EvalLineSchema>;
export type TrainLine = z.infer<typeof TrainLineSchema>;

export interface RunMetrics {
  file: string;
  /** One per iteration, sorted by iteration. */
  evals: EvalLine[];
  /** One per iteration, sorted by iteration. */
  train: TrainLine[];
  /** Things worth telling the reader that do not stop the comparison (e.g. a truncated last line). */
  warnings: string[];
}

export function metricsFile(runDir: string): string {
  return join(runDir, 'metrics.jsonl');
}

export interface ParseOptions {
  /**
   * A damaged line (not JSON, or not the shape of its type) is an error (the comparison's numbers
   * must not silently miss one), or, for a reader that shows what is there, skipped with a
   * warning. A truncated last line is always skipped with a warning.
   */
  damaged?: 'error' | 'skip';
}

/**
 * Parses `<runDir>/metrics.jsonl`; null when the file does not exist. A run resumed from a
 * checkpoint re-logs the iterations after that checkpoint, so for each (type, iteration) the last
 * line is the one that belongs to the run's final history.
 */
export function readRunMetrics(runDir: string, opts: ParseOptions = {}): RunMetrics | null {
  const file = metricsFile(runDir);
  if (!existsSync(file)) return null;
  return parseMetrics(readFileSync(file, 'utf8'), file, opts);
}

export function parseMetrics(text: string, file: string, opts: ParseOptions = {}): RunMetrics {
  const lines = text.split('\n');
  const evals = new Map<number, EvalLine>();
  const train = new Map<number, TrainLine>();
  const warnings: string[] = [];
  const damaged = (where: string, why: string): void => {
    if (opts.damaged !== 'skip') throw new Error(`${where}: ${why}`);
    warnings.push(`${where}: skipped: ${why}`);
  };
  let lastNonEmpty = lines.length - 1;
  while (lastNonEmpty >= 0 && lines[lastNonEmpty].trim() === '') lastNonEmpty--;
  lines.forEach((line, i) => {
    if (line.trim() === '') return;
    const where = `${file}:${i + 1}`;
    let value: unknown;
    try {
      value = JSON.parse(line);
    } catch (e) {
      // A process killed mid-write leaves a partial last line; anything earlier is real damage.
      if (i === lastNonEmpty) {
        warnings.push(`${where}: ignored a truncated last line (the run was probably killed while writing it)`);
        return;
      }
      return damaged(where, `not valid JSON (${(e as Error).message})`);
    }
    const type = (value as { type?: unknown } | null)?.type;
    const invalid = (value as { invalid?: unknown } | null)?.invalid;
    if (type === 'eval' && typeof invalid === 'string') {
      // An evaluation with too many failed episodes gave no score (its score fields are null).
      const iteration = (value as { iteration?: unknown }).iteration;
      if (typeof iteration === 'number') evals.delete(iteration);
      warnings.push(`${where}: the evaluation at iteration ${String(iteration)} is invalid (${invalid}); it has no score`);
      return;
    }
    const schema = type === 'eval' ? EvalLineSchema : type === 'train' ? TrainLineSchema : null;
    // Other line types (none today) are not the comparison's business.
    if (!schema) return;
    const r = schema.safeParse(value);
    if (!r.success) {
      const problems = r.error.issues.map((issue) => `${issue.path.join('.') || '(line)'}: ${issue.message}`).join('; ');
      return damaged(where, `unexpected ${type} line (${problems})`);
    }
    if (r.data.type === 'eval') evals.set(r.data.iteration, r.data);
    else train.set(r.data.iteration, r.data);
  });
  const byIteration = <T extends { iteration: number }>(m: Map<number, T>) => [...m.values()].sort((a, b) => a.iteration - b.iteration);
  return { file, evals: byIteration(evals), train: byIteration(train), warnings };
}
