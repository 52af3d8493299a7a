/**
 * Answers of an external model kept on disk, keyed by the request, so that a resumed run (which
 * redoes the iterations after its checkpoint) or a repeated one asks nothing twice. One JSON line
 * per answer, appended as it comes: a kill loses at most the line being written, and a cut last
 * line is skipped when the file is read again.
 */
import { createHash } from 'node:crypto';
import { appendFileSync, existsSync, mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

export const CACHE_FILE = 'external-cache.jsonl';

export interface CachedAnswer {
  text: string;
  finish_reason: string | null;
  prompt_tokens: number;
  completion_tokens: number;
}

interface CacheLine extends CachedAnswer {
  key: string;
  model: string;
}

/**
 * The key of a request: its body (model, messages, sampling settings, response format), not the
 * server's address, so the same model moved to another port or host is still found; never the key.
 */
export function requestKey(body: Record<string, unknown>): string {
  return createHash('sha256')
    .update(stableJson({ v: 1, body }))
    .digest('hex');
}

function stableJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(stableJson).join(',')}]`;
  if (value && typeof value === 'object')
    return `{${Object.keys(value)
      .sort()
      .filter((k) => (value as Record<string, unknown>)[k] !== undefined)
      .map((k) => `${JSON.stringify(k)}:${stableJson((value as Record<string, unknown>)[k])}`)
      .join(',')}}`;
  return JSON.stringify(value);
}

export class ResponseCache {
  private entries: Map<string, CachedAnswer> | null = null;
  readonly file: string;

  /** `dir` is made at the first answer stored, not before (opening a run to evaluate writes nothing). */
  constructor(
    readonly dir: string,
    private readonly log: (line: string) => void = () => undefined,
  ) {
    this.file = join(dir, CACHE_FILE);
  }

  get(key: string): CachedAnswer | undefined {
    return this.load().get(key);
  }

  put(key: string, model: string, answer: CachedAnswer): void {
    this.load().set(key, answer);
    mkdirSync(this.dir, { recursive: true });
    const line: CacheLine = { key, model, ...answer };
    appendFileSync(this.file, JSON.stringify(line) + '\n');
  }

  get size(): number {
    return this.load().size;
  }

  private load(): Map<string, CachedAnswer> {
    if (this.entries) return this.entries;
    this.entries = new Map();
    if (!existsSync(this.file)) return this.entries;
    let unreadable = 0;
    for (const row of readFileSync(this.file, 'utf8').split('\n')) {
      if (!row) continue;
      try {
        const l = JSON.parse(row) as CacheLine;
        if (typeof l.key !== 'string' || typeof l.text !== 'string') throw new Error('not a cache line');
        this.entries.set(l.key, {
          text: l.text,
          finish_reason: l.finish_reason ?? null,
          prompt_tokens: l.prompt_tokens ?? 0,
          completion_tokens: l.completion_tokens ?? 0,
        });
      } catch {
        unreadable++;
      }
    }
    // A line cut by a kill costs one request again; nothing else is lost, so this is a note, not an error.
    if (unreadable) this.log(`${this.file}: ${unreadable} unreadable line${unreadable > 1 ? 's' : ''} skipped (asked again when needed)`);
    return this.entries;
  }
}
