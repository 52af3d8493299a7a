/**
 * Reads a trajectory file while it is being written: each `refresh` reads only the bytes appended
 * since the last one (a line still being written waits for its newline), and keeps a short summary
 * of every episode with where its line sits, so one episode is read back without parsing the rest.
 * A file replaced or cut shorter (a resumed run drops the iterations it redoes) is read again.
 */
import { closeSync, fstatSync, openSync, readSync, statSync } from 'node:fs';
import {
  CapLineSchema,
  describeIssues,
  EpisodeRecordSchema,
  type EpisodeRecord,
  type TrajectoryMode,
  type TrajectorySource,
} from './format.ts';

export interface EpisodeSummary {
  /** 1-based line number in the file: the episode's id within it. */
  line: number;
  source: TrajectorySource;
  iteration: number | null;
  trial: number | null;
  env_steps: number | null;
  checkpoint: string | null;
  task: string;
  variation: number;
  /** The task's text, at most DESCRIPTION_CHARS characters (a list shows it; the episode has all of it). */
  description: string;
  mode: TrajectoryMode;
  score: number;
  success: boolean;
  steps: number;
  /** Steps that were shown at least one tip. */
  tipped_steps: number;
  /** Steps whose action a shown tip named. */
  followed_steps: number;
  has_reflection: boolean;
}

/** How much of a task's text an episode's summary keeps: a line in a list, bounded whatever the environment writes. */
export const DESCRIPTION_CHARS = 120;

interface Located extends EpisodeSummary {
  offset: number;
  length: number;
}

export class TrajectoryFile {
  private located: Located[] = [];
  private problemList: string[] = [];
  private consumed = 0;
  private lines = 0;
  private identity: string | null = null;
  private capLine: { bytes: number; max_bytes: number } | null = null;

  constructor(readonly path: string) {}

  /** Episodes read so far, in file order. */
  get episodes(): readonly EpisodeSummary[] {
    return this.located;
  }

  /** Lines that could not be read, each naming file:line and what is wrong. */
  get problems(): readonly string[] {
    return this.problemList;
  }

  /** Set when the writer stopped at its size cap. */
  get cap(): { bytes: number; max_bytes: number } | null {
    return this.capLine;
  }

  /** Reads what was appended since the last call; false when the file did not change. */
  refresh(): boolean {
    const fd = openSync(this.path, 'r');
    try {
      const st = fstatSync(fd);
      const identity = `${st.dev}:${st.ino}`;
      if (identity !== this.identity || st.size < this.consumed) this.reset(identity);
      if (st.size === this.consumed) return false;
      const buffer = Buffer.alloc(st.size - this.consumed);
      let got = 0;
      while (got < buffer.length) {
        const n = readSync(fd, buffer, got, buffer.length - got, this.consumed + got);
        if (n === 0) break;
        got += n;
      }
      const end = buffer.subarray(0, got).lastIndexOf(0x0a);
      if (end < 0) return false;
      let start = 0;
      while (start <= end) {
        const newline = buffer.indexOf(0x0a, start);
        this.lines++;
        this.take(buffer.subarray(start, newline), this.consumed + start);
        start = newline + 1;
      }
      this.consumed += end + 1;
      return true;
    } finally {
      closeSync(fd);
    }
  }

  /** The full record on `line` (from `episodes`), read from the file again. */
  episode(line: number): EpisodeRecord {
    const at = this.located.find((e) => e.line === line);
    if (!at) throw new RangeError(`${this.path} has no episode on line ${line}`);
    const fd = openSync(this.path, 'r');
    try {
      const buffer = Buffer.alloc(at.length);
      readSync(fd, buffer, 0, at.length, at.offset);
      let value: unknown;
      try {
        value = JSON.parse(buffer.toString('utf8'));
      } catch (e) {
        throw new Error(`${this.path}:${line} changed since it was read and is no longer JSON (${(e as Error).message})`);
      }
      const parsed = EpisodeRecordSchema.safeParse(value);
      if (!parsed.success)
        throw new Error(
          `${this.path}:${line} changed since it was read and is no longer an episode record (${describeIssues(parsed.error)})`,
        );
      return parsed.data;
    } finally {
      closeSync(fd);
    }
  }

  /** Size and modification time: changes whenever the file does. */
  version(): string {
    const st = statSync(this.path);
    return `${st.ino}-${st.size}-${st.mtimeMs}`;
  }

  private reset(identity: string): void {
    this.located = [];
    this.problemList = [];
    this.consumed = 0;
    this.lines = 0;
    this.capLine = null;
    this.identity = identity;
  }

  private take(bytes: Buffer, offset: number): void {
    const where = `${this.path}:${this.lines}`;
    const text = bytes.toString('utf8');
    if (text.trim() === '') return;
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch (e) {
      this.problemList.push(`${where}: not valid JSON (${(e as Error).message})`);
      return;
    }
    const type = (value as { type?: unknown } | null)?.type;
    if (type === 'cap_reached') {
      const cap = CapLineSchema.safeParse(value);
      if (cap.success) this.capLine = { bytes: cap.data.bytes, max_bytes: cap.data.max_bytes };
      else this.problemList.push(`${where}: unexpected cap_reached line (${describeIssues(cap.error)})`);
      return;
    }
    const parsed = EpisodeRecordSchema.safeParse(value);
    if (!parsed.success) {
      this.problemList.push(`${where}: not an episode record (${describeIssues(parsed.error)})`);
      return;
    }
    const r = parsed.data;
    this.located.push({
      line: this.lines,
      offset,
      length: bytes.length,
      source: r.source,
      iteration: r.iteration,
      trial: r.trial,
      env_steps: r.env_steps,
      checkpoint: r.checkpoint,
      task: r.task,
      variation: r.variation,
      description: r.description.length > DESCRIPTION_CHARS ? r.description.slice(0, DESCRIPTION_CHARS - 1) + '…' : r.description,
      mode: r.mode,
      score: r.score,
      success: r.success,
      steps: r.steps.length,
      tipped_steps: r.steps.filter((s) => s.tips.length > 0).length,
      followed_steps: r.steps.filter((s) => s.followed_tip === true).length,
      has_reflection: r.reflection !== null,
    });
  }
}
