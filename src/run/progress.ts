/**
 * Progress of a long batch of episodes (`empo2 eval`, `empo2 adapt`): on a terminal one line that
 * updates in place (episodes done / total, steps, elapsed, ETA); otherwise (logs, CI) a line per
 * task once all its episodes have ended, and with `logIntervalMs` the status line every so often as well
 * (a real model's training rollouts take minutes, and a log that is silent for them looks hung).
 */
import { formatDuration } from '../util/duration.ts';
import type { RolloutJob } from './records.ts';
import type { PolicyEngine } from '../policy/types.ts';

/** Told as episodes run (`empo2 eval` / `adapt` progress); episode indices are positions in the jobs. */
export interface ProgressSink {
  /** An episode started; it ends after at most `limit` steps. */
  started(episode: number, limit: number): void;
  /** These episodes each took one step. */
  stepped(episodes: readonly number[]): void;
  ended(episode: number, score: number): void;
}

export interface ProgressOptions {
  /** What is running, e.g. "eval" or "trial 2/5". */
  label: string;
  /** Where lines go (default: stderr). */
  write?: (text: string) => void;
  /** Update one line in place (default: whether stderr is a terminal). */
  terminal?: boolean;
  /** Least time between two in-place updates. */
  intervalMs?: number;
  /** Off a terminal: also write the status line, at most this often (default: never). */
  logIntervalMs?: number;
  /** Off a terminal: a line per task once its episodes have ended (default: true). */
  taskLines?: boolean;
}

export class EpisodeProgress implements ProgressSink {
  private readonly t0 = performance.now();
  private readonly limits = new Map<number, number>();
  private readonly stepsOf = new Map<number, number>();
  private readonly ended_ = new Set<number>();
  private readonly scores = new Map<string, number[]>();
  private readonly perTask = new Map<string, number>();
  private totalSteps = 0;
  private lastDraw = 0;
  private readonly write: (text: string) => void;
  private readonly terminal: boolean;

  constructor(
    private readonly jobs: readonly RolloutJob[],
    private readonly opts: ProgressOptions,
  ) {
    this.write = opts.write ?? ((t) => process.stderr.write(t));
    this.terminal = opts.terminal ?? Boolean(process.stderr.isTTY);
    for (const j of jobs) this.perTask.set(j.task, (this.perTask.get(j.task) ?? 0) + 1);
  }

  started(episode: number, limit: number): void {
    this.limits.set(episode, limit);
    this.stepsOf.set(episode, 0);
  }

  stepped(episodes: readonly number[]): void {
    for (const e of episodes) this.stepsOf.set(e, (this.stepsOf.get(e) ?? 0) + 1);
    this.totalSteps += episodes.length;
    this.draw(false);
  }

  ended(episode: number, score: number): void {
    this.ended_.add(episode);
    const task = this.jobs[episode].task;
    const scores = this.scores.get(task) ?? [];
    scores.push(score);
    this.scores.set(task, scores);
    if (!this.terminal && (this.opts.taskLines ?? true) && scores.length === this.perTask.get(task)) {
      const mean = scores.reduce((a, b) => a + b, 0) / scores.length;
      this.write(
        `${this.opts.label}: ${task} done, ${scores.length} episodes, mean score ${mean.toFixed(1)} | ${this.ended_.size}/${this.jobs.length} episodes, ${this.totalSteps} steps, ${formatDuration(this.elapsed())} elapsed\n`,
      );
    }
    this.draw(true);
  }

  /** Ends the in-place line (call once the batch is over). */
  finish(): void {
    if (this.terminal && this.lastDraw > 0) {
      this.draw(true);
      this.write('\n');
    }
  }

  /** Share of the work done: ended episodes count whole, running ones by steps over their limit. */
  fraction(): number {
    let done = 0;
    for (let e = 0; e < this.jobs.length; e++) {
      if (this.ended_.has(e)) done += 1;
      else if (this.limits.has(e)) done += Math.min(1, (this.stepsOf.get(e) ?? 0) / Math.max(1, this.limits.get(e)!));
    }
    return done / Math.max(1, this.jobs.length);
  }

  private elapsed(): number {
    return (performance.now() - this.t0) / 1000;
  }

  private draw(force: boolean): void {
    const now = performance.now();
    if (this.terminal) {
      if (!force && now - this.lastDraw < (this.opts.intervalMs ?? 250)) return;
      this.lastDraw = now;
      this.write(`\r\x1b[2K${this.status()}`);
    } else if (this.opts.logIntervalMs !== undefined && this.ended_.size < this.jobs.length) {
      if (now - Math.max(this.lastDraw, this.t0) < this.opts.logIntervalMs) return;
      this.lastDraw = now;
      this.write(`${this.status()}\n`);
    }
  }

  private status(): string {
    const f = this.fraction();
    const eta = f > 0 ? (this.elapsed() * (1 - f)) / f : NaN;
    return `${this.opts.label}: ${this.ended_.size}/${this.jobs.length} episodes | ${this.totalSteps} steps | ${formatDuration(this.elapsed())} elapsed | ETA ${f > 0 ? formatDuration(eta) : '?'}`;
  }
}

/**
 * Status lines while an update runs on an engine that reports progress (the PyTorch worker): at most one
 * every `intervalMs`, naming the train step (minibatch) and its micro-batches done. An update on CPU can
 * take hours (an EMPO² iteration with tips on-policy cannot pack its steps); without these the log is
 * silent for all of it. `stepsDone` counts the steps a resumed update had already run; a step that the
 * engine takes up from a part-way save is said at once. Returns the
 * function that stops it; engines without progress get a no-op.
 */
export function watchUpdate(
  engine: PolicyEngine,
  label: string,
  log: (line: string) => void,
  o: { intervalMs?: number; now?: () => number; stepsDone?: number } = {},
): () => void {
  const { intervalMs = 120_000, now = () => performance.now(), stepsDone = 0 } = o;
  if (!engine.setProgressListener) return () => {};
  const t0 = now();
  let last = t0;
  let steps = stepsDone;
  let previous = Infinity; // micro-batches done in the current step: they only grow within one
  engine.setProgressListener((op, done, total, resumed) => {
    if (op !== 'train_step') return;
    const newStep = done <= previous || resumed === true;
    previous = done;
    if (newStep) steps++;
    const t = now();
    if (resumed) {
      log(`${label}: train step ${steps} goes on from its part-way save (${done}/${total} micro-batches done)`);
      last = t;
      return;
    }
    if (t - last < intervalMs) return;
    last = t;
    log(`${label}: train step ${steps}, micro-batch ${done}/${total} | ${formatDuration((t - t0) / 1000)} elapsed`);
  });
  return () => engine.setProgressListener!(null);
}
