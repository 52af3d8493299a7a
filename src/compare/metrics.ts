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

/**
 * Parses `<runDir>/metrics.jsonl`; null when the file does not exist. A run resumed from a
 * checkpoint re-logs the iterations after that checkpoint, so for each (type, iteration) the last
 * line is the one that belongs to the run's final history.
 */
export function readRunMetrics(runDir: string): RunMetrics | null {
  const file = metricsFile(runDir);
  if (!existsSync(file)) return null;
  return parseMetrics(readFileSync(file, 'utf8'), file);
}

export function parseMetrics(text: string, file: string): RunMetrics {
  const lines = text.split('\n');
  const evals = new Map<number, EvalLine>();
  const train = new Map<number, TrainLine>();
  const warnings: string[] = [];
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
      throw new Error(`${where}: not valid JSON (${(e as Error).message})`);
    }
    const type = (value as { type?: unknown } | null)?.type;
    if (type === 'eval') {
      const e = checked(EvalLineSchema, value, where);
      evals.set(e.iteration, e);
    } else if (type === 'train') {
      const t = checked(TrainLineSchema, value, where);
      train.set(t.iteration, t);
    }
    // Other line types (none today) are not the comparison's business.
  });
  const byIteration = <T extends { iteration: number }>(m: Map<number, T>) => [...m.values()].sort((a, b) => a.iteration - b.iteration);
  return { file, evals: byIteration(evals), train: byIteration(train), warnings };
}

function checked<T extends z.ZodType>(schema: T, value: unknown, where: string): z.infer<T> {
  const r = schema.safeParse(value);
  if (r.success) return r.data;
  const problems = r.error.issues.map((i) => `${i.path.join('.') || '(line)'}: ${i.message}`).join('; ');
  throw new Error(`${where}: unexpected ${(value as { type: string }).type} line (${problems})`);
}
