/**
 * The proxy's retrieval index. The trainer's TipMemory (../memory/store.ts) scans a dense ring of keys
 * per slot, which is fast at its default 1000 tips; a long-lived proxy keeps up to 100k in one slot, where
 * that scan takes tens of milliseconds a call (bench/memory-proxy.ts). Here the tips of a slot are split
 * into score bands, each with postings over its keys' non-zero coordinates: the answer is the top k by
 * score, so a query sums similarities band by band from the highest score down and stops at the first band
 * that completes k, paying for the postings of the bands it visits. Retrieval means the same as
 * TipMemory's (similarity above the threshold, the top k by score, ties: more similar, then newer; a slot
 * keeps its newest `capacity` tips), and gives the same similarities.
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

/**
 * The tips of one score band, [b, b + 1): their positions (oldest first) and the postings of their keys.
 * Bands, walked from the highest down, are what make a query cheap: the answer is the top k by score, so
 * once a band has given k similar tips no lower band can change it, and a band's postings hold only its
 * own tips.
 */
class Band {
  positions: number[] = [];
  postings = new Map<number, Postings>();
}

class SlotIndex {
  /** Position → entry; null where evicted (the bands still name it until the slot is rebuilt). */
  entries: (IndexedTip | null)[] = [];
  keys: (SparseKey | null)[] = [];
  texts = new Map<string, number>();
  /** Positions in insertion order not yet evicted: the first is the oldest. */
  oldest = 0;
  live = 0;
  acc = new Float64Array(0);
  bands = new Map<number, Band>();
  /** The bands, highest first (null: to sort after a new one). */
  order: Band[] | null = [];

  add(tip: IndexedTip, key: SparseKey): void {
    const at = this.entries.length;
    this.entries.push(tip);
    this.keys.push(key);
    this.texts.set(tip.text, at);
    this.live++;
    const b = Math.floor(tip.score);
    let band = this.bands.get(b);
    if (!band) {
      this.bands.set(b, (band = new Band()));
      this.order = null;
    }
    band.positions.push(at);
    for (let j = 0; j < key.idx.length; j++) {
      let p = band.postings.get(key.idx[j]);
      if (!p) band.postings.set(key.idx[j], (p = new Postings()));
      p.push(at, key.val[j]);
    }
  }

  highestFirst(): Band[] {
    return (this.order ??= [...this.bands.entries()].sort((x, y) => y[0] - x[0]).map(([, band]) => band));
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
    this.texts = new Map();
    this.bands = new Map();
    this.order = [];
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
   * similarity, then newer. Score bands are taken from the highest down, each band's similarities summed
   * along the query's postings in it, until a band leaves k similar tips found: what a query costs is the
   * postings of the bands it needs, not of the whole slot.
   */
  retrieve(slot: string, query: SparseKey, topK = this.settings.topK): RetrievedTip[] {
    const s = this.slots.get(slot);
    if (!s || s.live === 0 || query.idx.length === 0) return [];
    if (s.acc.length < s.entries.length) s.acc = new Float64Array(Math.max(s.entries.length, s.acc.length * 2));
    const acc = s.acc;
    const best = new TopK(topK);
    const threshold = this.settings.threshold;
    for (const band of s.highestFirst()) {
      // Summed in the query's coordinate order, as TipMemory sums: the same similarities to the last bit.
      for (let j = 0; j < query.idx.length; j++) {
        const p = band.postings.get(query.idx[j]);
        if (!p) continue;
        addPostings(acc, p.ids, p.vals, p.n, query.val[j]);
      }
      for (const at of band.positions) {
        const sim = acc[at];
        acc[at] = 0;
        const tip = s.entries[at];
        if (sim > threshold && tip !== null) best.offer(at, tip.score, sim);
      }
      if (best.full()) break;
    }
    return best.hits.map(({ at, similarity }) => {
      const t = s.entries[at]!;
      return { text: t.text, score: t.score, similarity, action: t.action };
    });
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
    if (h.length === this.k && !beats(at, score, similarity, h[this.k - 1])) return;
    let i = h.length === this.k ? this.k - 1 : h.length;
    while (i > 0 && beats(at, score, similarity, h[i - 1])) {
      h[i] = h[i - 1];
      i--;
    }
    h[i] = { at, score, similarity };
  }
}

/** Whether a hit ranks above `o`: higher score, then more similar, then newer. */
function beats(at: number, score: number, similarity: number, o: Hit): boolean {
  return score !== o.score ? score > o.score : similarity !== o.similarity ? similarity > o.similarity : at > o.at;
}

/** acc[ids[k]] += vals[k] * q over one posting list: the loop a query spends its time in, kept small so the JIT compiles it tight. */
function addPostings(acc: Float64Array, ids: Int32Array, vals: Float32Array, n: number, q: number): void {
  for (let k = 0; k < n; k++) acc[ids[k]] += vals[k] * q;
}
