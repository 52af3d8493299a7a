/**
 * CPython's `random` module, bit for bit: MT19937 seeded the way `random.seed(int)` seeds it
 * (init_by_array over the integer's 32-bit words), with `getrandbits`, `random`, `_randbelow`,
 * `shuffle`, `sample` and `uniform` drawing numbers in the same order as CPython 3.x.
 *
 * Why not a generic PRNG: WebShop orders its goals with `random.seed(233); random.shuffle(goals)`
 * and draws prices with `random.uniform` / `random.sample`. Reproducing those calls exactly is
 * what makes "goal index i" here the same goal as index i in the original (for the same goal list),
 * so the conventional split (test = first 500 goals) selects the same goals.
 */

const N = 624;
const M = 397;
const MATRIX_A = 0x9908b0df;
const UPPER_MASK = 0x80000000;
const LOWER_MASK = 0x7fffffff;

export class PyRandom {
  private readonly mt = new Uint32Array(N);
  private index = N + 1;

  constructor(seed: number) {
    this.seed(seed);
  }

  /** `random.seed(n)` for a non-negative or negative integer n (CPython uses |n|). */
  seed(seed: number): void {
    if (!Number.isSafeInteger(seed)) {
      throw new Error(`PyRandom.seed: seed must be a safe integer, got ${seed}`);
    }
    let rest = Math.abs(seed);
    const key: number[] = [];
    // CPython splits |n| into little-endian 32-bit words; zero still gives one word.
    do {
      key.push(rest % 0x100000000);
      rest = Math.floor(rest / 0x100000000);
    } while (rest > 0);
    this.initByArray(key);
  }

  private initGenrand(s: number): void {
    const mt = this.mt;
    mt[0] = s >>> 0;
    for (let i = 1; i < N; i++) {
      const prev = mt[i - 1] ^ (mt[i - 1] >>> 30);
      // 1812433253 * prev (mod 2^32), split so the product stays exact in doubles
      mt[i] = (((((prev & 0xffff0000) >>> 16) * 1812433253) << 16) + (prev & 0x0000ffff) * 1812433253 + i) >>> 0;
    }
    this.index = N;
  }

  private initByArray(key: number[]): void {
    const mt = this.mt;
    this.initGenrand(19650218);
    let i = 1;
    let j = 0;
    for (let k = Math.max(N, key.length); k > 0; k--) {
      const prev = mt[i - 1] ^ (mt[i - 1] >>> 30);
      mt[i] = ((mt[i] ^ (((((prev & 0xffff0000) >>> 16) * 1664525) << 16) + (prev & 0x0000ffff) * 1664525)) + key[j] + j) >>> 0;
      i++;
      j++;
      if (i >= N) {
        mt[0] = mt[N - 1];
        i = 1;
      }
      if (j >= key.length) j = 0;
    }
    for (let k = N - 1; k > 0; k--) {
      const prev = mt[i - 1] ^ (mt[i - 1] >>> 30);
      mt[i] = ((mt[i] ^ (((((prev & 0xffff0000) >>> 16) * 1566083941) << 16) + (prev & 0x0000ffff) * 1566083941)) - i) >>> 0;
      i++;
      if (i >= N) {
        mt[0] = mt[N - 1];
        i = 1;
      }
    }
    mt[0] = 0x80000000;
    this.index = N;
  }

  /** One 32-bit output of MT19937 (CPython's genrand_uint32). */
  nextUint32(): number {
    const mt = this.mt;
    if (this.index >= N) {
      let kk = 0;
      for (; kk < N - M; kk++) {
        const y = (mt[kk] & UPPER_MASK) | (mt[kk + 1] & LOWER_MASK);
        mt[kk] = mt[kk + M] ^ (y >>> 1) ^ (y & 1 ? MATRIX_A : 0);
      }
      for (; kk < N - 1; kk++) {
        const y = (mt[kk] & UPPER_MASK) | (mt[kk + 1] & LOWER_MASK);
        mt[kk] = mt[kk + (M - N)] ^ (y >>> 1) ^ (y & 1 ? MATRIX_A : 0);
      }
      const y = (mt[N - 1] & UPPER_MASK) | (mt[0] & LOWER_MASK);
      mt[N - 1] = mt[M - 1] ^ (y >>> 1) ^ (y & 1 ? MATRIX_A : 0);
      this.index = 0;
    }
    let y = mt[this.index++];
    y ^= y >>> 11;
    y ^= (y << 7) & 0x9d2c5680;
    y ^= (y << 15) & 0xefc60000;
    y ^= y >>> 18;
    return y >>> 0;
  }

  /** `random.getrandbits(k)` for 1 <= k <= 32. */
  getrandbits(k: number): number {
    if (!Number.isInteger(k) || k < 1 || k > 32) {
      throw new Error(`PyRandom.getrandbits: k must be an integer in 1..32, got ${k}`);
    }
    return this.nextUint32() >>> (32 - k);
  }

  /** `random.random()`: 53-bit float in [0, 1). */
  random(): number {
    const a = this.nextUint32() >>> 5;
    const b = this.nextUint32() >>> 6;
    return (a * 67108864 + b) / 9007199254740992;
  }

  /** `random._randbelow(n)` (the getrandbits rejection sampler), n >= 1. */
  randbelow(n: number): number {
    if (!Number.isInteger(n) || n < 1 || n > 0x100000000) {
      throw new Error(`PyRandom.randbelow: n must be an integer in 1..2^32, got ${n}`);
    }
    const k = Math.floor(Math.log2(n)) + 1; // int.bit_length()
    if (k > 32) return this.getrandbits(32); // n == 2^32 exactly
    let r = this.getrandbits(k);
    while (r >= n) r = this.getrandbits(k);
    return r;
  }

  /** `random.uniform(a, b)`. */
  uniform(a: number, b: number): number {
    return a + (b - a) * this.random();
  }

  /** `random.shuffle(x)` in place. */
  shuffle<T>(items: T[]): void {
    for (let i = items.length - 1; i > 0; i--) {
      const j = this.randbelow(i + 1);
      const tmp = items[i];
      items[i] = items[j];
      items[j] = tmp;
    }
  }

  /**
   * `random.sample(population, k)` for populations small enough that CPython uses its
   * pool algorithm (n <= setsize); WebShop only samples 2 of at most 4 prices.
   */
  sample<T>(population: readonly T[], k: number): T[] {
    const n = population.length;
    if (!Number.isInteger(k) || k < 0 || k > n) {
      throw new Error(`PyRandom.sample: sample size ${k} is larger than the population (${n}) or negative`);
    }
    let setsize = 21;
    if (k > 5) setsize += 4 ** Math.ceil(Math.log(k * 3) / Math.log(4));
    if (n > setsize) {
      throw new Error(`PyRandom.sample: populations larger than ${setsize} are not supported (got ${n})`);
    }
    const pool = population.slice();
    const result: T[] = [];
    for (let i = 0; i < k; i++) {
      const j = this.randbelow(n - i);
      result.push(pool[j]);
      pool[j] = pool[n - i - 1];
    }
    return result;
  }
}
