/**
 * What each kind of source holds, read from its files on every request (they change while a run
 * goes on): a run's config, metrics and status; the trajectory files of any source; a compare
 * output's report. Every reader names the file, and the line where there is one, of what it
 * cannot read.
 */
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { basename, join } from 'node:path';
import { readConfigFile } from '../config/load.ts';
import { readRunMetrics, type RunMetrics } from '../compare/metrics.ts';
import { TrajectoryFile } from '../trajectory/reader.ts';
import type { Source } from './sources.ts';

/** A file read for the page could not be used; the message names it. Sent as 422. */
export class DataError extends Error {}

export interface RunSummary {
  config: Record<string, unknown> | null;
  /** Why the config or metrics.jsonl could not be read (missing, not YAML, a damaged line). */
  problem: string | null;
  iterations_done: number;
  iterations_planned: number | null;
  env_steps: number;
  last_eval: { iteration: number; train_env_steps: number; mean_score: number; success_rate: number } | null;
  /** finished: its final evaluation is written; running: metrics written in the last 10 minutes; else stopped. */
  state: 'finished' | 'running' | 'stopped' | 'not started';
  updated: string | null;
}

const RUNNING_WITHIN_MS = 10 * 60_000;

/** A run's config.yaml as written, not validated (an older run may predate options the schema has now). */
export function readConfig(dir: string): { config: Record<string, unknown> | null; problem: string | null } {
  const file = join(dir, 'config.yaml');
  if (!existsSync(file)) return { config: null, problem: `${file} does not exist` };
  try {
    return { config: readConfigFile(file).raw, problem: null };
  } catch (e) {
    return { config: null, problem: (e as Error).message };
  }
}

/**
 * A run's metrics.jsonl (null when it has none yet). A damaged line is skipped with a warning naming
 * file:line, as in trajectory files: one bad line must not hide the run's curves. A file that cannot
 * be read is a DataError.
 */
export function readMetrics(dir: string): RunMetrics | null {
  try {
    return readRunMetrics(dir, { damaged: 'skip' });
  } catch (e) {
    throw new DataError((e as Error).message);
  }
}

export function summariseRun(dir: string): RunSummary {
  const { config, problem } = readConfig(dir);
  let metrics: RunMetrics | null = null;
  let metricsProblem: string | null = null;
  try {
    metrics = readMetrics(dir);
  } catch (e) {
    metricsProblem = (e as Error).message;
  }
  const lastTrain = metrics?.train.at(-1);
  const lastEval = metrics?.evals.at(-1);
  const planned =
    typeof (config?.train as { iterations?: unknown } | undefined)?.iterations === 'number'
      ? (config!.train as { iterations: number }).iterations
      : null;
  const metricsFile = join(dir, 'metrics.jsonl');
  const updatedMs = existsSync(metricsFile) ? statSync(metricsFile).mtimeMs : null;
  const done = lastTrain?.iteration ?? 0;
  const finished = existsSync(join(dir, 'eval.md')) && planned !== null && done >= planned;
  const state: RunSummary['state'] = finished
    ? 'finished'
    : updatedMs === null
      ? 'not started'
      : Date.now() - updatedMs < RUNNING_WITHIN_MS
        ? 'running'
        : 'stopped';
  return {
    config,
    problem: problem ?? metricsProblem,
    iterations_done: done,
    iterations_planned: planned,
    env_steps: typeof lastTrain?.env_steps === 'number' ? lastTrain.env_steps : 0,
    last_eval: lastEval
      ? {
          iteration: lastEval.iteration,
          train_env_steps: lastEval.train_env_steps,
          mean_score: lastEval.mean_score,
          success_rate: lastEval.success_rate,
        }
      : null,
    state,
    updated: updatedMs === null ? null : new Date(updatedMs).toISOString(),
  };
}

/** The trajectory files of a source, in a fixed order: train, eval, then the rest by name. */
export function trajectoryPaths(source: Source): string[] {
  if (source.kind === 'records' && source.path.endsWith('.jsonl')) return [source.path];
  const out: string[] = [];
  const single = join(source.path, 'trajectories.jsonl');
  if (existsSync(single)) out.push(single);
  const folder = join(source.path, 'trajectories');
  if (existsSync(folder) && statSync(folder).isDirectory()) {
    const rank = (n: string) => (n === 'train.jsonl' ? 0 : n === 'eval.jsonl' ? 1 : 2);
    const names = readdirSync(folder)
      .filter((n) => n.endsWith('.jsonl'))
      .sort((a, b) => rank(a) - rank(b) || a.localeCompare(b));
    out.push(...names.map((n) => join(folder, n)));
  }
  return out;
}

/** Readers of trajectory files, kept between requests so each reads only what was appended. */
export class TrajectoryFiles {
  private readonly files = new Map<string, TrajectoryFile>();

  /** The source's files, each brought up to date. */
  of(source: Source): TrajectoryFile[] {
    const out: TrajectoryFile[] = [];
    for (const path of trajectoryPaths(source)) {
      let file = this.files.get(path);
      if (!file) this.files.set(path, (file = new TrajectoryFile(path)));
      try {
        file.refresh();
      } catch (e) {
        // Removed between listing and reading (a resume renames its file into place): gone from this answer.
        if ((e as NodeJS.ErrnoException).code === 'ENOENT') continue;
        throw e;
      }
      out.push(file);
    }
    return out;
  }
}

export interface CompareReport {
  results_md: string | null;
  results_csv: string[][] | null;
  curves_csv: string[][] | null;
  runs_csv: string[][] | null;
  manifest: unknown;
  plot: boolean;
  files: string[];
}

export function readCompare(dir: string): CompareReport {
  const text = (name: string) => (existsSync(join(dir, name)) ? readFileSync(join(dir, name), 'utf8') : null);
  const csv = (name: string) => {
    const t = text(name);
    return t === null ? null : parseCsv(t, join(dir, name));
  };
  let manifest: unknown = null;
  const raw = text('compare.json');
  if (raw !== null) {
    try {
      manifest = JSON.parse(raw);
    } catch (e) {
      throw new DataError(`${join(dir, 'compare.json')} is not valid JSON (${(e as Error).message})`);
    }
  }
  const files = readdirSync(dir)
    .filter((n) => /\.(md|csv|json|png|svg)$/.test(n))
    .sort();
  return {
    results_md: text('results.md'),
    results_csv: csv('results.csv'),
    curves_csv: csv('curves.csv'),
    runs_csv: csv('runs.csv'),
    manifest,
    plot: existsSync(join(dir, 'learning_curve.svg')),
    files,
  };
}

/** RFC 4180 CSV (quoted fields, doubled quotes, newlines inside quotes), as compare writes it. */
export function parseCsv(text: string, where: string): string[][] {
  const rows: string[][] = [];
  let row: string[] = [];
  let field = '';
  let quoted = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (quoted) {
      if (c === '"' && text[i + 1] === '"') {
        field += '"';
        i++;
      } else if (c === '"') quoted = false;
      else field += c;
    } else if (c === '"' && field === '') quoted = true;
    else if (c === ',') {
      row.push(field);
      field = '';
    } else if (c === '\n' || c === '\r') {
      if (c === '\r' && text[i + 1] === '\n') i++;
      row.push(field);
      rows.push(row);
      row = [];
      field = '';
    } else field += c;
  }
  if (quoted) throw new DataError(`${where}: a quoted field is not closed`);
  if (field !== '' || row.length > 0) {
    row.push(field);
    rows.push(row);
  }
  return rows;
}

/** An adapt output's report (adapt.json), for the memory settings its trials used. */
export function readAdaptReport(dir: string): {
  method: string;
  task: string;
  memory: Record<string, unknown> | null;
  experimental: Record<string, unknown> | null;
} {
  const file = join(dir, 'adapt.json');
  let report: { method?: unknown; task?: unknown; memory?: unknown; experimental?: unknown };
  try {
    report = JSON.parse(readFileSync(file, 'utf8'));
  } catch (e) {
    throw new DataError(`${file} is not valid JSON (${(e as Error).message})`);
  }
  const section = (value: unknown) => (typeof value === 'object' && value !== null ? (value as Record<string, unknown>) : null);
  return {
    method: String(report.method ?? 'tips'),
    task: String(report.task ?? basename(dir)),
    memory: section(report.memory),
    experimental: section(report.experimental),
  };
}
