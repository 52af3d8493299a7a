/**
 * The novelty list of the intrinsic reward (docs/EMPO2.md §6, paper variant): per slot, a list of distinct
 * states with a visit count each. A state whose cosine similarity to every kept state is at or
 * below the threshold is new: it is added with count 1. Otherwise the most similar kept state's
 * count goes up. Either way the visit count n is returned; the reward is 1/n (src/algo/intrinsic.ts).
 */

export class NoveltyList {
  private readonly slots = new Map<string, { keys: Float32Array[]; counts: number[] }>();

  constructor(
    readonly threshold: number,
    /** States kept per slot; once full, new states are still counted as new (n = 1) but not kept. */
    readonly capacity = 5000,
  ) {}

  /** Records a visit and returns n, the number of visits to this (or a similar) state so far. */
  visit(slotName: string, key: Float32Array): number {
    let slot = this.slots.get(slotName);
    if (!slot) this.slots.set(slotName, (slot = { keys: [], counts: [] }));
    const nz: number[] = [];
    for (let i = 0; i < key.length; i++) if (key[i] !== 0) nz.push(i);
    let best = -1;
    let bestSim = this.threshold;
    for (let s = 0; s < slot.keys.length; s++) {
      const k = slot.keys[s];
      let dot = 0;
      for (const i of nz) dot += k[i] * key[i];
      if (dot > bestSim) {
        bestSim = dot;
        best = s;
      }
    }
    if (best >= 0) return ++slot.counts[best];
    if (slot.keys.length < this.capacity) {
      slot.keys.push(Float32Array.from(key));
      slot.counts.push(1);
    }
    return 1;
  }

  size(slotName: string): number {
    return this.slots.get(slotName)?.keys.length ?? 0;
  }

  toJSON(): { threshold: number; capacity: number; slots: Record<string, { counts: number[]; keys: string }> } {
    const slots: Record<string, { counts: number[]; keys: string }> = {};
    for (const [name, s] of this.slots) {
      const dim = s.keys[0]?.length ?? 0;
      const flat = new Float32Array(s.keys.length * dim);
      s.keys.forEach((k, i) => flat.set(k, i * dim));
      slots[name] = { counts: [...s.counts], keys: Buffer.from(flat.buffer).toString('base64') };
    }
    return { threshold: this.threshold, capacity: this.capacity, slots };
  }

  static fromJSON(data: ReturnType<NoveltyList['toJSON']>, dim: number, where = 'novelty list'): NoveltyList {
    if (!data || typeof data.threshold !== 'number' || typeof data.slots !== 'object')
      throw new Error(`${where}: malformed (threshold/slots missing)`);
    const list = new NoveltyList(data.threshold, data.capacity);
    for (const [name, s] of Object.entries(data.slots)) {
      const bytes = Buffer.from(s.keys, 'base64');
      if (bytes.byteLength !== s.counts.length * dim * 4)
        throw new Error(`${where}: slot "${name}" holds ${bytes.byteLength} key bytes, expected ${s.counts.length * dim * 4}`);
      const flat = new Float32Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength));
      list.slots.set(name, { keys: s.counts.map((_, i) => flat.slice(i * dim, (i + 1) * dim)), counts: [...s.counts] });
    }
    return list;
  }
}
