/**
 * `empo2 compare`: train every (config, seed) pair into `<out>/<label>/seed<k>` as its own child
 * process (`node bin/empo2.js train ...`, so one crash or out-of-memory kill leaves the others
 * running), a few at a time, then aggregate whatever finished into the results table and plot.
 * Runs that already finished are skipped, so re-running the same command after a failure only
 * does the missing work; runs that stopped midway continue from their checkpoint with --resume, and
 * so do finished runs when train.iterations is raised (training them longer).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createWriteStream, existsSync, mkdirSync, readdirSync, readFileSync, renameSync, statSync, writeFileSync } from 'node:fs';
import { basename, extname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { z } from 'zod';
import { ConfigError, loadConfig } from '../config/load.ts';
import { inertInBoth, type Config } from '../config/schema.ts';
import { writeJsonAtomic } from '../util/atomic-write.ts';
import { latestCheckpoint } from '../run/checkpoint.ts';
import { aggregate, type Comparison, type RunRecord, type RunStatus } from './aggregate.ts';
import {
  bracketingCheckpoints,
  CHECKPOINT_EVALS,
  checkpointEvalFile,
  evalOf,
  keptCheckpoints,
  readCheckpointEval,
  type KeptCheckpoint,
} from './checkpoint-evals.ts';
import { finalEvalFile, needsFinalEval, readFinalEval } from './final-eval.ts';
import { readRunMetrics } from './metrics.ts';
import { writeLearningCurvePlot } from './plot.ts';
import { formatCurvesCsv, formatMarkdown, formatResultsCsv, formatRunsCsv } from './report.ts';

const BIN = fileURLToPath(new URL('../../bin/empo2.js', import.meta.url));
export const MANIFEST = 'compare.json';
/** Per-run record of the child processes compare started for it (wall time, exit codes). */
export const RUN_RECORD = 'compare-run.json';
const LABEL = /^[A-Za-z0-9][A-Za-z0-9._+-]*$/;

export interface CompareOptions {
  configs: string[];
  /** One per config, or empty to name each config after its file. */
  labels: string[];
  seeds: number[];
  out: string;
  jobs: number;
  /** `key=value` overrides applied to every config. */
  set: string[];
  resume: boolean;
  atSteps?: number[];
  includeUnfinished?: boolean;
  /** After training, evaluate each finished run's last checkpoint on this many variations per task (`<run>/final-eval.json`). */
  finalEval?: number;
  /** After training, evaluate the checkpoints around each equal-steps point on this many variations per task (`<run>/checkpoint-evals/`). */
  equalStepsEval?: number;
  log?: (line: string) => void;
  /** Forward Ctrl-C to the runs so each saves a checkpoint (the CLI does; tests do not). */
  handleSignals?: boolean;
}

export interface ReportOptions {
  out: string;
  atSteps?: number[];
  includeUnfinished?: boolean;
  log?: (line: string) => void;
}

export interface CompareOutcome {
  comparison: Comparison;
  markdown: string;
  files: { markdown: string; csv: string; runsCsv: string; curvesCsv: string; svg: string | null; png: string | null };
  /** Runs started in this invocation that did not finish (crash, kill, interrupt). */
  failed: { label: string; seed: number; reason: string }[];
}

const ManifestSchema = z.object({
  configs: z.array(z.object({ label: z.string(), config: z.string(), set: z.array(z.string()), seeds: z.array(z.number().int().min(0)) })),
});
type Manifest = z.infer<typeof ManifestSchema>;

const RunRecordSchema = z.object({
  attempts: z.array(
    z.object({
      started_at: z.string(),
      seconds: z.number(),
      exit_code: z.number().nullable(),
      signal: z.string().nullable(),
      resumed: z.boolean(),
    }),
  ),
});
type RunAttempts = z.infer<typeof RunRecordSchema>;

/** `0,1,2`, `0-4` or a mix (`0-2,7`). */
export function parseSeeds(text: string): number[] {
  const seeds: number[] = [];
  for (const part of text.split(',').map((s) => s.trim())) {
    const range = /^(\d+)-(\d+)$/.exec(part);
    if (range) {
      const [a, b] = [Number(range[1]), Number(range[2])];
      if (b < a) throw new ConfigError(`--seeds: range "${part}" ends before it starts`);
      for (let s = a; s <= b; s++) seeds.push(s);
    } else if (/^\d+$/.test(part)) seeds.push(Number(part));
    else throw new ConfigError(`--seeds: "${part}" is not a non-negative integer or a range like 0-4 (in "${text}")`);
  }
  const dup = seeds.find((s, i) => seeds.indexOf(s) !== i);
  if (dup !== undefined) throw new ConfigError(`--seeds: seed ${dup} is listed twice (in "${text}")`);
  return seeds;
}

/** `1000,2500`: env-step points for the equal-steps columns. */
export function parseSteps(text: string): number[] {
  return text.split(',').map((part) => {
    const v = Number(part.trim());
    if (part.trim() === '' || !Number.isFinite(v) || v < 0)
      throw new ConfigError(`--at-steps: "${part}" is not a non-negative number (in "${text}")`);
    return v;
  });
}

export function runDirFor(out: string, label: string, seed: number): string {
  return join(out, label, `seed${seed}`);
}

interface PlannedRun {
  label: string;
  seed: number;
  configFile: string;
  overrides: string[];
  dir: string;
  cfg: Config;
}

function planRuns(opts: CompareOptions, out: string): { entries: Manifest['configs']; runs: PlannedRun[] } {
  if (opts.configs.length === 0) throw new ConfigError('compare: give at least one --config');
  if (opts.labels.length > 0 && opts.labels.length !== opts.configs.length) {
    throw new ConfigError(
      `compare: ${opts.labels.length} --label for ${opts.configs.length} --config; give one label per config, in the same order, or none`,
    );
  }
  if (opts.seeds.length === 0) throw new ConfigError('compare: --seeds lists no seed');
  if (!Number.isInteger(opts.jobs) || opts.jobs < 1) throw new ConfigError(`compare: --jobs must be a positive integer, got ${opts.jobs}`);
  for (const [flag, value] of [
    ['--final-eval', opts.finalEval],
    ['--equal-steps-eval', opts.equalStepsEval],
  ] as const) {
    if (value !== undefined && !(Number.isInteger(value) && value > 0))
      throw new ConfigError(`compare: ${flag} must be a positive integer (variations per task), got ${value}`);
  }
  for (const s of opts.set) {
    const key = s.slice(0, s.indexOf('=')).trim();
    if (key === 'seed' || key === 'run_dir')
      throw new ConfigError(`compare: --set ${s}: compare chooses ${key} itself (use --seeds and --out)`);
  }
  const labels = opts.configs.map((file, i) => opts.labels[i] ?? basename(file, extname(file)));
  labels.forEach((label, i) => {
    if (!LABEL.test(label) || label === '.' || label === '..') {
      throw new ConfigError(
        `compare: label "${label}" (for ${opts.configs[i]}) must start with a letter or digit and hold only letters, digits, . _ + - (it names a folder)`,
      );
    }
    const first = labels.indexOf(label);
    if (first !== i)
      throw new ConfigError(
        `compare: ${opts.configs[first]} and ${opts.configs[i]} would both be labelled "${label}"; name them with --label`,
      );
  });
  const entries = opts.configs.map((file, i) => ({ label: labels[i], config: resolve(file), set: [...opts.set], seeds: [...opts.seeds] }));
  const runs: PlannedRun[] = [];
  // Seed by seed, so that the configs of one seed (a pair of the paired comparison) run side by side
  // and finish together: a comparison stopped early still holds complete pairs.
  for (const seed of opts.seeds) {
    for (const e of entries) {
      const dir = runDirFor(out, e.label, seed);
      const overrides = [...e.set, `seed=${seed}`, `run_dir=${dir}`];
      // Loading every config before starting anything turns a typo into one error, not N failed runs.
      runs.push({ label: e.label, seed, configFile: e.config, overrides, dir, cfg: loadConfig(e.config, overrides) });
    }
  }
  return { entries, runs };
}

/** Dotted paths where two configs differ, ignoring run_dir (a moved output folder is the same run). */
export function configDifferences(a: unknown, b: unknown, prefix = '', ignore: ReadonlySet<string> = new Set()): string[] {
  if (prefix === 'run_dir' || ignore.has(prefix)) return [];
  const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
  if (isObject(a) && isObject(b)) {
    const keys = [...new Set([...Object.keys(a), ...Object.keys(b)])].sort();
    return keys.flatMap((k) => configDifferences(a[k], b[k], prefix ? `${prefix}.${k}` : k, ignore));
  }
  return JSON.stringify(a) === JSON.stringify(b) ? [] : [`${prefix}: ${JSON.stringify(b)} there, ${JSON.stringify(a)} now`];
}

interface RunState {
  status: RunStatus;
  lastEvalIteration: number | null;
  checkpoint: string | null;
}

function inspectRun(dir: string, targetIterations: number): RunState {
  const metrics = readRunMetrics(dir);
  const lastEvalIteration = metrics?.evals.at(-1)?.iteration ?? null;
  const checkpoint = existsSync(dir) ? latestCheckpoint(dir) : null;
  // The trainer's last act is the final evaluation, logged after the final checkpoint.
  if (lastEvalIteration !== null && lastEvalIteration >= targetIterations) return { status: 'finished', lastEvalIteration, checkpoint };
  return { status: checkpoint || metrics ? 'unfinished' : 'missing', lastEvalIteration, checkpoint };
}

function readAttempts(dir: string): RunAttempts {
  const file = join(dir, RUN_RECORD);
  if (!existsSync(file)) return { attempts: [] };
  try {
    return RunRecordSchema.parse(JSON.parse(readFileSync(file, 'utf8')));
  } catch (e) {
    throw new Error(`${file} is corrupt (${(e as Error).message.split('\n')[0]}); delete it to forget the recorded wall times`);
  }
}

/**
 * What the run took. Preferred: the trainer's own clock, which survives interruptions: its
 * `elapsed_seconds` (iterations and the evaluations between them; a resumed run carries the
 * checkpoint's count on, so work repeated after an interruption counts once) plus the evaluations
 * outside it (iteration 0's and the final one), when those were timed. Else compare's record of
 * the child processes it started, which misses an attempt killed together with compare. Else the
 * trainer's elapsed_seconds alone.
 */
function wallTime(dir: string, record: RunRecord['metrics']): Pick<RunRecord, 'wallSeconds' | 'wallSource'> {
  const lastTrain = record?.train.at(-1);
  const elapsed = typeof lastTrain?.elapsed_seconds === 'number' ? lastTrain.elapsed_seconds : null;
  const outside = (record?.evals ?? []).filter((e) => e.iteration === 0 || e.iteration >= (lastTrain?.iteration ?? 0));
  const timed = outside.every((e) => typeof e.seconds === 'number');
  if (record && outside.length > 0 && timed && (elapsed !== null || !lastTrain)) {
    return { wallSeconds: (elapsed ?? 0) + outside.reduce((a, e) => a + (e.seconds as number), 0), wallSource: 'trainer' };
  }
  const attempts = readAttempts(dir).attempts;
  if (attempts.length > 0) return { wallSeconds: attempts.reduce((a, t) => a + t.seconds, 0), wallSource: 'compare' };
  return elapsed !== null ? { wallSeconds: elapsed, wallSource: 'iterations' } : { wallSeconds: null, wallSource: null };
}

function readManifest(out: string): Manifest | null {
  const file = join(out, MANIFEST);
  if (!existsSync(file)) return null;
  try {
    return ManifestSchema.parse(JSON.parse(readFileSync(file, 'utf8')));
  } catch (e) {
    throw new Error(
      `${file} is not a compare manifest (${(e as Error).message.split('\n')[0]}); delete it to rebuild the report from the run folders`,
    );
  }
}

/**
 * Later invocations into the same --out add to the comparison: a config already there keeps its
 * earlier seeds when it is the same file with the same overrides, and is replaced otherwise.
 */
function mergeManifest(previous: Manifest | null, entries: Manifest['configs']): Manifest {
  const merged = [...(previous?.configs ?? [])];
  for (const e of entries) {
    const i = merged.findIndex((m) => m.label === e.label);
    if (i < 0) merged.push(e);
    else if (merged[i].config === e.config && JSON.stringify(merged[i].set) === JSON.stringify(e.set)) {
      merged[i] = { ...e, seeds: [...new Set([...merged[i].seeds, ...e.seeds])].sort((a, b) => a - b) };
    } else merged[i] = e;
  }
  return { configs: merged };
}

/** Label → seeds, from the run folders alone (for --report-only on runs compare did not start). */
function scanRuns(out: string): Manifest['configs'] {
  if (!existsSync(out)) throw new ConfigError(`compare --report-only: ${out} does not exist`);
  const entries: Manifest['configs'] = [];
  for (const label of readdirSync(out).sort()) {
    const labelDir = join(out, label);
    if (!statSync(labelDir).isDirectory()) continue;
    const seeds = readdirSync(labelDir)
      .map((n) => /^seed(\d+)$/.exec(n))
      .filter((m): m is RegExpExecArray => m !== null && existsSync(join(labelDir, m[0], 'metrics.jsonl')))
      .map((m) => Number(m[1]))
      .sort((a, b) => a - b);
    if (seeds.length > 0) entries.push({ label, config: '', set: [], seeds });
  }
  return entries;
}

/** What a run folder holds now, for the report. The target iteration count comes from the run's own config.yaml. */
function collectRun(out: string, label: string, seed: number, targetIterations?: number): RunRecord {
  const dir = runDirFor(out, label, seed);
  if (!existsSync(dir)) return { label, seed, dir, status: 'missing', metrics: null, wallSeconds: null, wallSource: null, note: 'not run' };
  const metrics = readRunMetrics(dir);
  const saved = join(dir, 'config.yaml');
  const cfg = existsSync(saved) ? loadConfig(saved) : null;
  const target = targetIterations ?? cfg?.train.iterations;
  let status: RunStatus;
  let note: string | undefined;
  if (!metrics && !latestCheckpoint(dir)) {
    status = 'missing';
    note = 'nothing recorded';
  } else if (target === undefined) {
    status = 'unfinished';
    note = 'no config.yaml, so whether it finished is unknown';
  } else {
    const state = inspectRun(dir, target);
    status = state.status;
    if (status === 'unfinished')
      note =
        state.lastEvalIteration === null
          ? 'stopped before its first evaluation'
          : `stopped after the evaluation at iteration ${state.lastEvalIteration} of ${target}`;
  }
  const last = readAttempts(dir).attempts.at(-1);
  if (status !== 'finished' && last && last.exit_code !== 0) {
    const how =
      last.exit_code === 130 ? 'was interrupted' : last.signal ? `was killed by ${last.signal}` : `failed with exit code ${last.exit_code}`;
    note = `${note}; its last attempt ${how}, see ${join(dir, 'train.log')}`;
  }
  const finalEval = readFinalEval(dir);
  const evalSettings = cfg && {
    split: cfg.env.eval_split,
    variations: cfg.env.eval_variations,
    temperature: cfg.rollout.eval_temperature,
    withMemory: cfg.train.eval_with_memory,
  };
  const kept = keptCheckpoints(
    dir,
    finalEval.record,
    metrics && evalSettings ? { evals: metrics.evals, settings: evalSettings } : undefined,
  );
  return {
    label,
    seed,
    dir,
    status,
    metrics,
    ...wallTime(dir, metrics),
    ...(note ? { note } : {}),
    finalEval: finalEval.record,
    ...(finalEval.note ? { finalEvalNote: finalEval.note } : {}),
    checkpoints: kept.checkpoints,
    ...(kept.notes.length > 0 ? { checkpointNotes: kept.notes } : {}),
  };
}

type ReportSettings = { atSteps?: number[]; includeUnfinished?: boolean; checkpointEvalVariations?: number };

function collectGroups(out: string, manifest: Manifest['configs'], targets?: Map<string, number>): { label: string; runs: RunRecord[] }[] {
  return manifest.map((e) => ({
    label: e.label,
    runs: e.seeds.map((seed) => collectRun(out, e.label, seed, targets?.get(runDirFor(out, e.label, seed)))),
  }));
}

async function writeReport(
  out: string,
  manifest: Manifest['configs'],
  opts: ReportSettings & { log: (l: string) => void },
  targets?: Map<string, number>,
): Promise<Omit<CompareOutcome, 'failed'>> {
  const comparison = aggregate(collectGroups(out, manifest, targets), opts);
  const files: CompareOutcome['files'] = {
    markdown: join(out, 'results.md'),
    csv: join(out, 'results.csv'),
    runsCsv: join(out, 'runs.csv'),
    curvesCsv: join(out, 'curves.csv'),
    svg: null,
    png: null,
  };
  if (comparison.configs.some((c) => c.curve.length > 0)) {
    const plot = await writeLearningCurvePlot(comparison, join(out, 'learning_curve'));
    files.svg = plot.svg;
    files.png = plot.png;
  } else comparison.notes.push('no run is counted yet, so there is no plot');
  const markdown = formatMarkdown(comparison, files.png ? 'learning_curve.png' : undefined);
  writeFileSync(files.markdown, markdown);
  writeFileSync(files.csv, formatResultsCsv(comparison));
  writeFileSync(files.runsCsv, formatRunsCsv(comparison));
  writeFileSync(files.curvesCsv, formatCurvesCsv(comparison));
  opts.log('\n' + markdown);
  opts.log(
    `wrote ${files.markdown}, ${files.csv}, ${files.runsCsv}, ${files.curvesCsv}` + (files.png ? `, ${files.svg}, ${files.png}` : ''),
  );
  return { comparison, markdown, files };
}

/** Re-aggregates the runs already in `out` (listed by its compare.json, or found by folder name). */
export async function reportCompare(opts: ReportOptions): Promise<CompareOutcome> {
  const out = resolve(opts.out);
  const entries = readManifest(out)?.configs ?? scanRuns(out);
  if (entries.length === 0) throw new ConfigError(`compare --report-only: ${out} holds no runs (expected <label>/seed<k>/metrics.jsonl)`);
  return { ...(await writeReport(out, entries, { ...opts, log: opts.log ?? console.log })), failed: [] };
}

export async function runCompare(opts: CompareOptions): Promise<CompareOutcome> {
  const log = opts.log ?? ((l: string) => console.log(l));
  const out = resolve(opts.out);
  const { entries, runs } = planRuns(opts, out);
  const wantsFinalEval = (run: PlannedRun) =>
    opts.finalEval !== undefined && needsFinalEval(run.dir, opts.finalEval, run.cfg.env.eval_split);
  // Decide every run's fate before starting any, so a conflict stops the command before hours of work.
  const { todo, blocked, conflicts } = triageRuns(runs, { resume: !!opts.resume, wantsFinalEval, log });
  if (conflicts.length > 0) throw new ConfigError(`compare: ${conflicts.join('\n')}\nremove those runs or choose another --out`);
  mkdirSync(out, { recursive: true });
  writeJsonAtomic(join(out, MANIFEST), mergeManifest(readManifest(out), entries));
  for (const b of blocked) log(`${b.run.label} seed ${b.run.seed}: ${b.reason}`);

  const pool = childPool(log, opts.handleSignals ?? false);
  const failed: CompareOutcome['failed'] = blocked.map((b) => ({ label: b.run.label, seed: b.run.seed, reason: b.reason }));
  let started = 0;
  const total = todo.length;
  const startNext = async (): Promise<void> => {
    while (!pool.stopping && todo.length > 0) {
      const { run, resume, action } = todo.shift()!;
      started++;
      const counter = `[${started}/${total}]`;
      let result = action === 'train' ? await trainOne(run, resume, opts.jobs, counter, log, pool.children) : null;
      // The same slot evaluates the run it just trained, so --jobs bounds evaluations too.
      if (!result && !pool.stopping && wantsFinalEval(run))
        result = await evaluateOne(run, opts.finalEval!, opts.jobs, counter, log, pool.children);
      if (result) failed.push({ label: run.label, seed: run.seed, reason: result });
    }
  };
  const manifest = readManifest(out)!;
  const targets = new Map(runs.map((r) => [r.dir, r.cfg.train.iterations]));
  const settings: ReportSettings = {
    atSteps: opts.atSteps,
    includeUnfinished: opts.includeUnfinished,
    checkpointEvalVariations: opts.equalStepsEval,
  };
  try {
    await Promise.all(Array.from({ length: Math.min(opts.jobs, Math.max(1, todo.length)) }, startNext));
    for (const { run } of todo) failed.push({ label: run.label, seed: run.seed, reason: 'not started (interrupted)' });
    if (opts.equalStepsEval !== undefined && !pool.stopping) {
      const cmp = aggregate(collectGroups(out, manifest.configs, targets), settings);
      await evaluateAtEqualSteps(cmp, { runs, variations: opts.equalStepsEval, jobs: opts.jobs, pool, failed, log });
    }
  } finally {
    pool.dispose();
  }
  const report = await writeReport(out, manifest.configs, { ...settings, log }, targets);
  if (failed.length > 0)
    log(`${failed.length} run(s) did not finish:\n` + failed.map((f) => `  ${f.label} seed ${f.seed}: ${f.reason}`).join('\n'));
  return { ...report, failed };
}

/** What to do with each planned run (train, resume, evaluate, skip), which cannot go on without --resume, and configs that changed under a run. */
function triageRuns(runs: PlannedRun[], o: { resume: boolean; wantsFinalEval: (run: PlannedRun) => boolean; log: (line: string) => void }) {
  const { log } = o;
  const conflicts: string[] = [];
  const todo: { run: PlannedRun; resume: boolean; action: 'train' | 'evaluate' }[] = [];
  const blocked: { run: PlannedRun; reason: string }[] = [];
  for (const run of runs) {
    const state = inspectRun(run.dir, run.cfg.train.iterations);
    const saved = join(run.dir, 'config.yaml');
    if (state.checkpoint && existsSync(saved)) {
      // A larger train.iterations extends a run (the learning rate is constant, so continuing a
      // finished run equals training longer from the start); fewer than it already ran cannot be undone.
      const made = loadConfig(saved);
      const diff = configDifferences(
        { ...run.cfg, train: { ...run.cfg.train, iterations: made.train.iterations } },
        made,
        '',
        inertInBoth(run.cfg, made),
      );
      if (state.lastEvalIteration !== null && state.lastEvalIteration > run.cfg.train.iterations) {
        diff.push(`train.iterations: it already ran ${state.lastEvalIteration}, ${run.cfg.train.iterations} now`);
      }
      if (diff.length > 0) conflicts.push(`${run.dir} was made with a different config:\n    ${diff.join('\n    ')}`);
    }
    if (state.status === 'finished') {
      if (o.wantsFinalEval(run)) {
        log(`${run.label} seed ${run.seed}: already finished; its final evaluation is still to do`);
        todo.push({ run, resume: false, action: 'evaluate' });
      } else log(`${run.label} seed ${run.seed}: already finished, skipped`);
    } else if (state.checkpoint) {
      if (o.resume) todo.push({ run, resume: true, action: 'train' });
      else blocked.push({ run, reason: `stopped at the checkpoint ${basename(state.checkpoint)}; add --resume to continue it` });
    } else todo.push({ run, resume: false, action: 'train' });
  }
  return { todo, blocked, conflicts };
}

/** The child processes compare runs, and whether a signal asked it to stop starting more. */
interface ChildPool {
  readonly children: Set<ChildProcess>;
  readonly stopping: boolean;
  dispose(): void;
}

/** With `handleSignals`, SIGINT and SIGTERM stop new runs and are passed on to the running ones as SIGINT. */
function childPool(log: (line: string) => void, handleSignals: boolean): ChildPool {
  let stopping = false;
  const children = new Set<ChildProcess>();
  const onSignal = (signal: NodeJS.Signals) => {
    if (!stopping)
      log(
        `${signal}: starting no more runs; asking the ${children.size} running to save a checkpoint and stop (${signal} again to stop them at once)`,
      );
    stopping = true;
    // The runs sit in their own process groups, so each gets exactly the signals forwarded here.
    // The trainer saves and stops on its first SIGINT and exits on its second; SIGTERM would kill it
    // without a checkpoint, so either signal is passed on as SIGINT.
    for (const c of children) c.kill('SIGINT');
  };
  if (handleSignals) {
    process.on('SIGINT', onSignal);
    process.on('SIGTERM', onSignal);
  }
  return {
    children,
    get stopping() {
      return stopping;
    },
    dispose: () => {
      if (!handleSignals) return;
      process.off('SIGINT', onSignal);
      process.off('SIGTERM', onSignal);
    },
  };
}

/** `--equal-steps-eval`: the kept checkpoints just before and after each equal-steps point, evaluated on `variations` per task. */
async function evaluateAtEqualSteps(
  cmp: Comparison,
  o: {
    runs: PlannedRun[];
    variations: number;
    jobs: number;
    pool: ChildPool;
    failed: CompareOutcome['failed'];
    log: (line: string) => void;
  },
): Promise<void> {
  // The equal-steps points depend on every run's last step count, so these wait until all training is done.
  const { variations, pool, failed, log } = o;
  const queue = checkpointsToEvaluate(
    cmp.configs.flatMap((c) => c.included),
    cmp.equalSteps,
    o.runs,
    variations,
  );
  if (queue.length > 0)
    log(
      `evaluating ${queue.length} checkpoint(s) around ${cmp.equalSteps.map((st) => `${Math.round(st)}`).join(', ')} env steps on ${variations} variations per task`,
    );
  const total = queue.length;
  let done = 0;
  const evaluateNext = async (): Promise<void> => {
    while (!pool.stopping && queue.length > 0) {
      const { run, checkpoint } = queue.shift()!;
      const why = await evaluateCheckpoint(run, checkpoint, variations, o.jobs, `[${++done}/${total}]`, log, pool.children);
      if (why) failed.push({ label: run.label, seed: run.seed, reason: why });
    }
  };
  await Promise.all(Array.from({ length: Math.min(o.jobs, Math.max(1, queue.length)) }, evaluateNext));
  for (const { run, checkpoint } of queue)
    failed.push({ label: run.label, seed: run.seed, reason: `evaluation of ${checkpoint.name} not started (interrupted)` });
}

/** Runs `node <args>` as a child in its own process group, appending its output to `logFile`; resolves when it exits. */
export async function runChild(
  args: string[],
  jobs: number,
  logFile: string,
  children: Set<ChildProcess>,
  what: string,
): Promise<{ code: number | null; signal: NodeJS.Signals | null; seconds: number; startedAt: Date; tail: string }> {
  // Several runs at once share the cores; OpenBLAS (and torch) would otherwise each start one thread per core.
  const env = { ...process.env, ...(jobs > 1 ? { OPENBLAS_NUM_THREADS: '1', OMP_NUM_THREADS: '1' } : {}) };
  const logStream = createWriteStream(logFile, { flags: 'a' });
  logStream.write(
    `\n# empo2 compare ${new Date().toISOString()}: node ${args.map((a) => (/\s/.test(a) ? JSON.stringify(a) : a)).join(' ')}\n`,
  );
  const startedAt = new Date();
  const t0 = performance.now();
  let tail = '';
  const { code, signal } = await new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((done, fail) => {
    const child = spawn(process.execPath, args, { env, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
    children.add(child);
    const take = (d: Buffer) => {
      logStream.write(d);
      tail = (tail + d.toString()).slice(-2000);
    };
    child.stdout!.on('data', take);
    child.stderr!.on('data', take);
    child.on('error', (e) => {
      children.delete(child);
      fail(new Error(`could not start the ${what} process: ${e.message}`));
    });
    child.on('close', (c, s) => {
      children.delete(child);
      done({ code: c, signal: s });
    });
  });
  await new Promise<void>((r) => logStream.end(r));
  return { code, signal, seconds: (performance.now() - t0) / 1000, startedAt, tail };
}

const lastLines = (tail: string) => tail.trim().split('\n').slice(-3).join(' / ').slice(-300);

/** Trains one run in a child process; resolves to null when it finished, else to the reason it did not. */
async function trainOne(
  run: PlannedRun,
  resume: boolean,
  jobs: number,
  counter: string,
  log: (l: string) => void,
  children: Set<ChildProcess>,
): Promise<string | null> {
  mkdirSync(run.dir, { recursive: true });
  if (!resume) {
    // A run that never reached a checkpoint starts over; its old log lines would mix with the new ones.
    const stale = join(run.dir, 'metrics.jsonl');
    if (existsSync(stale)) renameSync(stale, `${stale}.stale-${Date.now()}`);
    writeJsonAtomic(join(run.dir, RUN_RECORD), { attempts: [] });
  }
  const args = [BIN, 'train', '--config', run.configFile, ...run.overrides.flatMap((o) => ['--set', o]), ...(resume ? ['--resume'] : [])];
  const logFile = join(run.dir, 'train.log');
  log(`${counter} ${run.label} seed ${run.seed}: ${resume ? 'resuming' : 'starting'} (log: ${logFile})`);
  const { code, signal, seconds, startedAt, tail } = await runChild(args, jobs, logFile, children, `training (${run.dir})`);
  const record = readAttempts(run.dir);
  record.attempts.push({ started_at: startedAt.toISOString(), seconds, exit_code: code, signal, resumed: resume });
  writeJsonAtomic(join(run.dir, RUN_RECORD), record);

  const finished = inspectRun(run.dir, run.cfg.train.iterations).status === 'finished';
  if (code === 0 && finished) {
    log(`${run.label} seed ${run.seed}: finished in ${seconds.toFixed(1)} s`);
    return null;
  }
  const why =
    code === 130
      ? 'interrupted; continue with --resume'
      : signal
        ? `killed by ${signal}`
        : code === 0
          ? 'exited without its final evaluation'
          : `exit code ${code}`;
  // An interrupted run says so itself; a crash is worth its last lines here.
  const detail = code === 130 ? '' : `: ${lastLines(tail)}`;
  log(`${run.label} seed ${run.seed}: did not finish (${why}) after ${seconds.toFixed(1)} s${detail} (log: ${logFile})`);
  return why;
}

/** The checkpoints of this command's counted runs that surround an equal-steps point and lack an evaluation on `variations` variations per task. */
function checkpointsToEvaluate(
  counted: RunRecord[],
  equalSteps: number[],
  planned: PlannedRun[],
  variations: number,
): { run: PlannedRun; checkpoint: KeptCheckpoint }[] {
  const queue: { run: PlannedRun; checkpoint: KeptCheckpoint }[] = [];
  for (const record of counted) {
    // Runs of configs added by earlier invocations are evaluated when their own command is run again.
    const run = planned.find((p) => p.dir === record.dir);
    if (!run) continue;
    for (const steps of equalSteps) {
      for (const checkpoint of bracketingCheckpoints(record.checkpoints ?? [], steps) ?? []) {
        const evaluated = evalOf(checkpoint, { split: run.cfg.env.eval_split, variations });
        if (!evaluated && !queue.some((q) => q.checkpoint.dir === checkpoint.dir)) queue.push({ run, checkpoint });
      }
    }
  }
  return queue;
}

/** Evaluates one kept checkpoint of a finished run into `<run>/checkpoint-evals/<checkpoint>.json`. */
async function evaluateCheckpoint(
  run: PlannedRun,
  checkpoint: KeptCheckpoint,
  variations: number,
  jobs: number,
  counter: string,
  log: (l: string) => void,
  children: Set<ChildProcess>,
): Promise<string | null> {
  const file = checkpointEvalFile(run.dir, checkpoint.name);
  mkdirSync(join(run.dir, CHECKPOINT_EVALS), { recursive: true });
  const args = [
    BIN,
    'eval',
    checkpoint.dir,
    '--config',
    join(run.dir, 'config.yaml'),
    '--set',
    `env.eval_variations=${variations}`,
    '--json',
    file,
  ];
  const logFile = join(run.dir, `${CHECKPOINT_EVALS}.log`);
  log(
    `${counter} ${run.label} seed ${run.seed}: evaluating ${checkpoint.name} (${checkpoint.envSteps} env steps) on ${variations} variations per task (log: ${logFile})`,
  );
  const { code, signal, seconds, tail } = await runChild(args, jobs, logFile, children, `evaluation (${checkpoint.dir})`);
  const { record } = readCheckpointEval(run.dir, checkpoint.name, checkpoint.envSteps);
  if (code === 0 && record && record.eval_variations === variations) {
    log(
      `${run.label} seed ${run.seed}: ${checkpoint.name} scored ${record.mean_score.toFixed(1)} over ${record.episodes} episodes, in ${seconds.toFixed(1)} s`,
    );
    return null;
  }
  const why = signal
    ? `evaluation of ${checkpoint.name} killed by ${signal}`
    : code === 0
      ? `evaluation of ${checkpoint.name} wrote no usable record to ${file}`
      : `evaluation of ${checkpoint.name} failed with exit code ${code}`;
  log(`${run.label} seed ${run.seed}: ${why}: ${lastLines(tail)} (log: ${logFile})`);
  return why;
}

/** Evaluates a finished run's last checkpoint on `variations` variations per task, into `<run>/final-eval.json`. */
async function evaluateOne(
  run: PlannedRun,
  variations: number,
  jobs: number,
  counter: string,
  log: (l: string) => void,
  children: Set<ChildProcess>,
): Promise<string | null> {
  const args = [BIN, 'eval', run.dir, '--set', `env.eval_variations=${variations}`, '--json', finalEvalFile(run.dir)];
  const logFile = join(run.dir, 'final-eval.log');
  log(`${counter} ${run.label} seed ${run.seed}: final evaluation on ${variations} variations per task (log: ${logFile})`);
  const { code, signal, seconds, tail } = await runChild(args, jobs, logFile, children, `evaluation (${run.dir})`);
  const { record, note } = readFinalEval(run.dir);
  if (code === 0 && record) {
    log(
      `${run.label} seed ${run.seed}: final evaluation ${record.mean_score.toFixed(1)} over ${record.episodes} episodes, in ${seconds.toFixed(1)} s`,
    );
    return null;
  }
  let why = `final evaluation failed with exit code ${code}`;
  if (signal) why = `final evaluation killed by ${signal}`;
  else if (code === 0) why = `final evaluation wrote no usable record${note ? ` (${note})` : ''}`;
  log(`${run.label} seed ${run.seed}: ${why}: ${lastLines(tail)} (log: ${logFile})`);
  return why;
}
