/**
 * Where a run may write: a run writes config.yaml, metrics.jsonl, run.lock, checkpoints/ and
 * trajectories/ into its folder, so `run_dir` must name a folder that does not exist yet, an empty
 * one, or one an earlier run wrote (to resume it, or to be told it already holds a run). Any other
 * folder (`--run-dir /etc`, a home folder, a project's tree) is refused by name before anything is
 * written into it.
 */
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { parse as parseYaml } from 'yaml';
import { ConfigError } from '../config/load.ts';
import { LOCK_FILE } from './run-lock.ts';

/** What a run writes before anything else, so that even a run stopped at its start is recognised. */
const RUN_ENTRIES = new Set([LOCK_FILE, 'metrics.jsonl', 'metrics.jsonl.abandoned', 'initial-model']);
/** The PyTorch worker's first model, killed while it was being written (renamed to initial-model when complete). */
const PARTIAL_INITIAL_MODEL = /^initial-model\.tmp-\d+$/;
const SHOWN_ENTRIES = 8;
/** What `empo2 compare` writes into a run's folder before it starts the run there (compare/runner.ts RUN_RECORD, and the child's log). */
const COMPARE_ENTRIES = new Set(['compare-run.json', 'train.log']);

/** Throws a ConfigError naming `runDir` unless a run may write there. */
export function checkRunFolder(runDir: string): void {
  if (!existsSync(runDir)) return;
  if (!statSync(runDir).isDirectory()) throw new ConfigError(`run_dir ${runDir} is a file, not a folder`);
  const entries = readdirSync(runDir).sort();
  if (entries.length === 0 || isRun(runDir, entries)) return;
  const shown = entries.slice(0, SHOWN_ENTRIES).join(', ') + (entries.length > SHOWN_ENTRIES ? ', ...' : '');
  throw new ConfigError(
    `run_dir ${runDir} holds ${entries.length} ${entries.length === 1 ? 'entry' : 'entries'} (${shown}) and no empo2 run: ` +
      `a run writes config.yaml, metrics.jsonl, run.lock, checkpoints/ and trajectories/ into its folder, ` +
      `so give a new or empty folder, or an earlier run's`,
  );
}

function isRun(runDir: string, entries: readonly string[]): boolean {
  if (entries.some((e) => RUN_ENTRIES.has(e) || PARTIAL_INITIAL_MODEL.test(e))) return true;
  if (entries.every((e) => COMPARE_ENTRIES.has(e))) return true;
  return entries.includes('config.yaml') && isRunConfig(`${runDir}/config.yaml`);
}

/** A run's config.yaml is its whole config, run_dir included; another program's config.yaml is not one. */
function isRunConfig(path: string): boolean {
  try {
    const value: unknown = parseYaml(readFileSync(path, 'utf8'));
    return typeof value === 'object' && value !== null && 'run_dir' in value;
  } catch {
    return false;
  }
}
