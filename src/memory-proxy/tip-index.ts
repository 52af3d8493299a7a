/**
 * The proxy's retrieval index: the tips of each slot as an inverted index over their keys' non-zero
 * coordinates, so that a query costs the postings of its own coordinates rather than a pass over every
 * stored key. The trainer's TipMemory (../memory/store.ts) scans a dense ring per slot, which is fast at
 * its default 1000 tips; a long-lived proxy keeps up to 100k in one slot, where that scan takes tens of
 * milliseconds a call (bench/memory-proxy.ts). Retrieval means the same thing as TipMemory's: entries
 * whose cosine similarity is above the threshold, the top k by score (ties: more similar, then newer),
 * and a slot keeps its newest `capacity` entries.
 */
import type { MemorySettings, RetrievedTip } from '../memory/store.ts';

/** A key as its non-zero coordinates. */
export interface SparseKey {
  idx: Uint16Array | Uint32Array;
  val: Float32Array;
}

export function sparseKey(dense: Float32Array): SparseKey {
  let n = 0;
  for (let i = 0; i < dense.length; i++) if (dense[i] !== 0) n++;
  const idx = dense.length <= 65536 ? new Uint16Array(n) : new Uint32Array(n);
  const val = new Float32Array(n);
  for (let i = 0, j = 0; i < dense.length; i++)
    if (dense[i] !== 0) {
      idx[j] = i;
      val[j++] = dense[i];
    }
  return { idx, val };
}

export function denseKey(key: SparseKey, dim: number): Float32Array {
  const out = new Float32Array(dim);
  for (let j = 0; j < key.idx.length; j++) out[key.idx[j]] = key.val[j];
  return out;
}

export interface IndexedTip {
  /** The database row. */
  id: number;
  text: string;
  score: number;
  action: string | null;
  progress: number | null;
}

/** One growable posting list: entry positions and their coordinate values. */
class Postings {
  ids = new Int32Array(4);
  vals = new Float32Array(4);
  n = 0;
  push(id: number, v: number): void {
    if (this.n === this.ids.length) {
      const ids = new Int32Array(this.n * 2);
      ids.set(this.ids);
      this.ids = ids;
      const vals = new Float32Array(this.n * 2);
      vals.set(this.vals);
      this.vals = vals;
    }
    this.ids[this.n] = id;
    this.vals[this.n++] = v;
  }
}

class SlotIndex {
  /** Position → entry; null where evicted (the postings still name it until the slot is rebuilt). */
  entries: (IndexedTip | null)[] = [];
  keys: (SparseKey | null)[] = [];
  postings = new Map<number, Postings>();
  texts = new Map<string, number>();
  /** Positions in insertion order not yet evicted: the first is the oldest. */
  oldest = 0;
  live = 0;
  acc = new Float64Array(0);
  /** Positions by score, oldest first (evicted ones stay until the slot is rebuilt), and the scores highest first (null: to sort). */
  byScore = new Map<number, number[]>();
  scores: number[] | null = [];

  add(tip: IndexedTip, key: SparseKey): void {
    const at = this.entries.length;
    this.entries.push(tip);
    this.keys.push(key);
    this.texts.set(tip.text, at);
    this.live++;
    const bucket = this.byScore.get(tip.score);
    if (bucket) bucket.push(at);
    else {
      this.byScore.set(tip.score, [at]);
      this.scores = null;
    }
    for (let j = 0; j < key.idx.length; j++) {
      let p = this.postings.get(key.idx[j]);
      if (!p) this.postings.set(key.idx[j], (p = new Postings()));
      p.push(at, key.val[j]);
    }
  }

  evictOldest(): IndexedTip {
    while (this.entries[this.oldest] === null) this.oldest++;
    const tip = this.entries[this.oldest]!;
    this.entries[this.oldest] = null;
    this.keys[this.oldest] = null;
    this.texts.delete(tip.text);
    this.oldest++;
    this.live--;
    // Evicted positions cost every query until they are gone: rebuild once they are half the slot.
    if (this.oldest > this.live) this.rebuild();
    return tip;
  }

  private rebuild(): void {
    const entries = this.entries.slice(this.oldest);
    const keys = this.keys.slice(this.oldest);
    this.entries = [];
    this.keys = [];
    this.postings = new Map();
    this.texts = new Map();
    this.byScore = new Map();
    this.scores = [];
    this.oldest = 0;
    this.live = 0;
    entries.forEach((e, i) => e && this.add(e, keys[i]!));
  }
}

export class TipIndex {
  private readonly slots = new Map<string, SlotIndex>();

  constructor(
    readonly dim: number,
    readonly settings: MemorySettings,
  ) {}

  has(slot: string, text: string): boolean {
    return this.slots.get(slot)?.texts.has(text) ?? false;
  }

  /** Adds a tip (its text not yet in the slot); returns the tips the slot's capacity evicted, oldest first. */
  add(slot: string, tip: IndexedTip, key: SparseKey): IndexedTip[] {
    let s = this.slots.get(slot);
    if (!s) this.slots.set(slot, (s = new SlotIndex()));
    if (s.texts.has(tip.text)) throw new Error(`TipIndex.add: slot "${slot}" already holds this text`);
    s.add(tip, key);
    const evicted: IndexedTip[] = [];
    while (s.live > this.settings.capacity) evicted.push(s.evictOldest());
    return evicted;
  }

  /**
   * Retr(s; M) as TipMemory answers it: similarity above the threshold, the top k by score, then
   * similarity, then newer. Two ways to the same answer, whichever costs fewer multiply-adds: tips
   * taken highest score first, each compared with the query, stopping after the score at which k were
   * found (cheap when the best tips are similar, the usual case in one task); or, once that has cost
   * as much as the query's postings, every similarity from the postings at once.
   */
  retrieve(slot: string, query: SparseKey, topK = this.settings.topK): RetrievedTip[] {
    const s = this.slots.get(slot);
    if (!s || s.live === 0 || query.idx.length === 0) return [];
    let postingsCost = 0;
    for (let j = 0; j < query.idx.length; j++) postingsCost += s.postings.get(query.idx[j])?.n ?? 0;
    const found = this.byScoreFirst(s, query, topK, postingsCost) ?? this.fromPostings(s, query, topK);
    return found.map(({ at, similarity }) => {
      const t = s.entries[at]!;
      return { text: t.text, score: t.score, similarity, action: t.action };
    });
  }

  private dense = new Float32Array(0);

  /** The top k walking the scores down; null once it has cost more than `budget` multiply-adds without an answer. */
  private byScoreFirst(s: SlotIndex, query: SparseKey, topK: number, budget: number): Hit[] | null {
    if (this.dense.length !== this.dim) this.dense = new Float32Array(this.dim);
    const q = this.dense;
    for (let j = 0; j < query.idx.length; j++) q[query.idx[j]] = query.val[j];
    try {
      s.scores ??= [...s.byScore.keys()].sort((a, b) => b - a);
      const best = new TopK(topK);
      let cost = 0;
      for (const score of s.scores) {
        for (const at of s.byScore.get(score)!) {
          const key = s.keys[at];
          if (key === null) continue;
          let dot = 0;
          for (let j = 0; j < key.idx.length; j++) dot += key.val[j] * q[key.idx[j]];
          cost += key.idx.length;
          if (dot > this.settings.threshold) best.offer(at, score, dot);
        }
        if (best.full()) return best.hits;
        if (cost > budget) return null;
      }
      return best.hits;
    } finally {
      for (let j = 0; j < query.idx.length; j++) q[query.idx[j]] = 0;
    }
  }

  /** The top k from every similarity, summed along the query's postings. */
  private fromPostings(s: SlotIndex, query: SparseKey, topK: number): Hit[] {
    const n = s.entries.length;
    if (s.acc.length < n) s.acc = new Float64Array(Math.max(n, s.acc.length * 2));
    const acc = s.acc;
    acc.fill(0, 0, n);
    for (let j = 0; j < query.idx.length; j++) {
      const p = s.postings.get(query.idx[j]);
      if (!p) continue;
      const q = query.val[j];
      const { ids, vals } = p;
      for (let k = 0; k < p.n; k++) acc[ids[k]] += vals[k] * q;
    }
    const best = new TopK(topK);
    const threshold = this.settings.threshold;
    for (let e = s.oldest; e < n; e++) if (acc[e] > threshold && s.entries[e] !== null) best.offer(e, s.entries[e]!.score, acc[e]);
    return best.hits;
  }

  size(slot?: string): number {
    if (slot !== undefined) return this.slots.get(slot)?.live ?? 0;
    let n = 0;
    for (const s of this.slots.values()) n += s.live;
    return n;
  }
}

interface Hit {
  at: number;
  score: number;
  similarity: number;
}

/** The k best hits so far, kept sorted (k is small, the slot may hold 100k): higher score, then more similar, then newer. */
class TopK {
  readonly hits: Hit[] = [];
  constructor(private readonly k: number) {}

  full(): boolean {
    return this.hits.length >= this.k;
  }

  offer(at: number, score: number, similarity: number): void {
    const h = this.hits;
    const better = (o: Hit) => (score !== o.score ? score > o.score : similarity !== o.similarity ? similarity > o.similarity : at > o.at);
    if (h.length === this.k && !better(h[this.k - 1])) return;
    let i = h.length === this.k ? this.k - 1 : h.length;
    while (i > 0 && better(h[i - 1])) {
      h[i] = h[i - 1];
      i--;
    }
    h[i] = { at, score, similarity };
  }
}
