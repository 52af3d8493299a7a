/**
 * An iteration saved part-way, so that `--resume` goes on inside it instead of starting it again. An
 * iteration of a real model on a CPU can outlast the machine it runs on (an EMPO² iteration with tips
 * on-policy trains every step's full prompt on its own: hours at one thread), and starting it again from
 * the last checkpoint would never end.
 *
 * `checkpoints/partial-iter-K/` is a checkpoint of the state before iteration K (policy, optimiser,
 * trainer state, memory as of the save) plus `batch.json`: iteration K's rollouts, their modes and
 * intrinsic rewards, the prepared update (../trainer/update.ts) and, once optimiser steps have run, where the
 * update stands. It is written after the rollouts and after each optimiser step, once the iteration has
 * run longer than `train.partial_save_minutes`, replacing the previous one; the iteration's checkpoint,
 * or any later one, supersedes it (./checkpoint.ts). While an optimiser step runs, the PyTorch worker
 * saves it into the folder as `train-step.pt` every `train.partial_save_minutes`; the next save of the
 * folder (after that step) replaces it.
 */
import { existsSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { checkpointsDir, loadTrainerState, PARTIAL, writeCheckpointDir, type CheckpointContents } from './checkpoint.ts';

export const BATCH_FILE = 'batch.json';
/** The optimiser step under way, saved between its micro-batches by engines whose steps are long (workers/torch/step_resume.py). */
export const STEP_FILE = 'train-step.pt';

/**
 * What the run reads of an iteration's batch saved part-way; the trainer's batch (../trainer/trainer.ts
 * IterationBatch: rollouts, modes, intrinsic rewards, the prepared update) carries the rest.
 */
export interface PartialHeader {
  format: 'empo2-partial-iteration';
  version: 1;
  iteration: number;
  /** Where the update stands; null before its first optimiser step. */
  progress: { optimizerSteps: number } | null;
}

export const partialName = (iteration: number): string => `partial-iter-${String(iteration).padStart(6, '0')}`;

/** Writes iteration `batch.iteration` part-way (the state and memory in `contents` are those before it); removes older ones. */
export async function savePartial(runDir: string, contents: CheckpointContents, batch: PartialHeader): Promise<string> {
  const { state } = contents;
  if (state.iteration !== batch.iteration - 1)
    throw new Error(`savePartial: iteration ${batch.iteration} saved over the state of iteration ${state.iteration}`);
  const extraFiles = { [BATCH_FILE]: JSON.stringify(batch), ...contents.extraFiles };
  const name = partialName(batch.iteration);
  const dir = await writeCheckpointDir(runDir, name, { ...contents, extraFiles });
  const root = checkpointsDir(runDir);
  for (const n of readdirSync(root)) if (PARTIAL.test(n) && n !== name) rmSync(join(root, n), { recursive: true, force: true });
  return dir;
}

/**
 * The partial iteration to resume, if one continues from the latest checkpoint: the newest
 * `partial-iter-K` with K after that checkpoint's iteration. Its folder stands in for the checkpoint
 * (policy, optimiser, memory, trainer state); a corrupt one is an error, not silently skipped.
 */
export function partialToResume<B extends PartialHeader = PartialHeader>(
  runDir: string,
  checkpointIteration: number,
): { dir: string; batch: B } | null {
  const root = checkpointsDir(runDir);
  if (!existsSync(root)) return null;
  const names = readdirSync(root)
    .filter((n) => PARTIAL.test(n) && Number(n.slice('partial-iter-'.length)) > checkpointIteration)
    .sort();
  if (names.length === 0) return null;
  const dir = join(root, names[names.length - 1]);
  const state = loadTrainerState(dir);
  const path = join(dir, BATCH_FILE);
  if (!existsSync(path))
    throw new Error(`${dir} is incomplete: ${BATCH_FILE} is missing (remove the folder to resume from the checkpoint instead)`);
  let batch: B;
  try {
    batch = JSON.parse(readFileSync(path, 'utf8')) as B;
  } catch (e) {
    throw new Error(`${path} is corrupt (${(e as Error).message}); remove ${dir} to resume from the checkpoint instead`);
  }
  if (batch.format !== 'empo2-partial-iteration' || batch.version !== 1)
    throw new Error(`${path}: not a partial iteration of this version (format ${String(batch.format)}, version ${String(batch.version)})`);
  if (batch.iteration !== state.iteration + 1)
    throw new Error(`${path}: iteration ${batch.iteration} saved over the state of iteration ${state.iteration}`);
  return { dir, batch };
}
