/**
 * The trainer state saved in every checkpoint (`trainer_state.json`). Kept apart from
 * ./checkpoint.ts, which loads TensorFlow.js, so `eval --json` can record a checkpoint's env steps
 * without loading it for `eval --remote`.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

export interface TrainerState {
  iteration: number;
  envSteps: number;
  rngState: number;
  elapsedSeconds: number;
}

/** The trainer's counters and generator state saved with a checkpoint (whatever engine wrote the policy). */
export function loadTrainerState(dir: string): TrainerState {
  const statePath = join(dir, 'trainer_state.json');
  if (!existsSync(statePath)) throw new Error(`checkpoint ${dir} is incomplete: ${statePath} is missing`);
  let state: TrainerState;
  try {
    state = JSON.parse(readFileSync(statePath, 'utf8')) as TrainerState;
  } catch (e) {
    throw new Error(`checkpoint ${dir}: trainer_state.json is corrupt (${(e as Error).message})`);
  }
  if (typeof state.iteration !== 'number') throw new Error(`checkpoint ${dir}: trainer_state.json has no iteration`);
  return state;
}
