/**
 * Small seeded PRNG (mulberry32) so that runs are reproducible from `--seed`, and its state can be
 * saved in a checkpoint and restored on resume.
 */
export class Rng {
  private state: number;

  constructor(seed: number) {
    this.state = (seed >>> 0) ^ 0x9e3779b9;
  }

  /** Uniform in [0, 1). */
  next(): number {
    this.state = (this.state + 0x6d2b79f5) >>> 0;
    let t = this.state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }

  /** Integer in [0, n). */
  int(n: number): number {
    return Math.floor(this.next() * n);
  }

  pick<T>(items: readonly T[]): T {
    if (items.length === 0) throw new Error('Rng.pick: empty list');
    return items[this.int(items.length)];
  }

  shuffle<T>(items: T[]): T[] {
    for (let i = items.length - 1; i > 0; i--) {
      const j = this.int(i + 1);
      [items[i], items[j]] = [items[j], items[i]];
    }
    return items;
  }

  /** A fresh generator whose stream depends on this one's seed and a label, without advancing this one. */
  fork(label: number): Rng {
    return new Rng(this.forkSeed(label));
  }

  /** The seed of fork(label): new Rng(forkSeed(label)) draws what fork(label) draws (a remote row's seed). */
  forkSeed(label: number): number {
    return (Math.imul(this.state ^ 0x85ebca6b, 0xc2b2ae35) ^ Math.imul(label + 1, 0x27d4eb2f)) >>> 0;
  }

  getState(): number {
    return this.state;
  }

  setState(state: number): void {
    this.state = state >>> 0;
  }
}
