/**
 * Tip memory M (docs/EMPO2.md §2): one slot per task (or per task variation), each a first-in-first-out
 * list of at most `capacity` entries. An entry is a tip text keyed by the embedding of the state it
 * was written for, and carries the episode's final score. Retrieval keeps entries whose cosine
 * similarity to the query exceeds the threshold and returns the top k by score.
 *
 * Keys sit in one Float32Array ring buffer per slot so a query is a pass over contiguous memory,
 * and a sparse query (hashed n-gram embeddings are mostly zeros) only touches its non-zero
 * coordinates: retrieval must stay a small share of rollout time.
 */

export interface MemorySettings {
  /** Entries per slot; the oldest is evicted first. */
  capacity: number;
  /** Keep entries whose cosine similarity to the query is above this. */
  threshold: number;
  /** Return at most this many entries (highest score first). */
  topK: number;
}

export const DEFAULT_MEMORY_SETTINGS: MemorySettings = { capacity: 1000, threshold: 0.5, topK: 10 };

export interface RetrievedTip {
  text: string;
  score: number;
  similarity: number;
  /** The action a per-step tip is about (null for per-episode tips). */
  action: string | null;
}

export interface MemoryEntry {
  text: string;
  score: number;
  action: string | null;
  /** The score the episode had reached before a per-step tip's step (null: not recorded). */
  progress: number | null;
  /** Insertion counter: larger is newer. */
  order: number;
}

class Slot {
  readonly keys: Float32Array;
  readonly texts: (string | null)[];
  readonly actions: (string | null)[];
  readonly scores: Float64Array;
  /** NaN where the entry has no recorded progress. */
  readonly progress: Float64Array;
  readonly orders: Float64Array;
  /** Next write position in the ring. */
  head = 0;
  size = 0;
  readonly contents = new Set<string>();

  constructor(
    readonly capacity: number,
    readonly dim: number,
  ) {
    this.keys = new Float32Array(capacity * dim);
    this.texts = new Array(capacity).fill(null);
    this.actions = new Array(capacity).fill(null);
    this.scores = new Float64Array(capacity);
    this.progress = new Float64Array(capacity).fill(NaN);
    this.orders = new Float64Array(capacity);
  }
}

export interface RetrievalFilter {
  keepAction?: (action: string) => boolean;
  minScore?: number | null;
  /** Keep entries written at this progress (score so far), and those with none recorded. */
  progress?: number | null;
}

export class TipMemory {
  private readonly slots = new Map<string, Slot>();
  private counter = 0;

  constructor(
    readonly dim: number,
    readonly settings: MemorySettings = DEFAULT_MEMORY_SETTINGS,
  ) {
    if (!Number.isInteger(dim) || dim <= 0) throw new Error(`TipMemory: dim must be a positive integer, got ${dim}`);
    if (!Number.isInteger(settings.capacity) || settings.capacity <= 0)
      throw new Error(`TipMemory: capacity must be a positive integer, got ${settings.capacity}`);
    if (!Number.isInteger(settings.topK) || settings.topK <= 0)
      throw new Error(`TipMemory: topK must be a positive integer, got ${settings.topK}`);
  }

  /**
   * Stores a tip; returns false when the slot already holds the same text (stored once). `action`
   * names the step a per-step tip is about, so retrieval can leave out actions already taken;
   * `progress` the score the episode had reached before that step, so retrieval can keep to states
   * at the same point of the task.
   */
  add(
    slotName: string,
    key: Float32Array,
    text: string,
    score: number,
    action: string | null = null,
    progress: number | null = null,
  ): boolean {
    if (key.length !== this.dim) throw new Error(`TipMemory.add: key has ${key.length} dimensions, memory has ${this.dim}`);
    let slot = this.slots.get(slotName);
    if (!slot) this.slots.set(slotName, (slot = new Slot(this.settings.capacity, this.dim)));
    if (slot.contents.has(text)) return false;
    const at = slot.head;
    const evicted = slot.texts[at];
    if (evicted !== null) slot.contents.delete(evicted);
    slot.keys.set(key, at * this.dim);
    slot.texts[at] = text;
    slot.actions[at] = action;
    slot.scores[at] = score;
    slot.progress[at] = progress ?? NaN;
    slot.orders[at] = this.counter++;
    slot.contents.add(text);
    slot.head = (at + 1) % slot.capacity;
    slot.size = Math.min(slot.size + 1, slot.capacity);
    return true;
  }

  /**
   * Retr(s; M): entries with cosine > threshold, the top k by score (ties: more similar, then newer).
   * Entries the filter rejects are left out before the top-k cut, so k tips are still shown when
   * enough others match: those whose action `keepAction` rejects (entries without an action are
   * kept), those whose score is not above `minScore`, and those written at another `progress`
   * (entries without one are kept).
   */
  retrieve(slotName: string, query: Float32Array, topK = this.settings.topK, filter: RetrievalFilter = {}): RetrievedTip[] {
    const { keepAction, minScore, progress } = filter;
    let hits = this.similar(slotName, query);
    if (keepAction) hits = hits.filter((h) => h.action === null || keepAction(h.action));
    if (minScore !== undefined && minScore !== null) hits = hits.filter((h) => h.score > minScore);
    if (progress !== undefined && progress !== null) hits = hits.filter((h) => Number.isNaN(h.progress) || h.progress === progress);
    hits.sort((a, b) => b.score - a.score || b.similarity - a.similarity || b.order - a.order);
    return hits.slice(0, topK).map(({ text, score, similarity, action }) => ({ text, score, similarity, action }));
  }

  /** How many entries of the slot are above the similarity threshold (before the top-k cut). */
  countSimilar(slotName: string, query: Float32Array): number {
    return this.similar(slotName, query).length;
  }

  private similar(slotName: string, query: Float32Array): (RetrievedTip & { order: number; progress: number })[] {
    if (query.length !== this.dim) throw new Error(`TipMemory.retrieve: query has ${query.length} dimensions, memory has ${this.dim}`);
    const slot = this.slots.get(slotName);
    if (!slot || slot.size === 0) return [];
    const nz: number[] = [];
    for (let i = 0; i < query.length; i++) if (query[i] !== 0) nz.push(i);
    if (nz.length === 0) return [];
    const qv = nz.map((i) => query[i]);
    const out: (RetrievedTip & { order: number; progress: number })[] = [];
    const dim = this.dim;
    for (let e = 0; e < slot.size; e++) {
      const base = e * dim;
      let dot = 0;
      for (let j = 0; j < nz.length; j++) dot += slot.keys[base + nz[j]] * qv[j];
      if (dot > this.settings.threshold)
        out.push({
          text: slot.texts[e]!,
          score: slot.scores[e],
          similarity: dot,
          action: slot.actions[e],
          order: slot.orders[e],
          progress: slot.progress[e],
        });
    }
    return out;
  }

  slotNames(): string[] {
    return [...this.slots.keys()].sort();
  }

  /** Entries of a slot, oldest first. */
  entries(slotName: string): MemoryEntry[] {
    const slot = this.slots.get(slotName);
    if (!slot) return [];
    const out: MemoryEntry[] = [];
    for (let e = 0; e < slot.size; e++) {
      const progress = Number.isNaN(slot.progress[e]) ? null : slot.progress[e];
      out.push({ text: slot.texts[e]!, score: slot.scores[e], action: slot.actions[e], progress, order: slot.orders[e] });
    }
    return out.sort((a, b) => a.order - b.order);
  }

  size(slotName?: string): number {
    if (slotName !== undefined) return this.slots.get(slotName)?.size ?? 0;
    let n = 0;
    for (const s of this.slots.values()) n += s.size;
    return n;
  }

  toJSON(): SerializedMemory {
    const slots: SerializedMemory['slots'] = {};
    for (const name of this.slotNames()) {
      const slot = this.slots.get(name)!;
      const idx = [...Array(slot.size).keys()].sort((a, b) => slot.orders[a] - slot.orders[b]);
      const keys = new Float32Array(idx.length * this.dim);
      idx.forEach((e, i) => keys.set(slot.keys.subarray(e * this.dim, (e + 1) * this.dim), i * this.dim));
      const actions = idx.map((e) => slot.actions[e]);
      const progress = idx.map((e) => (Number.isNaN(slot.progress[e]) ? null : slot.progress[e]));
      slots[name] = {
        texts: idx.map((e) => slot.texts[e]!),
        scores: idx.map((e) => slot.scores[e]),
        keys: Buffer.from(keys.buffer, keys.byteOffset, keys.byteLength).toString('base64'),
        // Left out when no entry has one, so memories written before actions were kept read the same.
        ...(actions.some((a) => a !== null) ? { actions } : {}),
        ...(progress.some((p) => p !== null) ? { progress } : {}),
      };
    }
    return { format: 'empo2-tip-memory', version: 1, dim: this.dim, settings: this.settings, slots };
  }

  static fromJSON(data: unknown, where = 'tip memory'): TipMemory {
    const d = data as SerializedMemory;
    if (!d || d.format !== 'empo2-tip-memory' || d.version !== 1)
      throw new Error(`${where}: not an empo2 tip memory (format/version missing or unknown)`);
    if (!Number.isInteger(d.dim) || d.dim <= 0) throw new Error(`${where}: bad dim ${String(d.dim)}`);
    const memory = new TipMemory(d.dim, { ...DEFAULT_MEMORY_SETTINGS, ...d.settings });
    for (const [name, s] of Object.entries(d.slots ?? {})) {
      if (!Array.isArray(s.texts) || !Array.isArray(s.scores) || s.texts.length !== s.scores.length)
        throw new Error(`${where}: slot "${name}" has mismatched texts and scores`);
      if (
        s.actions !== undefined &&
        (!Array.isArray(s.actions) || s.actions.length !== s.texts.length || s.actions.some((a) => a !== null && typeof a !== 'string'))
      ) {
        throw new Error(
          `${where}: slot "${name}" has ${Array.isArray(s.actions) ? `${s.actions.length} actions for ${s.texts.length} tips, or actions that are not strings` : 'an actions field that is not a list'}`,
        );
      }
      if (
        s.progress !== undefined &&
        (!Array.isArray(s.progress) || s.progress.length !== s.texts.length || s.progress.some((p) => p !== null && !Number.isFinite(p)))
      ) {
        throw new Error(
          `${where}: slot "${name}" has ${Array.isArray(s.progress) ? `${s.progress.length} progress values for ${s.texts.length} tips, or values that are not numbers` : 'a progress field that is not a list'}`,
        );
      }
      const bytes = Buffer.from(s.keys, 'base64');
      if (bytes.byteLength !== s.texts.length * d.dim * 4)
        throw new Error(`${where}: slot "${name}" keys hold ${bytes.byteLength} bytes, expected ${s.texts.length * d.dim * 4}`);
      const keys = new Float32Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength));
      s.texts.forEach((text, i) =>
        memory.add(name, keys.subarray(i * d.dim, (i + 1) * d.dim), text, s.scores[i], s.actions?.[i] ?? null, s.progress?.[i] ?? null),
      );
    }
    return memory;
  }
}

export interface SerializedMemory {
  format: 'empo2-tip-memory';
  version: 1;
  dim: number;
  settings: MemorySettings;
  slots: Record<string, { texts: string[]; scores: number[]; keys: string; actions?: (string | null)[]; progress?: (number | null)[] }>;
}
