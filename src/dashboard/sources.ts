/**
 * What the dashboard shows: the folders named on its command line, each recognised by the files the
 * project writes there (a training run, a `compare` output, an `adapt` output, or bare trajectory
 * records), or searched a few levels down when it is none of them (e.g. `runs/`). Every source gets
 * an id derived from its path, so the page's links stay valid when the list is read again.
 */
import { createHash } from 'node:crypto';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { isAbsolute, join, relative, resolve } from 'node:path';
import { ConfigError } from '../config/load.ts';

export type SourceKind = 'run' | 'compare' | 'adapt' | 'records';

export interface Source {
  id: string;
  kind: SourceKind;
  /** Absolute path: a folder, or for `records` given as a file, that file. */
  path: string;
  /** The path as the user would type it (relative to the working folder when inside it). */
  label: string;
  /** For a run inside a compare output: that output's id. */
  compare?: string;
}

/** A command-line folder or option the dashboard cannot use; the message names it and says why. */
export class SourceError extends ConfigError {}

/** Folders never searched for sources: a run's internals, and what is not the project's output. */
const NOT_SEARCHED = new Set([
  'checkpoints',
  'trajectories',
  'initial-model',
  'rollout-policy',
  'node_modules',
  '.git',
  'checkpoint-evals',
]);
/** How deep below a named folder sources are looked for. */
const SEARCH_DEPTH = 4;

/** The kind of output a folder holds, from the files the project writes into it; null for none. */
export function kindOf(dir: string): Exclude<SourceKind, 'records'> | 'records' | null {
  const has = (name: string) => existsSync(join(dir, name));
  if (has('compare.json') || (has('results.md') && has('curves.csv'))) return 'compare';
  if (has('metrics.jsonl') || (has('config.yaml') && (has('checkpoints') || has('trajectories')))) return 'run';
  if (has('adapt.json')) return 'adapt';
  if (has('trajectories') || has('trajectories.jsonl')) return 'records';
  return null;
}

export function sourceId(path: string): string {
  return createHash('sha256').update(path).digest('hex').slice(0, 12);
}

function labelOf(path: string, cwd: string): string {
  const rel = relative(cwd, path);
  return rel === '' ? '.' : rel.startsWith('..') || isAbsolute(rel) ? path : rel;
}

/**
 * The sources under the command-line `paths` (the working folder's `runs/` when none are given).
 * Throws a SourceError naming a path that does not exist or holds nothing the dashboard can show.
 */
export function discoverSources(paths: readonly string[], cwd = process.cwd()): Source[] {
  const given = paths.length > 0 ? paths : [defaultFolder(cwd)];
  const found = new Map<string, Source>();
  const add = (kind: SourceKind, path: string, compare?: string) => {
    if (!found.has(path)) found.set(path, { id: sourceId(path), kind, path, label: labelOf(path, cwd), ...(compare ? { compare } : {}) });
  };
  for (const arg of given) {
    const path = resolve(cwd, arg);
    if (!existsSync(path)) throw new SourceError(`${arg} does not exist`);
    const before = found.size;
    if (statSync(path).isFile()) {
      if (!path.endsWith('.jsonl'))
        throw new SourceError(
          `${arg} is a file but not trajectory records (.jsonl); give a run, compare or adapt folder, or a trajectory .jsonl file`,
        );
      add('records', path);
    } else {
      visit(path, 0, add, undefined);
    }
    if (found.size === before && ![...found.values()].some((s) => s.path === path)) {
      throw new SourceError(
        `${arg}: no training run (metrics.jsonl, config.yaml), compare output (compare.json, or results.md with curves.csv), adapt output (adapt.json) or trajectory records in it or up to ${SEARCH_DEPTH} folders below it`,
      );
    }
  }
  return [...found.values()];
}

function defaultFolder(cwd: string): string {
  const runs = join(cwd, 'runs');
  if (!existsSync(runs))
    throw new SourceError(
      `no folder given and ${runs} does not exist: name the run, compare or adapt folders to show (empo2 dashboard DIR ...)`,
    );
  return runs;
}

function visit(
  dir: string,
  depth: number,
  add: (kind: SourceKind, path: string, compare?: string) => void,
  compare: string | undefined,
): void {
  const kind = kindOf(dir);
  if (kind === 'run') {
    add('run', dir, compare);
    // Adaptations of a run's checkpoints go to <checkpoint>/adapt-<task> by default.
    for (const checkpoint of subfolders(join(dir, 'checkpoints'))) {
      for (const out of subfolders(checkpoint)) if (kindOf(out) === 'adapt') add('adapt', out);
    }
    return;
  }
  if (kind === 'adapt' || kind === 'records') {
    add(kind, dir, compare);
    return;
  }
  if (kind === 'compare') {
    add('compare', dir);
    compare = sourceId(dir);
  }
  if (depth >= SEARCH_DEPTH) return;
  for (const sub of subfolders(dir)) visit(sub, depth + 1, add, compare);
}

function subfolders(dir: string): string[] {
  if (!existsSync(dir)) return [];
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch {
    // An unreadable folder holds nothing the dashboard can show; the ones it can read still count.
    return [];
  }
  return names
    .filter((n) => !n.startsWith('.') && !NOT_SEARCHED.has(n))
    .sort()
    .map((n) => join(dir, n))
    .filter((p) => {
      try {
        return statSync(p).isDirectory();
      } catch {
        return false;
      }
    });
}
