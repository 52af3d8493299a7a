/**
 * A dependency-free sentence embedder: word unigrams, word bigrams and character 3-grams of each
 * word (with `<` and `>` marking the word's ends), hashed into `dim` signed buckets ("feature
 * hashing"), weighted by sublinear term frequency (1 + ln tf) and scaled to unit length.
 *
 * Why this shape: the memory and the novelty reward only need "these two states read alike",
 * measured thousands of times per iteration on a CPU that is also running the policy. Word
 * n-grams capture shared objects and phrases; character 3-grams make inflections and compounds
 * ("apple"/"apples", "clip-in"/"clip in") overlap; hashing keeps the vector fixed-size with no
 * vocabulary to fit or save; the sign hash makes collisions cancel on average instead of
 * inflating similarity. There is no IDF: it would need corpus statistics that change as training
 * sees new states, which would silently move every stored key.
 *
 * Deterministic across runs and platforms: the hash is FNV-1a over UTF-16 code units followed by
 * MurmurHash3's 32-bit finaliser, all in 32-bit integer arithmetic.
 */
import type { Embedder } from './types.ts';

export interface HashedNgramOptions {
  /** Number of buckets, the vector length. Default 1024. */
  dim?: number;
  /** Weight of each word unigram feature. Default 1. */
  unigramWeight?: number;
  /** Weight of each word bigram feature. Default 1. */
  bigramWeight?: number;
  /** Weight of each character 3-gram feature. Default 1. */
  charTrigramWeight?: number;
}

const FNV_OFFSET = 0x811c9dc5;
const FNV_PRIME = 0x01000193;

// One extra code unit hashed first keeps the three feature kinds apart: the word "abc" and the
// trigram "abc" must not be the same feature.
const KIND_UNIGRAM = 1;
const KIND_BIGRAM = 2;
const KIND_TRIGRAM = 3;
const BIGRAM_SEPARATOR = 0x20;
const WORD_START = 0x3c; // '<'
const WORD_END = 0x3e; // '>'

const fnvStep = (hash: number, codeUnit: number): number => Math.imul(hash ^ codeUnit, FNV_PRIME);

function fnvWord(hash: number, word: string): number {
  for (let i = 0; i < word.length; i++) hash = Math.imul(hash ^ word.charCodeAt(i), FNV_PRIME);
  return hash;
}

/** MurmurHash3 fmix32: FNV's low bits are weak, and both the bucket and the sign come from them. */
function finalise(hash: number): number {
  hash ^= hash >>> 16;
  hash = Math.imul(hash, 0x85ebca6b);
  hash ^= hash >>> 13;
  hash = Math.imul(hash, 0xc2b2ae35);
  hash ^= hash >>> 16;
  return hash >>> 0;
}

/** Letters, digits and combining marks (so "naïve" in decomposed form stays one word). */
const NON_WORD = /[^\p{L}\p{N}\p{M}]+/u;
const NON_ASCII = /[^\x00-\x7f]/;

/**
 * Lower-cased words of `text`, split on everything that is not a letter, digit or mark. Non-ASCII
 * text is NFKC-normalised first so that ligatures, full-width forms and composed/decomposed
 * accents give the same words.
 */
export function words(text: string): string[] {
  const normalised = NON_ASCII.test(text) ? text.normalize('NFKC') : text;
  const parts = normalised.toLowerCase().split(NON_WORD);
  // split leaves an empty string at either end when the text starts or ends with a separator.
  let start = 0;
  let end = parts.length;
  if (end > 0 && parts[0] === '') start = 1;
  if (end > start && parts[end - 1] === '') end--;
  return start === 0 && end === parts.length ? parts : parts.slice(start, end);
}

function checkWeight(value: number | undefined, fallback: number, name: string): number {
  if (value === undefined) return fallback;
  if (typeof value !== 'number' || !Number.isFinite(value) || value < 0) {
    throw new Error(`HashedNgramEmbedder: ${name} must be a finite number >= 0 (got ${String(value)})`);
  }
  return value;
}

export class HashedNgramEmbedder implements Embedder {
  readonly name: string;
  readonly dim: number;
  private readonly unigramWeight: number;
  private readonly bigramWeight: number;
  private readonly charTrigramWeight: number;
  /**
   * Counts of each feature in the text being embedded, one table per feature kind so each kind
   * gets its weight; reused across texts so embedding allocates little.
   */
  private readonly unigramCounts = new FeatureCounts();
  private readonly bigramCounts = new FeatureCounts();
  private readonly trigramCounts = new FeatureCounts();

  constructor(options: HashedNgramOptions = {}) {
    const dim = options.dim ?? 1024;
    if (!Number.isInteger(dim) || dim < 1 || dim > 1 << 24) {
      throw new Error(`HashedNgramEmbedder: dim must be an integer from 1 to ${1 << 24} (got ${String(options.dim)})`);
    }
    this.dim = dim;
    this.unigramWeight = checkWeight(options.unigramWeight, 1, 'unigramWeight');
    this.bigramWeight = checkWeight(options.bigramWeight, 1, 'bigramWeight');
    this.charTrigramWeight = checkWeight(options.charTrigramWeight, 1, 'charTrigramWeight');
    if (this.unigramWeight + this.bigramWeight + this.charTrigramWeight === 0) {
      throw new Error('HashedNgramEmbedder: at least one of unigramWeight, bigramWeight, charTrigramWeight must be > 0');
    }
    const defaults = this.unigramWeight === 1 && this.bigramWeight === 1 && this.charTrigramWeight === 1;
    this.name = defaults
      ? `hashed-ngram-${dim}`
      : `hashed-ngram-${dim}-w${this.unigramWeight}-${this.bigramWeight}-${this.charTrigramWeight}`;
  }

  async embed(texts: readonly string[]): Promise<Float32Array[]> {
    return this.embedSync(texts);
  }

  /** Same as `embed`, without the promise: the work is synchronous and cheap. */
  embedSync(texts: readonly string[]): Float32Array[] {
    if (!Array.isArray(texts)) throw new Error(`HashedNgramEmbedder.embed: expected an array of strings, got ${typeof texts}`);
    const out = new Array<Float32Array>(texts.length);
    for (let i = 0; i < texts.length; i++) {
      const text = texts[i];
      if (typeof text !== 'string') {
        throw new Error(`HashedNgramEmbedder.embed: texts[${i}] is ${text === null ? 'null' : typeof text}, not a string`);
      }
      out[i] = this.embedOne(text);
    }
    return out;
  }

  embedOne(text: string): Float32Array {
    const vector = new Float32Array(this.dim);
    const tokens = words(text);
    if (tokens.length === 0) return vector;
    this.countFeatures(tokens);
    this.accumulate(vector, this.unigramCounts, this.unigramWeight);
    this.accumulate(vector, this.bigramCounts, this.bigramWeight);
    this.accumulate(vector, this.trigramCounts, this.charTrigramWeight);
    normalise(vector);
    return vector;
  }

  private countFeatures(tokens: string[]): void {
    const useUnigrams = this.unigramWeight > 0;
    const useBigrams = this.bigramWeight > 0;
    const useTrigrams = this.charTrigramWeight > 0;
    const unigramBase = fnvStep(FNV_OFFSET, KIND_UNIGRAM);
    const bigramBase = fnvStep(FNV_OFFSET, KIND_BIGRAM);
    const trigramBase = fnvStep(FNV_OFFSET, KIND_TRIGRAM);
    for (let w = 0; w < tokens.length; w++) {
      const word = tokens[w];
      if (useUnigrams) this.unigramCounts.add(finalise(fnvWord(unigramBase, word)));
      if (useBigrams && w > 0) {
        const first = fnvStep(fnvWord(bigramBase, tokens[w - 1]), BIGRAM_SEPARATOR);
        this.bigramCounts.add(finalise(fnvWord(first, word)));
      }
      if (useTrigrams) {
        // Trigrams of "<word>", hashed from the code units without building the padded string.
        const len = word.length;
        let a = WORD_START;
        let b = word.charCodeAt(0);
        for (let i = 1; i <= len; i++) {
          const c = i < len ? word.charCodeAt(i) : WORD_END;
          this.trigramCounts.add(finalise(fnvStep(fnvStep(fnvStep(trigramBase, a), b), c)));
          a = b;
          b = c;
        }
      }
    }
  }

  /** Adds each counted feature's signed, sublinear weight to its bucket, and empties `counts`. */
  private accumulate(vector: Float32Array, counts: FeatureCounts, weight: number): void {
    const dim = this.dim;
    const { keys, tallies, occupied } = counts;
    for (let i = 0; i < counts.size; i++) {
      const slot = occupied[i];
      const key = keys[slot] >>> 0;
      const value = weight * (1 + Math.log(tallies[slot]));
      const bucket = (key >>> 1) % dim;
      vector[bucket] += key & 1 ? value : -value;
    }
    counts.clear();
  }
}

/**
 * Feature key -> count, an open-addressing table over typed arrays. A JavaScript Map did the same
 * job several times slower, and counting is most of the embedder's time (a 300-character text has
 * about 350 features). Keys are already well-mixed 32-bit hashes, so their low bits pick the slot.
 */
class FeatureCounts {
  keys = new Int32Array(1024);
  /** 0 marks an empty slot. */
  tallies = new Int32Array(1024);
  /** Slots in use, in insertion order, so clearing and iterating cost the number of features. */
  occupied = new Int32Array(512);
  size = 0;

  add(key: number): void {
    const mask = this.keys.length - 1;
    let slot = key & mask;
    while (this.tallies[slot] !== 0) {
      if (this.keys[slot] === (key | 0)) {
        this.tallies[slot]++;
        return;
      }
      slot = (slot + 1) & mask;
    }
    this.keys[slot] = key;
    this.tallies[slot] = 1;
    this.occupied[this.size++] = slot;
    // Half full at most, so probe runs stay short.
    if (this.size * 2 >= this.keys.length) this.grow();
  }

  clear(): void {
    for (let i = 0; i < this.size; i++) this.tallies[this.occupied[i]] = 0;
    this.size = 0;
  }

  private grow(): void {
    const oldKeys = this.keys;
    const oldTallies = this.tallies;
    const oldOccupied = this.occupied;
    const count = this.size;
    const capacity = oldKeys.length * 2;
    this.keys = new Int32Array(capacity);
    this.tallies = new Int32Array(capacity);
    this.occupied = new Int32Array(capacity / 2);
    this.size = 0;
    const mask = capacity - 1;
    for (let i = 0; i < count; i++) {
      const from = oldOccupied[i];
      let slot = oldKeys[from] & mask;
      while (this.tallies[slot] !== 0) slot = (slot + 1) & mask;
      this.keys[slot] = oldKeys[from];
      this.tallies[slot] = oldTallies[from];
      this.occupied[this.size++] = slot;
    }
  }
}

/** Scales to unit length in place; leaves an all-zero vector (a text with no features) as it is. */
function normalise(vector: Float32Array): void {
  let sumSquares = 0;
  for (let i = 0; i < vector.length; i++) sumSquares += vector[i] * vector[i];
  if (sumSquares === 0) return;
  const scale = 1 / Math.sqrt(sumSquares);
  for (let i = 0; i < vector.length; i++) vector[i] *= scale;
}
