/**
 * Run checkpoints. Each is a directory `checkpoints/iter-NNNNNN/` with the policy in the Hugging
 * Face layout, the optimiser moments and the trainer state. It is written under a temporary name
 * and renamed only when complete, and `checkpoints/latest` is switched after that, so an
 * interruption at any moment leaves the previous checkpoint usable.
 */
import { copyFileSync, existsSync, mkdirSync, readFileSync, readdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { writeJsonAtomic } from '../util/atomic-write.ts';
import type { TrainerState } from './trainer-state.ts';

export { loadTrainerState, type TrainerState } from './trainer-state.ts';

/** The tip memory's file in a checkpoint (and in an iteration saved part-way), where the run keeps one. */
export const MEMORY_FILE = 'memory.json';

/** What writes the policy (and its optimiser state) into a checkpoint folder: the engine's (../policy TrainingEngine). */
export interface PolicyWriter {
  writePolicy(dir: string): Promise<void>;
}

export function checkpointsDir(runDir: string): string {
  return join(runDir, 'checkpoints');
}

/** What a model directory holds besides weights and tokenizer.json: its chat template and generation settings. */
const MODEL_SIDE_FILES = [
  'tokenizer_config.json',
  'special_tokens_map.json',
  'chat_template.jinja',
  'chat_template.json',
  'generation_config.json',
];

/** What a checkpoint folder holds besides the policy's own files. */
export interface CheckpointContents {
  writer: PolicyWriter;
  state: TrainerState;
  /** More files (name → contents) saved inside the checkpoint, e.g. the tip memory. */
  extraFiles?: Record<string, string>;
  /**
   * The model trained from; its chat template and other side files are copied where the policy writer
   * did not write them, so a checkpoint is a complete model directory on its own.
   */
  baseModelDir?: string | null;
}

/** Saves the checkpoint of `contents.state.iteration`, points `latest.json` at it and keeps the last `keep`. */
export async function saveCheckpoint(runDir: string, contents: CheckpointContents, keep: number): Promise<string> {
  const { state } = contents;
  const name = `iter-${String(state.iteration).padStart(6, '0')}`;
  const final = await writeCheckpointDir(runDir, name, contents);
  const root = checkpointsDir(runDir);
  writeJsonAtomic(join(root, 'latest.json'), { checkpoint: name });
  pruneCheckpoints(root, keep, name);
  // Iterations saved part-way up to this one are superseded by it.
  for (const n of readdirSync(root))
    if (PARTIAL.test(n) && Number(n.slice('partial-iter-'.length)) <= state.iteration)
      rmSync(join(root, n), { recursive: true, force: true });
  return final;
}

/** A checkpoint folder `checkpoints/<name>`, written under a temporary name and renamed when complete. */
export async function writeCheckpointDir(runDir: string, name: string, contents: CheckpointContents): Promise<string> {
  const { writer, state, extraFiles = {}, baseModelDir = null } = contents;
  const root = checkpointsDir(runDir);
  mkdirSync(root, { recursive: true });
  const tmp = join(root, `${name}.tmp-${process.pid}`);
  rmSync(tmp, { recursive: true, force: true });
  await writer.writePolicy(tmp);
  if (baseModelDir)
    for (const f of MODEL_SIDE_FILES)
      if (existsSync(join(baseModelDir, f)) && !existsSync(join(tmp, f))) copyFileSync(join(baseModelDir, f), join(tmp, f));
  writeJsonAtomic(join(tmp, 'trainer_state.json'), state);
  for (const [file, contents] of Object.entries(extraFiles)) writeFileSync(join(tmp, file), contents);
  const final = join(root, name);
  rmSync(final, { recursive: true, force: true });
  renameSync(tmp, final);
  return final;
}

/** Folders of an iteration saved part-way (./partial.ts): `partial-iter-NNNNNN`. */
export const PARTIAL = /^partial-iter-\d+$/;

const TEMPORARY = /^.+\.tmp-(\d+)$/;

/** Where the trainer writes under a temporary name: the run folder and its checkpoints folder. */
const temporaryHomes = (runDir: string) => [runDir, checkpointsDir(runDir)].filter((d) => existsSync(d));

/**
 * What a process killed in the middle of a write left behind: temporary checkpoint folders
 * (`iter-N.tmp-PID`, tens of GB for a large model) and other `NAME.tmp-PID` files and folders of the
 * run. Those of a process that still runs (other than this one) are not stale: it may be writing them.
 */
export function staleTemporaryFiles(runDir: string): string[] {
  return temporaryHomes(runDir).flatMap((dir) =>
    readdirSync(dir)
      .filter((n) => {
        const pid = TEMPORARY.exec(n)?.[1];
        return pid !== undefined && (Number(pid) === process.pid || !processRuns(Number(pid)));
      })
      .map((n) => join(dir, n)),
  );
}

/** Removes what staleTemporaryFiles finds and returns it; complete checkpoints are never touched. */
export function removeStaleTemporaryFiles(runDir: string): string[] {
  const stale = staleTemporaryFiles(runDir);
  for (const path of stale) rmSync(path, { recursive: true, force: true });
  return stale;
}

/** This process's own half-written files, for an exit in the middle of a write. */
export function removeOwnTemporaryFiles(runDir: string): void {
  for (const dir of temporaryHomes(runDir)) {
    for (const n of readdirSync(dir))
      if (TEMPORARY.exec(n)?.[1] === String(process.pid)) rmSync(join(dir, n), { recursive: true, force: true });
  }
}

function processRuns(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM'; // it exists, but belongs to someone else
  }
}

function pruneCheckpoints(root: string, keep: number, latest: string): void {
  const all = readdirSync(root)
    .filter((n) => /^iter-\d+$/.test(n))
    .sort();
  for (const n of all.slice(0, Math.max(0, all.length - keep))) if (n !== latest) rmSync(join(root, n), { recursive: true, force: true });
}

export function latestCheckpoint(runDir: string): string | null {
  const pointer = join(checkpointsDir(runDir), 'latest.json');
  if (!existsSync(pointer)) return null;
  let name: string;
  try {
    name = (JSON.parse(readFileSync(pointer, 'utf8')) as { checkpoint: string }).checkpoint;
  } catch (e) {
    throw new Error(`${pointer} is corrupt (${(e as Error).message}); point it at a checkpoint directory by hand or start a new run`);
  }
  const dir = join(checkpointsDir(runDir), name);
  if (!existsSync(dir)) throw new Error(`${pointer} names ${name}, which does not exist`);
  return dir;
}
