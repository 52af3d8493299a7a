/**
 * A larger held-out evaluation of each run's final checkpoint (`empo2 compare --final-eval N`).
 * The evaluations logged during training use few variations per task, so two configs a few points
 * apart there are often within noise; this one evaluates the last checkpoint once, on N variations
 * per task, and saves the result as `<run>/final-eval.json` (written by `empo2 eval --json`).
 */
import { existsSync, readFileSync } from 'node:fs';
import { basename, join } from 'node:path';
import { z } from 'zod';
import { latestCheckpoint } from '../run/checkpoint.ts';
import { TaskScoreSchema } from './metrics.ts';

export const FINAL_EVAL = 'final-eval.json';

/** What `empo2 eval --json` writes (the fields the comparison reads). */
const EvalRecordSchema = z.looseObject({
  checkpoint: z.string(),
  /** Training env steps of the evaluated checkpoint; absent in files written before it was recorded. */
  train_env_steps: z.number().min(0).optional(),
  eval_split: z.string(),
  eval_variations: z.number().int().positive(),
  episodes: z.number().int().min(0),
  mean_score: z.number(),
  success_rate: z.number(),
  per_task: z.array(TaskScoreSchema),
});
export type FinalEval = z.infer<typeof EvalRecordSchema>;

export function finalEvalFile(runDir: string): string {
  return join(runDir, FINAL_EVAL);
}

/**
 * The run's final evaluation, when there is one and it was made on the run's latest checkpoint;
 * otherwise null, with a note when a file exists but does not count (stale or unreadable).
 */
export function readFinalEval(runDir: string): { record: FinalEval | null; note?: string } {
  const file = finalEvalFile(runDir);
  if (!existsSync(file)) return { record: null };
  const read = readEvalRecord(file);
  if ('note' in read) return { record: null, note: read.note };
  const parsed = read.record;
  const latest = latestCheckpoint(runDir);
  // A run trained on after its final evaluation has a newer last checkpoint than the one evaluated.
  if (!latest || basename(latest) !== parsed.checkpoint) {
    return {
      record: null,
      note: `${file} evaluated ${parsed.checkpoint}, but the run's latest checkpoint is ${latest ? basename(latest) : 'missing'}; it was ignored`,
    };
  }
  return { record: parsed };
}

/** An existing `empo2 eval --json` file, or a note saying why it cannot be used. */
export function readEvalRecord(file: string): { record: FinalEval } | { note: string } {
  try {
    const r = EvalRecordSchema.safeParse(JSON.parse(readFileSync(file, 'utf8')));
    if (r.success) return { record: r.data };
    return {
      note: `${file} is not an evaluation record (${r.error.issues.map((i) => `${i.path.join('.') || '(file)'}: ${i.message}`).join('; ')}); it was ignored`,
    };
  } catch (e) {
    return { note: `${file} is not valid JSON (${(e as Error).message}); it was ignored` };
  }
}

/** Whether a run still needs its final evaluation on `variations` variations per task of `split`. */
export function needsFinalEval(runDir: string, variations: number, split: string): boolean {
  const { record } = readFinalEval(runDir);
  return record === null || record.eval_variations !== variations || record.eval_split !== split;
}
