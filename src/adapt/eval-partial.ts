/**
 * A long evaluation kept chunk by chunk, so that a stopped one goes on where it stopped. A real model's
 * evaluation takes hours on CPU (102 episodes of SmolLM2 with Retrospex: 6 lockstep chunks of up to an
 * hour each), longer than the session that runs it. Each lockstep chunk (env.max_instances episodes) is
 * written, with its episodes, to a partial file beside the outputs as soon as it has been played; the
 * file is replaced whole (write and rename), so a kill at any moment leaves the chunks finished before
 * it. `empo2 eval --resume` reads it back and plays only the chunks after them: a chunk depends only on
 * the seed and its first job (../trainer/rollout.ts), so the outputs are those an uninterrupted run
 * writes. The file also records what produced the chunks (config, model files, engine, method), and a
 * resume with anything else is refused, naming what differs. The file is removed once the outputs are
 * written.
 */
import { createHash } from 'node:crypto';
import { closeSync, existsSync, openSync, readdirSync, readFileSync, readSync, rmSync, statSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { ConfigError } from '../config/load.ts';
import { isFailed, type Episode } from '../run/records.ts';
import type { PlayedChunk } from '../trainer/rollout.ts';
import { writeTextAtomic } from '../util/atomic-write.ts';

const FORMAT = 'empo2-eval-partial';

interface PartialFile {
  format: typeof FORMAT;
  version: 1;
  /** What produced the chunks: a resume must match it exactly. */
  identity: unknown;
  /** Seconds spent playing the chunks, over every session (the final record's `seconds` adds them). */
  seconds: number;
  chunks: PlayedChunk[];
  /** The playing engine's state after the last chunk (ActingEngine.actingState), where it keeps one. */
  engine_state?: unknown;
}

/** Where an evaluation with these outputs keeps its finished chunks: beside --json, else beside --trajectories; null when it names neither. */
export function partialPathOf(o: { json?: string; trajectories?: string }): string | null {
  const named = o.json ?? o.trajectories;
  return named ? `${named}.partial` : null;
}

/** The chunks an evaluation has finished, read back on --resume and written as each new one ends. */
export class EvalPartial {
  private stopped: string | null = null;
  /** file.seconds as read: `record` adds this session's chunks to the file, not to what came before. */
  private readonly secondsBefore: number;

  private constructor(
    readonly path: string,
    private readonly file: PartialFile,
    private readonly log: (line: string) => void,
  ) {
    this.secondsBefore = file.seconds;
  }

  /**
   * Opens the partial file of `path` for an evaluation that `identity` describes: its chunks when `resume`
   * is set and the file is there and matches; none when there is no file or no `resume`. A file left by
   * another evaluation stops a resume with a message naming what differs.
   */
  static open(path: string, identity: unknown, o: { resume: boolean; log: (line: string) => void }): EvalPartial {
    const fresh = (): PartialFile => ({ format: FORMAT, version: 1, identity, seconds: 0, chunks: [] });
    if (!existsSync(path)) {
      if (o.resume) o.log(`--resume: no partial evaluation at ${path}; starting from the first episode`);
      return new EvalPartial(path, fresh(), o.log);
    }
    if (!o.resume) {
      // As before resuming existed, a plain run starts again (scripts such as compare's re-run their
      // evaluations so); the old chunks stay on disk until this run's first chunk ends, so a user who
      // meant to resume can stop now and lose nothing.
      o.log(
        `${path} holds a partial evaluation; this run starts again from the first episode and replaces it when its first chunk ends (stop now and add --resume to go on from it instead)`,
      );
      return new EvalPartial(path, fresh(), o.log);
    }
    const saved = readPartial(path);
    const done = saved.chunks.reduce((n, c) => n + c.episodes.length, 0);
    const differences = identityDifferences(saved.identity, identity);
    if (differences.length > 0)
      throw new ConfigError(
        `--resume: ${path} was left by a different evaluation; delete it to start again. What differs (saved → now): ${differences.slice(0, 8).join('; ')}${differences.length > 8 ? `; and ${differences.length - 8} more` : ''}`,
      );
    o.log(`--resume: ${done} episodes (${saved.chunks.length} chunks) read from ${path}; playing from episode ${done + 1}`);
    return new EvalPartial(path, saved, o.log);
  }

  get done(): readonly PlayedChunk[] {
    return this.file.chunks;
  }

  /** The engine's state after the recorded chunks, where it saved one. */
  get engineState(): unknown {
    return this.file.engine_state;
  }

  /** Seconds spent on the recorded chunks in earlier sessions. */
  get earlierSeconds(): number {
    return this.secondsBefore;
  }

  /**
   * Records `chunk`, played in `seconds`. A chunk that an engine or environment failure touched is not
   * recorded, nor any after it: an interrupt that reaches the worker or the simulators before this process
   * fails the episodes it cuts, and a resume must play them again rather than keep them as failed.
   */
  record(chunk: PlayedChunk, seconds: number, engineState: unknown): void {
    if (this.stopped) return;
    const failed = chunk.episodes.find((e: Episode) => isFailed(e) || e.engineError !== undefined);
    if (failed) {
      this.stopped = `episode ${chunk.start + chunk.episodes.indexOf(failed) + 1} failed`;
      this.log(`${this.path}: not recording chunks from episode ${chunk.start + 1} on (${this.stopped}); a resume plays them again`);
      return;
    }
    this.file.chunks.push(chunk);
    this.file.seconds += seconds;
    this.file.engine_state = engineState;
    writeTextAtomic(this.path, JSON.stringify(this.file));
  }

  /** The outputs are written: the chunks are no longer needed. */
  remove(): void {
    rmSync(this.path, { force: true });
  }
}

function readPartial(path: string): PartialFile {
  let parsed: Partial<PartialFile>;
  try {
    parsed = JSON.parse(readFileSync(path, 'utf8'));
  } catch (e) {
    throw new ConfigError(`${path}: not a readable partial evaluation (${(e as Error).message}); delete it to start again`);
  }
  if (parsed?.format !== FORMAT || parsed.version !== 1 || !Array.isArray(parsed.chunks))
    throw new ConfigError(`${path}: not an empo2 partial evaluation (format ${FORMAT}, version 1); delete it to start again`);
  return parsed as PartialFile;
}

/** Where two JSON values differ, as "path: saved → now" lines (at most a few per branch). */
export function identityDifferences(saved: unknown, now: unknown, at = ''): string[] {
  const show = (v: unknown) => (v === undefined ? '(none)' : truncate(JSON.stringify(v)));
  const bothObjects = typeof saved === 'object' && typeof now === 'object' && saved !== null && now !== null;
  if (!bothObjects || Array.isArray(saved) !== Array.isArray(now)) {
    return JSON.stringify(saved) === JSON.stringify(now) ? [] : [`${at || '(all)'}: ${show(saved)} → ${show(now)}`];
  }
  const a = saved as Record<string, unknown>;
  const b = now as Record<string, unknown>;
  const keys = [...new Set([...Object.keys(a), ...Object.keys(b)])];
  return keys.flatMap((k) => identityDifferences(a[k], b[k], at ? `${at}.${k}` : k));
}

function truncate(s: string): string {
  return s.length > 120 ? `${s.slice(0, 117)}...` : s;
}

/**
 * The model's files, by content: name, size and SHA-256 of every file under `path` (a folder or one
 * file), so a checkpoint saved again or a model replaced under the same name is told apart.
 */
export function modelFingerprint(path: string, skip: readonly string[] = []): { path: string; files: Record<string, string> } {
  const full = resolve(path);
  // Outputs written into the model's folder (and their partial and temporary files) are not the model.
  const skipped = (p: string) => skip.some((s) => p === resolve(s) || p.startsWith(`${resolve(s)}.`));
  const files: Record<string, string> = {};
  const visit = (p: string, name: string) => {
    if (skipped(p)) return;
    const st = statSync(p);
    if (st.isDirectory()) for (const entry of readdirSync(p).sort()) visit(join(p, entry), name ? `${name}/${entry}` : entry);
    else if (st.isFile()) files[name || '.'] = `${st.size} bytes, sha256 ${fileSha256(p)}`;
  };
  visit(full, '');
  return { path: full, files };
}

export function fileSha256(path: string): string {
  const hash = createHash('sha256');
  const buffer = Buffer.alloc(1 << 22);
  const fd = openSync(path, 'r');
  try {
    for (let n = readSync(fd, buffer); n > 0; n = readSync(fd, buffer)) hash.update(buffer.subarray(0, n));
  } finally {
    closeSync(fd);
  }
  return hash.digest('hex');
}
