/**
 * Keys and values of earlier generate calls, per cache key (one running episode), kept in host
 * memory as Float32Arrays rather than in the wasm heap: 32 episodes × 2k tokens of a 30-layer model
 * are ~3 GB, which next to the weights would not fit the heap's 4 GiB. A call uploads the reused
 * prefix of its rows and stores back what it computed.
 *
 * An entry is a list of segments, each the keys/values of a run of consecutive tokens, so storing
 * a step's new tokens appends a segment instead of copying the whole history. Entries are dropped
 * least recently used first when the count or byte limit would be exceeded, and are invalid once
 * the weights they were computed with have changed.
 */
export interface KvCacheLimits {
  /** Most entries (episodes) kept. */
  maxEntries: number;
  /** Most bytes of keys/values kept, over all entries. */
  maxBytes: number;
}

export interface KvShape {
  layers: number;
  kvHeads: number;
  headDim: number;
}

/** Keys and values of tokens [start, start + length): layout [layer][k|v][kvHead][token][headDim]. */
export interface KvSegment {
  start: number;
  length: number;
  data: Float32Array;
}

export interface KvCacheEntry {
  /** The tokens whose keys/values are held, from position 0. */
  tokens: number[];
  segments: KvSegment[];
  /** Identity of the weights the keys/values were computed with (see TfjsEngine). */
  weights: readonly object[];
}

export interface KvCacheStats {
  entries: number;
  bytes: number;
  /** Calls' rows that reused at least one cached token. */
  hits: number;
  /** Rows with a cache key and nothing to reuse (new key, diverged at once, or evicted). */
  misses: number;
  /** Prompt tokens taken from the cache instead of being prefilled. */
  reusedTokens: number;
  /** Prompt tokens prefilled (keyed or not). */
  prefilledTokens: number;
  /** Entries dropped to stay within the limits (or too large to keep at all). */
  evictions: number;
  /** Entries dropped because the weights changed since they were stored. */
  stale: number;
  /** Milliseconds spent copying caches between host memory and the wasm heap (upload and store). */
  copyMs: number;
}

export function validateKvCacheLimits(l: KvCacheLimits, where = 'kvCache'): void {
  if (!Number.isInteger(l.maxEntries) || l.maxEntries < 0)
    throw new Error(`${where}: "maxEntries" must be a non-negative integer (got ${JSON.stringify(l.maxEntries)})`);
  if (typeof l.maxBytes !== 'number' || !(l.maxBytes >= 0) || !Number.isFinite(l.maxBytes))
    throw new Error(`${where}: "maxBytes" must be a non-negative number (got ${JSON.stringify(l.maxBytes)})`);
}

export class KvCacheStore {
  /** Insertion order is recency order: a used entry is moved to the end. */
  private readonly entries = new Map<string, KvCacheEntry>();
  private bytesHeld = 0;
  readonly counters = { hits: 0, misses: 0, reusedTokens: 0, prefilledTokens: 0, evictions: 0, stale: 0, copyMs: 0 };

  constructor(
    readonly shape: KvShape,
    readonly limits: KvCacheLimits,
  ) {
    validateKvCacheLimits(limits);
  }

  /** Floats per token: every layer's key and value. */
  get floatsPerToken(): number {
    return this.shape.layers * 2 * this.shape.kvHeads * this.shape.headDim;
  }

  /** The entry for `key` if it was computed with `weights` (a stale one is dropped); marks it recently used. */
  get(key: string, weights: readonly object[]): KvCacheEntry | undefined {
    const entry = this.entries.get(key);
    if (!entry) return undefined;
    this.entries.delete(key);
    if (!sameWeights(entry.weights, weights)) {
      this.bytesHeld -= entryBytes(entry);
      this.counters.stale++;
      return undefined;
    }
    this.entries.set(key, entry);
    return entry;
  }

  /**
   * Stores `entry` under `key` (replacing the old one), then drops least recently used entries
   * until both limits hold. An entry larger than maxBytes alone is not kept.
   */
  set(key: string, entry: KvCacheEntry): void {
    this.delete([key]);
    const size = entryBytes(entry);
    if (size > this.limits.maxBytes || this.limits.maxEntries === 0) {
      this.counters.evictions++;
      return;
    }
    this.entries.set(key, entry);
    this.bytesHeld += size;
    for (const [oldKey, old] of this.entries) {
      if (this.entries.size <= this.limits.maxEntries && this.bytesHeld <= this.limits.maxBytes) break;
      if (oldKey === key) continue;
      this.entries.delete(oldKey);
      this.bytesHeld -= entryBytes(old);
      this.counters.evictions++;
    }
  }

  delete(keys: readonly string[]): void {
    for (const key of keys) {
      const entry = this.entries.get(key);
      if (!entry) continue;
      this.entries.delete(key);
      this.bytesHeld -= entryBytes(entry);
    }
  }

  clear(): void {
    this.entries.clear();
    this.bytesHeld = 0;
  }

  has(key: string): boolean {
    return this.entries.has(key);
  }

  stats(): KvCacheStats {
    return { entries: this.entries.size, bytes: this.bytesHeld, ...this.counters };
  }

  /** The segments cut to their first `length` tokens; whole segments are shared, not copied (segments are never written). */
  truncate(segments: readonly KvSegment[], length: number): KvSegment[] {
    const out: KvSegment[] = [];
    const D = this.shape.headDim;
    const groups = this.shape.layers * 2 * this.shape.kvHeads;
    for (const seg of segments) {
      if (seg.start >= length) break;
      if (seg.start + seg.length <= length) {
        out.push(seg);
        continue;
      }
      const keep = length - seg.start;
      const data = new Float32Array(groups * keep * D);
      for (let g = 0; g < groups; g++) data.set(seg.data.subarray(g * seg.length * D, (g * seg.length + keep) * D), g * keep * D);
      out.push({ start: seg.start, length: keep, data });
    }
    return out;
  }

  /**
   * Copies the first `length` tokens' keys and values of layer `layer` into `k` and `v`, laid out
   * [row][kvHead][column][headDim] with `width` columns, at row `row` from column 0.
   */
  copyPrefix(entry: KvCacheEntry, length: number, layer: number, k: Float32Array, v: Float32Array, row: number, width: number): void {
    const { kvHeads: H, headDim: D } = this.shape;
    for (const seg of entry.segments) {
      const take = Math.min(seg.length, length - seg.start);
      if (take <= 0) break;
      for (const [kind, dst] of [
        [0, k],
        [1, v],
      ] as const) {
        for (let h = 0; h < H; h++) {
          const from = ((layer * 2 + kind) * H + h) * seg.length * D;
          const to = ((row * H + h) * width + seg.start) * D;
          dst.set(seg.data.subarray(from, from + take * D), to);
        }
      }
    }
  }
}

function entryBytes(e: KvCacheEntry): number {
  return e.segments.reduce((n, s) => n + s.data.byteLength, 0);
}

function sameWeights(a: readonly object[], b: readonly object[]): boolean {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}

/** Length of the longest common prefix of two token lists. */
export function commonPrefix(a: readonly number[], b: readonly number[]): number {
  const n = Math.min(a.length, b.length);
  let i = 0;
  while (i < n && a[i] === b[i]) i++;
  return i;
}
