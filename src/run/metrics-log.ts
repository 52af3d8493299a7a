/**
 * `metrics.jsonl`: a `train` line per iteration and an `eval` line per evaluation, appended as the
 * run goes. A run resumed from the checkpoint of iteration k redoes every iteration after k, so the
 * lines written after that checkpoint (by the attempt that was interrupted) are dropped first; the
 * file then holds one line of each type per iteration, and the iteration-0 evaluation stays the
 * "before" of the run's before/after table however often it is resumed.
 */
import { appendFileSync, existsSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import type { ExternalUsage } from '../external/usage.ts';
import type { JudgeTally } from './records.ts';
import type { EvalResult } from './records.ts';

export interface MetricsLine {
  type: 'train' | 'eval';
  iteration: number;
  [key: string]: unknown;
}

/** An iteration's `train` line (./iteration-log.ts trainRecord), as a program reading it sees its fields. */
export interface TrainLine extends MetricsLine {
  type: 'train';
  /** Environment steps of the run so far. */
  env_steps: number;
  /** Mean score (0-100) and success rate (0-1) of the iteration's training episodes no failure ended (null: every one failed). */
  mean_score: number | null;
  success_rate: number | null;
  /** Episodes an environment or engine failure ended (left out of the update and the scores). */
  failed: number;
  loss: number;
  clip_fraction: number;
  kl: number;
  /** Sequences and response tokens the update trained on. */
  sequences: number;
  trained_tokens: number;
  rollout_seconds: number;
  update_seconds: number;
  elapsed_seconds: number;
  /** Rollouts per mode (plain, tips, ...). */
  modes: Record<string, number>;
  /** Tips added to the memory this iteration, and its size after. */
  tips_added: number;
  memory_size: number;
  /** With an external model in the loop (memory.reflector: openai): episodes whose tip could not be written, skipped. */
  tips_skipped?: number;
  /** With an external model in the loop: its calls, cache hits, failures, retries, tokens and seconds this iteration, by role. */
  external?: Record<string, ExternalUsage>;
  /** env.reward: judge: groups judged, groups (and their episodes) left out because the judge failed, requests asked again after bad answers. */
  judge?: JudgeTally;
}

export class MetricsLog {
  private constructor(
    readonly path: string,
    private readonly lines: MetricsLine[],
  ) {}

  /**
   * A fresh run. Lines left by an attempt that never saved a checkpoint describe weights that no
   * longer exist: they are moved to `<path>.abandoned` (replacing an older one) rather than mixed in.
   */
  static fresh(path: string, log: (line: string) => void): MetricsLog {
    if (existsSync(path)) {
      renameSync(path, `${path}.abandoned`);
      log(`${path} held lines from an attempt that saved no checkpoint; moved to ${path}.abandoned`);
    }
    return new MetricsLog(path, []);
  }

  /** Continues a run from the checkpoint of `iteration`, dropping what came after it. */
  static resume(path: string, iteration: number, log: (line: string) => void): MetricsLog {
    if (!existsSync(path)) return new MetricsLog(path, []);
    const text = readFileSync(path, 'utf8');
    const rows = text.split('\n');
    if (rows.at(-1) === '') rows.pop();
    const kept: string[] = [];
    const lines: MetricsLine[] = [];
    let dropped = 0;
    rows.forEach((row, i) => {
      let line: MetricsLine;
      try {
        line = JSON.parse(row) as MetricsLine;
      } catch (e) {
        // Only a write cut short by a kill leaves a partial last line.
        if (i === rows.length - 1 && !text.endsWith('\n')) {
          dropped++;
          return;
        }
        throw new Error(`${path}:${i + 1} is not a JSON line (${(e as Error).message}); repair or remove that line to resume`);
      }
      if (typeof line.iteration === 'number' && line.iteration > iteration) {
        dropped++;
        return;
      }
      kept.push(row);
      lines.push(line);
    });
    if (dropped > 0) {
      const tmp = `${path}.tmp-${process.pid}`;
      writeFileSync(tmp, kept.map((r) => r + '\n').join(''));
      renameSync(tmp, path);
      log(`${path}: dropped ${dropped} line(s) written after the checkpoint of iteration ${iteration}; those iterations are redone`);
    }
    return new MetricsLog(path, lines);
  }

  append(line: MetricsLine): void {
    appendFileSync(this.path, JSON.stringify(line) + '\n');
    this.lines.push(line);
  }

  /** The evaluation logged at `iteration`, if there is one (the last, should there be several). */
  evalAt(iteration: number): EvalResult | null {
    const line = [...this.lines].reverse().find((l) => l.type === 'eval' && l.iteration === iteration);
    if (!line) return null;
    // An invalid evaluation's scores are null (NaN here: it shows as invalid, never as a number).
    const score = (x: unknown) => (typeof x === 'number' ? x : NaN);
    return {
      iteration,
      perTask: (line.per_task as EvalResult['perTask']).map((t) => ({
        ...t,
        mean_score: score(t.mean_score),
        success_rate: score(t.success_rate),
      })),
      summary: {
        episodes: line.episodes as number,
        mean_score: score(line.mean_score),
        success_rate: score(line.success_rate),
        env_steps: line.env_steps as number,
        // Lines logged before evaluations were timed have no seconds, before failures were counted no failed.
        seconds: (line.seconds as number | undefined) ?? NaN,
        ...(typeof line.failed === 'number' ? { failed: line.failed } : {}),
      },
      ...(typeof line.invalid === 'string' ? { invalid: line.invalid } : {}),
    };
  }
}
