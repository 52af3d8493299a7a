/**
 * The score at equal environment steps from larger evaluations of saved checkpoints
 * (`empo2 compare --equal-steps-eval N`).
 *
 * The "score @ N steps" column interpolates the evaluations logged during training, which use few
 * variations per task; the final evaluation (`--final-eval`) is large but compares runs at equal
 * iterations, and configs spend different numbers of steps per iteration. This takes, for each run,
 * the two kept checkpoints whose training env steps bracket N, evaluates both on N variations per
 * task (`<run>/checkpoint-evals/<checkpoint>.json`, written by `empo2 eval --json`) and
 * interpolates linearly between them. A run's final evaluation counts for its last checkpoint, and an
 * evaluation the run logged during training counts for the checkpoint saved with it when it used the
 * same settings (it is the same computation).
 */
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { checkpointsDir } from '../run/checkpoint.ts';
import { loadTrainerState } from '../run/trainer-state.ts';
import { readEvalRecord, type FinalEval } from './final-eval.ts';
import type { EvalLine } from './metrics.ts';
import { interpolateAt } from './stats.ts';

export const CHECKPOINT_EVALS = 'checkpoint-evals';

export interface KeptCheckpoint {
  /** Folder name, e.g. iter-000028. */
  name: string;
  dir: string;
  /** Training environment steps when it was saved (its trainer_state.json). */
  envSteps: number;
  /** Its evaluation in `<run>/checkpoint-evals/`, when that file belongs to these weights. */
  evaluated: FinalEval | null;
  /** The run's final evaluation, when this is the checkpoint it was made on. */
  final: FinalEval | null;
  /**
   * The evaluation the run logged during training with these weights (metrics.jsonl), when it was
   * played as `empo2 eval` would play it now: the same split, variations, temperature and tips. The
   * evaluation's sampling seed depends only on the run's seed, so `empo2 eval` would repeat it episode
   * for episode (src/compare/checkpoint-evals.test.ts checks that it does).
   */
  logged: FinalEval | null;
}

/** How `empo2 eval` plays a run's checkpoints: its config.yaml's evaluation settings. */
export interface RunEvalSettings {
  split: string;
  variations: number;
  temperature: number;
  withMemory: boolean;
}

/**
 * The evaluation logged at `iteration` after `envSteps` steps, as a record of checkpoint `name`, when
 * it matches `settings`. Lines written before the trainer recorded its settings count when their
 * episode count fits the variations (the temperature and tips are then taken from the config).
 */
export function loggedEval(
  evals: readonly EvalLine[],
  name: string,
  iteration: number,
  envSteps: number,
  settings: RunEvalSettings,
): FinalEval | null {
  const line = evals.find((e) => e.iteration === iteration && e.train_env_steps === envSteps);
  if (!line) return null;
  const episodes = typeof line.episodes === 'number' ? line.episodes : null;
  const recorded = typeof line.eval_variations === 'number';
  const same = recorded
    ? line.eval_split === settings.split &&
      line.eval_variations === settings.variations &&
      line.eval_temperature === settings.temperature &&
      line.eval_with_memory === settings.withMemory
    : episodes === settings.variations * line.per_task.length;
  if (!same || episodes === null) return null;
  return {
    checkpoint: name,
    train_env_steps: envSteps,
    eval_split: settings.split,
    eval_variations: settings.variations,
    episodes,
    mean_score: line.mean_score,
    success_rate: line.success_rate,
    per_task: line.per_task,
  };
}

export function checkpointEvalFile(runDir: string, checkpoint: string): string {
  return join(runDir, CHECKPOINT_EVALS, `${checkpoint}.json`);
}

/**
 * The evaluation of checkpoint `name` in `<run>/checkpoint-evals/`, if any. It counts when it names
 * the checkpoint and the checkpoint's env steps, so a file left from an earlier run that was
 * started over in the same folder is not taken for the new weights.
 */
export function readCheckpointEval(runDir: string, name: string, envSteps: number): { record: FinalEval | null; note?: string } {
  const file = checkpointEvalFile(runDir, name);
  if (!existsSync(file)) return { record: null };
  const r = readEvalRecord(file);
  if ('note' in r) return { record: null, note: r.note };
  if (r.record.checkpoint !== name || r.record.train_env_steps !== envSteps) {
    return {
      record: null,
      note: `${file} evaluated ${r.record.checkpoint} at ${r.record.train_env_steps ?? 'unknown'} env steps, but ${name} holds ${envSteps}; it was ignored`,
    };
  }
  return { record: r.record };
}

/** The run's checkpoints still on disk, by env steps, with their evaluations; `final` is the run's final evaluation (readFinalEval), already checked to be of its latest checkpoint. */
export function keptCheckpoints(
  runDir: string,
  final: FinalEval | null,
  logged?: { evals: readonly EvalLine[]; settings: RunEvalSettings },
): { checkpoints: KeptCheckpoint[]; notes: string[] } {
  const root = checkpointsDir(runDir);
  const notes: string[] = [];
  if (!existsSync(root)) return { checkpoints: [], notes };
  const checkpoints: KeptCheckpoint[] = [];
  for (const name of readdirSync(root)
    .filter((n) => /^iter-\d+$/.test(n))
    .sort()) {
    const dir = join(root, name);
    let envSteps: number;
    let iteration: number;
    try {
      ({ envSteps, iteration } = loadTrainerState(dir));
    } catch (e) {
      notes.push(`${(e as Error).message}; that checkpoint was skipped`);
      continue;
    }
    const evaluated = readCheckpointEval(runDir, name, envSteps);
    if (evaluated.note) notes.push(evaluated.note);
    checkpoints.push({
      name,
      dir,
      envSteps,
      evaluated: evaluated.record,
      final: final?.checkpoint === name ? final : null,
      logged: logged ? loggedEval(logged.evals, name, iteration, envSteps, logged.settings) : null,
    });
  }
  checkpoints.sort((a, b) => a.envSteps - b.envSteps);
  return { checkpoints, notes };
}

/** The checkpoint saved exactly at `steps`, or the last one before and the first one after; null when the kept ones do not surround it. */
export function bracketingCheckpoints<T extends { envSteps: number }>(sorted: T[], steps: number): T[] | null {
  const exact = sorted.filter((c) => c.envSteps === steps);
  if (exact.length > 0) return [exact.at(-1)!];
  const before = sorted.filter((c) => c.envSteps < steps).at(-1);
  const after = sorted.find((c) => c.envSteps > steps);
  return before && after ? [before, after] : null;
}

export interface EvalSetting {
  split: string;
  variations: number;
}

export function evalOf(c: KeptCheckpoint, setting: EvalSetting): FinalEval | undefined {
  return (
    [c.evaluated, c.final, c.logged].find(
      (e) => e !== null && e.eval_split === setting.split && e.eval_variations === setting.variations,
    ) ?? undefined
  );
}

/**
 * Score at `steps` from the evaluated checkpoints around it, linear in env steps between the two;
 * otherwise the reason there is none (for the notes under the report).
 */
export function checkpointScoreAt(
  checkpoints: KeptCheckpoint[],
  steps: number,
  setting: EvalSetting,
): { score: number } | { missing: string } {
  const around = bracketingCheckpoints(checkpoints, steps);
  if (!around) {
    const kept = checkpoints.map((c) => `${c.name} at ${c.envSteps}`).join(', ') || 'none';
    return { missing: `no kept checkpoint at or on both sides of ${steps} env steps (kept: ${kept}; train.keep_checkpoints keeps more)` };
  }
  const scores = around.map((c) => evalOf(c, setting)?.mean_score);
  const unevaluated = around.filter((_, i) => scores[i] === undefined);
  if (unevaluated.length > 0) {
    return {
      missing: `${unevaluated.map((c) => c.name).join(' and ')} not evaluated on ${setting.variations} ${setting.split} variations per task`,
    };
  }
  return {
    score: interpolateAt(
      around.map((c, i) => ({ x: c.envSteps, y: scores[i]! })),
      steps,
    )!,
  };
}

/**
 * Per task, the score at `steps` interpolated as checkpointScoreAt does, for the tasks both
 * bracketing evaluations report; empty where checkpointScoreAt has no score.
 */
export function checkpointTaskScoresAt(
  checkpoints: KeptCheckpoint[],
  steps: number,
  setting: EvalSetting,
): { task: string; score: number }[] {
  const around = bracketingCheckpoints(checkpoints, steps);
  const evals = around?.map((c) => evalOf(c, setting));
  if (!around || !evals || evals.some((e) => e === undefined)) return [];
  return evals[0]!.per_task.flatMap(({ task }) => {
    const scores = evals.map((e) => e!.per_task.find((t) => t.task === task)?.mean_score);
    if (scores.some((s) => s === undefined)) return [];
    return [
      {
        task,
        score: interpolateAt(
          around.map((c, i) => ({ x: c.envSteps, y: scores[i]! })),
          steps,
        )!,
      },
    ];
  });
}
