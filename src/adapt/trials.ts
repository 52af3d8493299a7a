/**
 * The trial protocol the memory-only methods of `empo2 adapt` share (tip memory, Reflexion): frozen
 * weights, the first N variations of a split played in K trials, a row of scores per trial, and the
 * table printed and saved. Only what a method keeps between trials, and what it shows in the prompt,
 * differs; everything here is the same for both, so their tables compare side by side.
 */
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { validateConfig } from '../config/load.ts';
import { resumeConflicts, type Config } from '../config/schema.ts';
import type { Env, Split } from '../envs/types.ts';
import type { PolicyEngine } from '../policy/types.ts';
import { openEnvPool } from '../run/env-pool.ts';
import { EpisodeProgress } from '../run/progress.ts';
import { isFailed, type Episode, type RolloutJob } from '../run/records.ts';
import { rolloutSettings, runEpisodesInChunks, type TipSource } from '../trainer/rollout.ts';
import { TrajectoryWriter } from '../trajectory/writer.ts';
import { writeTextAtomic } from '../util/atomic-write.ts';

export interface TrialOptions {
  task: string;
  trials: number;
  /** Held-out variations played in every trial (the first N of `split`). */
  variations: number;
  split: Split;
  outDir: string;
  /** Sample every trial with the same seed (default), so score changes come from the memory alone; false gives each trial its own draw. */
  sameSeed?: boolean;
  /** Go on from the trials an interrupted adaptation in `outDir` finished (its state file); without one, start. */
  resume?: boolean;
  /** What was loaded (a checkpoint or model directory), recorded so a resume with another one is refused. */
  source?: string;
  log?: (line: string) => void;
}

/** The columns every method's trial row starts with. */
export interface TrialScores {
  trial: number;
  mean_score: number;
  success_rate: number;
  /** One score per variation, in the order of `variations` in the saved report. */
  scores: number[];
  /** Episodes an environment or engine failure ended: left out of mean_score and success_rate (absent in reports written before they were counted). */
  failed?: number;
}

/** The environments and variations of one adaptation, open until `close`. */
export interface TrialBed {
  envs: Env[];
  variations: number[];
  /** One job per variation, its group its position. */
  jobs: RolloutJob[];
  /** Whether the environment has a scripted solver (`Env.oracleAction`). */
  hasSolver: boolean;
  close(): Promise<void>;
}

export function checkTrialOptions(o: Pick<TrialOptions, 'trials' | 'variations'>): void {
  if (!Number.isInteger(o.trials) || o.trials < 1) throw new Error(`--trials must be a positive integer, got ${o.trials}`);
  if (!Number.isInteger(o.variations) || o.variations < 1) throw new Error(`--variations must be a positive integer, got ${o.variations}`);
}

/**
 * Opens the environments for `o.task` (refusing an unknown task, naming the known ones), lists its
 * variations, and makes the output folder first, so an unwritable one fails before any trial is played.
 */
export async function openTrialBed(cfg: Config, o: Pick<TrialOptions, 'task' | 'split' | 'variations' | 'outDir'>): Promise<TrialBed> {
  let variations: number[] = [];
  let hasSolver = false;
  const envs = await openEnvPool(
    cfg,
    (probe) => {
      if (!probe.tasks().includes(o.task))
        throw new Error(`unknown task "${o.task}" for environment ${cfg.env.name} (tasks: ${probe.tasks().join(', ')})`);
      variations = probe.variations(o.task, o.split).slice(0, o.variations);
      hasSolver = typeof probe.oracleAction === 'function';
      mkdirSync(o.outDir, { recursive: true });
      return variations.length;
    },
    { ...cfg.env, tasks: null },
  );
  return {
    envs,
    variations,
    jobs: variations.map((variation, i) => ({ task: o.task, variation, group: i })),
    hasSolver,
    close: async () => void (await Promise.all(envs.map((env) => env.close()))),
  };
}

/** The sampling seed of a trial: the same every trial by default, so score changes come from the memory, not from a luckier draw. */
export function trialSeed(cfg: Config, trial: number, sameSeed = true): number {
  return 424_242 + cfg.seed + (sameSeed ? 0 : 7919 * trial);
}

/** Plays `jobs` once at the evaluation temperature with `seed`, with a progress line labelled by the trial. */
export async function playTrial(
  bed: TrialBed,
  engine: PolicyEngine,
  cfg: Config,
  t: {
    jobs: RolloutJob[];
    trial: number;
    trials: number;
    seed: number;
    memory?: { tips: TipSource; uses: (episode: number) => boolean };
  },
): Promise<Episode[]> {
  if (t.jobs.length === 0) return [];
  const progress = new EpisodeProgress(t.jobs, { label: `trial ${t.trial}/${t.trials}` });
  const { episodes } = await runEpisodesInChunks(bed.envs, engine, t.jobs, {
    settingsFor: (start) => rolloutSettings(cfg, true, t.seed + start),
    memory: t.memory,
    progress,
  });
  progress.finish();
  return episodes;
}

/** Where adapt records every episode of every trial, in its output folder. */
export const ADAPT_TRAJECTORIES = 'trajectories.jsonl';

/** Where every episode of every trial is recorded (ADAPT_TRAJECTORIES), continued after the trials a resumed adaptation finished. */
export function openTrialRecorder(cfg: Config, outDir: string, trialsDone: number | null, log: (line: string) => void): TrajectoryWriter {
  const writerOptions = { maxBytes: cfg.trajectories.max_megabytes * 2 ** 20, log };
  const path = join(outDir, ADAPT_TRAJECTORIES);
  return trialsDone !== null
    ? TrajectoryWriter.resume(path, trialsDone, writerOptions, 'trial')
    : TrajectoryWriter.fresh(path, writerOptions);
}

/** A trial's mean score and success rate over its variations' outcomes, those that failed left out and counted. */
export function trialScores(trial: number, outcomes: readonly Pick<Episode, 'score' | 'success' | 'outcome'>[]): TrialScores {
  const scored = outcomes.filter((e) => !isFailed(e));
  return {
    trial,
    mean_score: scored.reduce((a, e) => a + e.score, 0) / Math.max(1, scored.length),
    success_rate: scored.filter((e) => e.success).length / Math.max(1, scored.length),
    scores: outcomes.map((e) => e.score),
    failed: outcomes.length - scored.length,
  };
}

/** The cells every trial row starts with: trial, mean score (with the failed episodes, if any), success. */
export function scoreCells(r: TrialScores): string[] {
  return [String(r.trial), r.mean_score.toFixed(1) + (r.failed ? ` (${r.failed} failed)` : ''), pct(r.success_rate)];
}

export function markdownTable(headers: readonly string[], rows: readonly (readonly string[])[]): string {
  const line = (cells: readonly string[]) => `| ${cells.join(' | ')} |`;
  return [line(headers), `|${headers.map(() => '---|').join('')}`, ...rows.map(line)].join('\n');
}

/**
 * Writes `adapt.json` (the report) and `adapt.md` (the table), plus any `extra` files (name → text),
 * into `outDir`, and prints the table with where it went.
 */
export function saveTrialReport(
  outDir: string,
  r: { report: object; table: string; log: (line: string) => void; extra?: Record<string, string> },
): void {
  const { table, extra = {} } = r;
  mkdirSync(outDir, { recursive: true });
  writeFileSync(join(outDir, 'adapt.json'), JSON.stringify(r.report, null, 2) + '\n');
  writeFileSync(join(outDir, 'adapt.md'), table + '\n');
  for (const [name, text] of Object.entries(extra)) writeFileSync(join(outDir, name), text);
  r.log('\n' + table + `\n(saved in ${outDir}: ${['adapt.json', 'adapt.md', ...Object.keys(extra)].join(', ')})`);
}

export function pct(x: number | null): string {
  return x === null ? '–' : `${(x * 100).toFixed(0)}%`;
}

/** What one memory-only method brings to the trial loop runTrials runs for both. */
export interface TrialMethod<R extends TrialScores, C, S> {
  /** The method's name and settings, as the saved state records them (TrialKey). */
  method: string;
  settings?: object;
  /** The method's state, rebuilt from a resumed adaptation's (null: fresh); a throw closes the environments. `log`: the adaptation's. */
  open(resumed: TrialState<R, C> | null, log: (line: string) => void): S | Promise<S>;
  /** The first line printed: what the adaptation does. */
  header(s: S, bed: TrialBed): string;
  /** What a resumed adaptation holds, for the line that says it resumed. */
  held(s: S, results: readonly R[]): string;
  /** Plays one trial, records its episodes, and updates the state. */
  play(s: S, t: { bed: TrialBed; recorder: TrajectoryWriter; trial: number }): Promise<R>;
  /** What the state file keeps of the state, besides the rows. */
  carry(s: S): C;
  /** The end of a trial's line, after its mean score and success rate. */
  line(r: R): string;
  /** The report, its table and any extra files, written once every trial is done. */
  report(s: S, results: readonly R[], bed: TrialBed): { report: object; table: string; extra?: Record<string, string> };
  /** Frees what the state holds (after the report, or when a trial throws). */
  dispose?(s: S): void;
}

/**
 * The trials of one memory-only adaptation: the environments opened, an interrupted adaptation in
 * `o.outDir` continued (`o.resume`), every trial's row saved as it ends, and the report written.
 */
export async function runTrials<R extends TrialScores, C, S>(cfg: Config, o: TrialOptions, m: TrialMethod<R, C, S>): Promise<R[]> {
  const log = o.log ?? ((l: string) => console.log(l));
  const bed = await openTrialBed(cfg, o);
  const key: TrialKey = { method: m.method, cfg, o, variations: bed.variations, settings: m.settings };
  let resumed: TrialState<R, C> | null;
  let state: S;
  try {
    resumed = loadTrialState<R, C>(key);
    state = await m.open(resumed, log);
  } catch (e) {
    await bed.close();
    throw e;
  }
  const results: R[] = resumed?.results ?? [];
  const recorder = openTrialRecorder(cfg, o.outDir, resumed ? results.length : null, log);
  log(m.header(state, bed));
  if (resumed) log(`resuming after trial ${results.length} (${join(o.outDir, TRIAL_STATE_FILE)}, ${m.held(state, results)})`);
  try {
    for (let trial = results.length + 1; trial <= o.trials; trial++) {
      const r = await m.play(state, { bed, recorder, trial });
      results.push(r);
      saveTrialState(key, { results, carry: m.carry(state) });
      log(`trial ${trial}/${o.trials}: mean score ${r.mean_score.toFixed(1)} | success ${pct(r.success_rate)} | ${m.line(r)}`);
    }
  } catch (e) {
    m.dispose?.(state);
    throw e;
  } finally {
    await bed.close();
  }
  saveTrialReport(o.outDir, { ...m.report(state, results, bed), log });
  removeTrialState(o.outDir);
  m.dispose?.(state);
  return results;
}

/** Where an adaptation keeps its finished trials while it runs (removed once adapt.json is written). */
export const TRIAL_STATE_FILE = 'adapt-state.json';

/** What an adaptation must keep to go on after its last finished trial: the rows so far and what the method carries between trials. */
export interface TrialState<R extends TrialScores, C> {
  results: R[];
  carry: C;
}

/** What a saved state must match to be continued: the same method and its settings, task, variations, draws, config and checkpoint. */
export interface TrialKey {
  method: string;
  cfg: Config;
  o: TrialOptions;
  variations: readonly number[];
  /** The method's own settings (Reflexion's window and plan length). */
  settings?: object;
}

function trialIdentity({ method, cfg, o, variations, settings = {} }: TrialKey) {
  return {
    method,
    settings,
    task: o.task,
    split: o.split,
    variations: [...variations],
    same_seed: o.sameSeed !== false,
    source: o.source ?? null,
    config: cfg,
  };
}

/** Options added to the schema since states kept only a hash of the config (their hash was taken without them). */
const ADDED_SINCE_HASHED_STATES = [['train', 'partial_save_minutes']] as const;

/**
 * What differs between a saved state's config and this one, as a training resume sees it (options
 * added to the schema since take their defaults; RESUMABLE_OPTIONS may change). States written before
 * the config was kept whole hold its hash: that must match the config as those versions wrote it.
 */
function configConflicts(saved: Record<string, unknown>, cfg: Config, path: string): string[] {
  if (saved.config !== undefined) return resumeConflicts(validateConfig(saved.config, `the config saved in ${path}`), cfg);
  const then = structuredClone(cfg) as unknown as Record<string, Record<string, unknown>>;
  for (const [section, key] of ADDED_SINCE_HASHED_STATES) delete then[section][key];
  const hashes = [cfg, then].map((c) => createHash('sha256').update(JSON.stringify(c)).digest('hex'));
  return hashes.includes(saved.config_sha256 as string) ? [] : ['this state holds only its hash, so what differs cannot be named'];
}

/**
 * The finished trials of an interrupted adaptation in `o.outDir`, to go on from (null: start from
 * trial 1). Without `o.resume`, a state file there is refused rather than overwritten: it holds
 * hours of a real model's trials. A state written for other options is refused, naming what differs.
 */
export function loadTrialState<R extends TrialScores, C>(key: TrialKey): TrialState<R, C> | null {
  const { cfg, o } = key;
  const path = join(o.outDir, TRIAL_STATE_FILE);
  if (!existsSync(path)) return null;
  if (!o.resume)
    throw new Error(
      `${path} holds an unfinished adaptation; continue it with --resume, or delete it (or choose another --out) to start again`,
    );
  let saved: { identity?: Record<string, unknown>; results?: unknown; carry?: unknown };
  try {
    saved = JSON.parse(readFileSync(path, 'utf8'));
  } catch (e) {
    throw new Error(`${path} is corrupt (${(e as Error).message}); delete it to start again`);
  }
  if (!saved.identity || !Array.isArray(saved.results) || saved.results.length === 0)
    throw new Error(`${path}: not an adaptation state (identity or results missing); delete it to start again`);
  const { config: _, ...want } = trialIdentity(key);
  const differs = Object.entries(want)
    .filter(([k, v]) => JSON.stringify(saved.identity![k]) !== JSON.stringify(v))
    .map(([k]) => k);
  const conflicts = configConflicts(saved.identity, cfg, path);
  if (conflicts.length) differs.push(`config (${conflicts.join('; ')})`);
  if (differs.length)
    throw new Error(
      `--resume: ${path} was written by an adaptation with another ${differs.join(', ')}; resume with the same command, or delete it to start again`,
    );
  if (saved.results.length >= o.trials)
    throw new Error(`--resume: ${path} already holds ${saved.results.length} trials, and --trials is ${o.trials}`);
  return { results: saved.results as R[], carry: saved.carry as C };
}

/** Saves the finished trials (atomically: a kill leaves the previous state or this one). */
export function saveTrialState<R extends TrialScores, C>(key: TrialKey, state: TrialState<R, C>): void {
  writeTextAtomic(join(key.o.outDir, TRIAL_STATE_FILE), JSON.stringify({ identity: trialIdentity(key), ...state }) + '\n');
}

/** Once the report is written the state is no longer needed. */
export function removeTrialState(outDir: string): void {
  rmSync(join(outDir, TRIAL_STATE_FILE), { force: true });
}
