/**
 * Appends trajectory records to a JSON-lines file, one line per episode as soon as it is known, so
 * the file can be read while the run goes on. The file never grows past its cap: the line that
 * would cross it is replaced by a `cap_reached` line and nothing more is written.
 */
import { appendFileSync, existsSync, mkdirSync, readFileSync, renameSync, statSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import type { CapLine, EpisodeRecord } from './format.ts';

export interface WriterOptions {
  /** Size cap of the file in bytes. */
  maxBytes: number;
  /** Told once, when the cap is reached. */
  log?: (line: string) => void;
}

export class TrajectoryWriter {
  private capped: boolean;

  private constructor(
    readonly path: string,
    private bytes: number,
    private readonly options: WriterOptions,
    capped: boolean,
  ) {
    this.capped = capped;
  }

  /** An empty file at `path` (replacing what was there: records of an attempt whose weights were not kept). */
  static fresh(path: string, options: WriterOptions): TrajectoryWriter {
    checkCap(options.maxBytes);
    mkdirSync(dirname(path), { recursive: true });
    writeFileSync(path, '');
    return new TrajectoryWriter(path, 0, options, false);
  }

  /**
   * Continues the file of a run resumed from the checkpoint of `iteration`: the iterations after it are
   * played again, so their records (and a partial last line, or a cap line) are dropped first, as
   * metrics.jsonl drops its lines. An adaptation resumes after a trial: `by` 'trial'.
   */
  static resume(path: string, iteration: number, options: WriterOptions, by: 'iteration' | 'trial' = 'iteration'): TrajectoryWriter {
    checkCap(options.maxBytes);
    if (!existsSync(path)) return TrajectoryWriter.fresh(path, options);
    const text = readFileSync(path, 'utf8');
    const rows = text.split('\n');
    // A last row without its newline is a write cut short by a kill.
    rows.pop();
    const kept = rows.filter((row) => {
      let line: { type?: unknown; iteration?: unknown; trial?: unknown };
      try {
        line = JSON.parse(row);
      } catch {
        // Damage is the reader's to report (it names the line); the writer only drops what it redoes.
        return true;
      }
      if (line.type === 'cap_reached') return false;
      const at = line[by];
      return !(typeof at === 'number' && at > iteration);
    });
    const body = kept.map((r) => r + '\n').join('');
    if (body.length !== text.length) {
      const tmp = `${path}.tmp-${process.pid}`;
      writeFileSync(tmp, body);
      renameSync(tmp, path);
    }
    return new TrajectoryWriter(path, statSync(path).size, options, false);
  }

  /** Whether the cap was reached (nothing more is written). */
  get full(): boolean {
    return this.capped;
  }

  /** Writes one episode's line; false when the cap stops it. */
  append(record: EpisodeRecord): boolean {
    if (this.capped) return false;
    const line = JSON.stringify(record) + '\n';
    const size = Buffer.byteLength(line);
    if (this.bytes + size > this.options.maxBytes) {
      const cap: CapLine = { type: 'cap_reached', bytes: this.bytes, max_bytes: this.options.maxBytes, time: new Date().toISOString() };
      appendFileSync(this.path, JSON.stringify(cap) + '\n');
      this.capped = true;
      this.options.log?.(
        `${this.path} reached its cap of ${formatBytes(this.options.maxBytes)} (trajectories.max_megabytes); no more episodes are recorded in it`,
      );
      return false;
    }
    appendFileSync(this.path, line);
    this.bytes += size;
    return true;
  }
}

function checkCap(maxBytes: number): void {
  if (!(maxBytes > 0)) throw new Error(`trajectory file cap must be a positive number of bytes, got ${maxBytes}`);
}

function formatBytes(n: number): string {
  return n >= 2 ** 20 ? `${(n / 2 ** 20).toFixed(n % 2 ** 20 ? 1 : 0)} MiB` : `${n} bytes`;
}
