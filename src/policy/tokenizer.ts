/**
 * Byte-level BPE tokenizers in the Hugging Face `tokenizer.json` format.
 *
 * - `trainByteLevelBPE` learns a vocabulary from text and returns a `tokenizer.json` object that
 *   Hugging Face's Python `tokenizers` loads too (same schema it saves, same merge order its
 *   `BpeTrainer` picks for the same corpus and settings).
 * - `Tokenizer` loads any byte-level BPE `tokenizer.json` (ours, GPT-2, Qwen2, Llama-3) and encodes
 *   and decodes with the maintained `@huggingface/tokenizers` library; on top of it, it exposes the
 *   exact bytes of each token so samplers can match stop strings and build tries over token ids.
 */
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import * as tokenizersLibrary from '@huggingface/tokenizers';
import type { TextTokenizer } from './types.ts';

// ---------------------------------------------------------------------------------------------
// The byte-level alphabet
// ---------------------------------------------------------------------------------------------

/**
 * GPT-2's printable stand-in for each byte. Bytes that are already visible Latin-1 characters
 * stand for themselves; the others (controls, space, soft hyphen...) are moved to U+0100 and up,
 * so every token is a readable string with no whitespace in it (space becomes "Ġ").
 */
export const BYTE_TO_SYMBOL: readonly string[] = (() => {
  const visible = (b: number) => (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
  const symbols: string[] = new Array(256);
  let shifted = 0;
  for (let b = 0; b < 256; b++) {
    symbols[b] = String.fromCharCode(visible(b) ? b : 256 + shifted++);
  }
  return symbols;
})();

const SYMBOL_TO_BYTE: ReadonlyMap<string, number> = new Map(BYTE_TO_SYMBOL.map((symbol, byte) => [symbol, byte]));

/** The 256 byte symbols in code point order: the order `tokenizers` gives them ids in. */
const BYTE_SYMBOLS_BY_CODE_POINT: readonly string[] = [...BYTE_TO_SYMBOL].sort((a, b) => a.charCodeAt(0) - b.charCodeAt(0));

/**
 * GPT-2's pre-tokenization split, the one the `ByteLevel` pre-tokenizer applies with
 * `use_regex: true`, with whitespace as the Rust `tokenizers` (Oniguruma) sees it: the Unicode
 * White_Space set. JavaScript's `\s` differs (it adds U+FEFF and lacks U+0085), and the library's
 * own ByteLevel pattern uses `\s`, so the loader installs this pattern in its place; training
 * uses it too, so that training, encoding here and encoding in Python all split text alike.
 */
const GPT2_SPLIT =
  /'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\p{White_Space}\p{L}\p{N}]+|\p{White_Space}+(?!\P{White_Space})|\p{White_Space}+/gu;

// ---------------------------------------------------------------------------------------------
// tokenizer.json shapes
// ---------------------------------------------------------------------------------------------

export interface AddedTokenJSON {
  id: number;
  content: string;
  single_word: boolean;
  lstrip: boolean;
  rstrip: boolean;
  normalized: boolean;
  special: boolean;
}

interface ByteLevelComponentJSON {
  type: 'ByteLevel';
  add_prefix_space: boolean;
  trim_offsets: boolean;
  use_regex: boolean;
}

/** What `trainByteLevelBPE` returns: the schema Python `tokenizers` (>= 0.20) saves. */
export interface ByteLevelBPEJSON {
  version: '1.0';
  truncation: null;
  padding: null;
  added_tokens: AddedTokenJSON[];
  normalizer: null;
  pre_tokenizer: ByteLevelComponentJSON;
  post_processor: ByteLevelComponentJSON;
  decoder: ByteLevelComponentJSON;
  model: {
    type: 'BPE';
    dropout: null;
    unk_token: null;
    continuing_subword_prefix: null;
    end_of_word_suffix: null;
    fuse_unk: false;
    byte_fallback: false;
    ignore_merges: false;
    vocab: Record<string, number>;
    merges: [string, string][];
  };
}

// ---------------------------------------------------------------------------------------------
// Training
// ---------------------------------------------------------------------------------------------

export interface TrainByteLevelBPEOptions {
  /** Final vocabulary size, special tokens and the 256 byte symbols included. */
  vocabSize: number;
  /** Tokens that get the first ids and always encode as one id (e.g. "<|endoftext|>"). */
  specialTokens: string[];
  /**
   * A pair seen fewer times than this is never merged; training stops early when no pair is
   * frequent enough. Default 0 (merge until the vocabulary is full), as in `tokenizers`.
   */
  minFrequency?: number;
}

/** Candidate merge in the priority queue; `count` may be stale (checked when popped). */
interface PairCandidate {
  key: number;
  left: number;
  right: number;
  count: number;
}

/** Pairs of token ids packed in one number; ids stay far below 2^21 so the key is exact. */
const PAIR_KEY_BASE = 2 ** 21;
const pairKey = (left: number, right: number) => left * PAIR_KEY_BASE + right;

/**
 * Highest count first; equal counts go to the smaller (left, right) id pair, which is the
 * tie-break `tokenizers` uses, so both trainers learn the same merges.
 */
function ranksBefore(a: PairCandidate, b: PairCandidate): boolean {
  if (a.count !== b.count) return a.count > b.count;
  if (a.left !== b.left) return a.left < b.left;
  return a.right < b.right;
}

class CandidateHeap {
  private readonly items: PairCandidate[] = [];

  get size(): number {
    return this.items.length;
  }

  push(item: PairCandidate): void {
    const items = this.items;
    items.push(item);
    let i = items.length - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (!ranksBefore(items[i], items[parent])) break;
      [items[i], items[parent]] = [items[parent], items[i]];
      i = parent;
    }
  }

  pop(): PairCandidate | undefined {
    const items = this.items;
    const top = items[0];
    const last = items.pop();
    if (items.length > 0 && last !== undefined) {
      items[0] = last;
      let i = 0;
      for (;;) {
        const left = 2 * i + 1;
        const right = left + 1;
        let best = i;
        if (left < items.length && ranksBefore(items[left], items[best])) best = left;
        if (right < items.length && ranksBefore(items[right], items[best])) best = right;
        if (best === i) break;
        [items[i], items[best]] = [items[best], items[i]];
        i = best;
      }
    }
    return top;
  }
}

function validateTrainOptions(opts: TrainByteLevelBPEOptions): void {
  const { vocabSize, specialTokens, minFrequency } = opts;
  if (!Array.isArray(specialTokens) || specialTokens.some((t) => typeof t !== 'string' || t.length === 0)) {
    throw new Error('trainByteLevelBPE: specialTokens must be an array of non-empty strings');
  }
  const seen = new Set<string>();
  for (const token of specialTokens) {
    if (seen.has(token)) throw new Error(`trainByteLevelBPE: special token "${token}" is listed twice`);
    if (SYMBOL_TO_BYTE.has(token)) {
      throw new Error(`trainByteLevelBPE: special token "${token}" is also a byte symbol; pick a longer name`);
    }
    seen.add(token);
  }
  const minimum = specialTokens.length + 256;
  if (!Number.isInteger(vocabSize) || vocabSize < minimum) {
    throw new Error(
      `trainByteLevelBPE: vocabSize must be an integer >= ${minimum} ` +
        `(${specialTokens.length} special tokens + 256 byte symbols), got ${vocabSize}`,
    );
  }
  if (vocabSize >= PAIR_KEY_BASE) {
    throw new Error(`trainByteLevelBPE: vocabSize ${vocabSize} is too large (limit ${PAIR_KEY_BASE - 1})`);
  }
  if (minFrequency !== undefined && (!Number.isFinite(minFrequency) || minFrequency < 0)) {
    throw new Error(`trainByteLevelBPE: minFrequency must be a non-negative number, got ${minFrequency}`);
  }
}

const escapeRegExp = (text: string) => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

/**
 * How often each pre-token occurs. Special tokens are cut out first, as the encoder does, so a
 * corpus of chat transcripts does not spend merges on spelling "<|im_start|>".
 */
function countPreTokens(corpus: Iterable<string>, specialTokens: readonly string[]): Map<string, number> {
  const specialSplit =
    specialTokens.length > 0
      ? new RegExp(
          [...specialTokens]
            .sort((a, b) => b.length - a.length)
            .map(escapeRegExp)
            .join('|'),
          'u',
        )
      : null;
  const counts = new Map<string, number>();
  let documentIndex = 0;
  for (const document of corpus) {
    if (typeof document !== 'string') {
      throw new Error(`trainByteLevelBPE: corpus item ${documentIndex} is a ${typeof document}, not a string`);
    }
    documentIndex++;
    const sections = specialSplit ? document.split(specialSplit) : [document];
    for (const section of sections) {
      for (const piece of section.match(GPT2_SPLIT) ?? []) {
        counts.set(piece, (counts.get(piece) ?? 0) + 1);
      }
    }
  }
  return counts;
}

/** `symbols` with every non-overlapping (left, right), scanned left to right, replaced by `merged`; null if absent. */
function mergePairInWord(symbols: number[], left: number, right: number, merged: number): number[] | null {
  let result: number[] | null = null;
  for (let i = 0; i < symbols.length; i++) {
    if (i + 1 < symbols.length && symbols[i] === left && symbols[i + 1] === right) {
      result ??= symbols.slice(0, i);
      result.push(merged);
      i++;
    } else if (result) {
      result.push(symbols[i]);
    }
  }
  return result;
}

/**
 * Learns a byte-level BPE vocabulary from `corpus` (each item a document) and returns it as a
 * Hugging Face `tokenizer.json` object: special tokens take ids 0.., the 256 byte symbols come next,
 * then one token per merge, most frequent pair first, until `vocabSize` tokens exist.
 */
export function trainByteLevelBPE(corpus: Iterable<string>, opts: TrainByteLevelBPEOptions): ByteLevelBPEJSON {
  validateTrainOptions(opts);
  const { vocabSize, specialTokens } = opts;
  const minCount = Math.max(1, opts.minFrequency ?? 0);

  const idToToken: string[] = [...specialTokens, ...BYTE_SYMBOLS_BY_CODE_POINT];
  const tokenToId = new Map(idToToken.map((token, id) => [token, id]));
  const byteToId = BYTE_TO_SYMBOL.map((symbol) => tokenToId.get(symbol)!);

  // Each distinct pre-token is a word: its current symbols and how often it occurs.
  const utf8 = new TextEncoder();
  const words: number[][] = [];
  const wordCounts: number[] = [];
  for (const [piece, count] of countPreTokens(corpus, specialTokens)) {
    words.push(Array.from(utf8.encode(piece), (byte) => byteToId[byte]));
    wordCounts.push(count);
  }

  const pairCounts = new Map<number, number>();
  const wordsWithPair = new Map<number, Set<number>>();
  words.forEach((symbols, w) => {
    for (let i = 0; i + 1 < symbols.length; i++) {
      const key = pairKey(symbols[i], symbols[i + 1]);
      pairCounts.set(key, (pairCounts.get(key) ?? 0) + wordCounts[w]);
      let holders = wordsWithPair.get(key);
      if (!holders) wordsWithPair.set(key, (holders = new Set()));
      holders.add(w);
    }
  });

  const queue = new CandidateHeap();
  for (const [key, count] of pairCounts) {
    queue.push({ key, left: Math.floor(key / PAIR_KEY_BASE), right: key % PAIR_KEY_BASE, count });
  }

  const addToCount = (key: number, delta: number) => {
    const next = (pairCounts.get(key) ?? 0) + delta;
    if (next === 0) pairCounts.delete(key);
    else pairCounts.set(key, next);
  };

  const merges: [string, string][] = [];
  while (idToToken.length < vocabSize && queue.size > 0) {
    const top = queue.pop()!;
    const current = pairCounts.get(top.key) ?? 0;
    // Counts only ever fall after a pair is queued, so a stale entry goes back with its true count.
    if (current !== top.count) {
      if (current > 0) queue.push({ ...top, count: current });
      continue;
    }
    if (current < minCount) break;

    const leftToken = idToToken[top.left];
    const rightToken = idToToken[top.right];
    const mergedToken = leftToken + rightToken;
    // Two different merges can spell the same token ("a"+"bc", "ab"+"c"); they share one id.
    let merged = tokenToId.get(mergedToken);
    if (merged === undefined) {
      merged = idToToken.length;
      idToToken.push(mergedToken);
      tokenToId.set(mergedToken, merged);
    }
    merges.push([leftToken, rightToken]);

    const grownPairs = new Set<number>();
    for (const w of wordsWithPair.get(top.key) ?? []) {
      const before = words[w];
      const after = mergePairInWord(before, top.left, top.right, merged);
      if (!after) continue; // this word lost the pair to an earlier merge
      const count = wordCounts[w];
      for (let i = 0; i + 1 < before.length; i++) addToCount(pairKey(before[i], before[i + 1]), -count);
      for (let i = 0; i + 1 < after.length; i++) {
        const key = pairKey(after[i], after[i + 1]);
        addToCount(key, count);
        if (after[i] === merged || after[i + 1] === merged) {
          grownPairs.add(key);
          let holders = wordsWithPair.get(key);
          if (!holders) wordsWithPair.set(key, (holders = new Set()));
          holders.add(w);
        }
      }
      words[w] = after;
    }
    wordsWithPair.delete(top.key);
    for (const key of grownPairs) {
      const count = pairCounts.get(key);
      if (count) queue.push({ key, left: Math.floor(key / PAIR_KEY_BASE), right: key % PAIR_KEY_BASE, count });
    }
  }

  const byteLevel = (addPrefixSpace: boolean, trimOffsets: boolean): ByteLevelComponentJSON => ({
    type: 'ByteLevel',
    add_prefix_space: addPrefixSpace,
    trim_offsets: trimOffsets,
    use_regex: true,
  });
  return {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: specialTokens.map((content, id) => ({
      id,
      content,
      single_word: false,
      lstrip: false,
      rstrip: false,
      normalized: false,
      special: true,
    })),
    normalizer: null,
    // No prefix space: decode(encode(text)) must give back exactly `text`.
    pre_tokenizer: byteLevel(false, true),
    post_processor: byteLevel(false, false),
    decoder: byteLevel(false, false),
    model: {
      type: 'BPE',
      dropout: null,
      unk_token: null,
      continuing_subword_prefix: null,
      end_of_word_suffix: null,
      fuse_unk: false,
      byte_fallback: false,
      ignore_merges: false,
      vocab: Object.fromEntries(idToToken.map((token, id) => [token, id])),
      merges,
    },
  };
}

// ---------------------------------------------------------------------------------------------
// Loading, encoding, decoding
// ---------------------------------------------------------------------------------------------

export interface EncodeOptions {
  /**
   * Let the tokenizer's post-processor add what it is configured to add (Llama-3 prepends
   * "<|begin_of_text|>"; ours, GPT-2 and Qwen2 add nothing). Default true; false never adds any.
   */
  addSpecialTokens?: boolean;
}

export interface DecodeOptions {
  /** Leave special tokens (those marked `special` in `added_tokens`) out of the text. */
  skipSpecial?: boolean;
}

type JsonObject = Record<string, unknown>;

/** The part of `@huggingface/tokenizers`' Tokenizer used here. */
interface HfTokenizerApi {
  readonly pre_tokenizer: unknown;
  encode(text: string, options: { add_special_tokens: boolean }): { ids: (number | undefined)[]; tokens: string[] };
  decode(ids: number[], options: { skip_special_tokens: boolean; clean_up_tokenization_spaces: boolean }): string;
  token_to_id(token: string): number | undefined;
  id_to_token(id: number): string | undefined;
}

type AnyClass = abstract new (...args: never[]) => unknown;

/**
 * The package's bundled .d.ts files import without file extensions, which NodeNext resolution
 * rejects, so its exports arrive untyped; these are the ones used here, typed by hand.
 */
const {
  Tokenizer: HfTokenizer,
  ByteLevelPreTokenizer,
  DigitsPreTokenizer,
  SequencePreTokenizer,
} = tokenizersLibrary as unknown as {
  Tokenizer: new (tokenizerJSON: object, tokenizerConfig: object) => HfTokenizerApi;
  ByteLevelPreTokenizer: AnyClass;
  DigitsPreTokenizer: AnyClass;
  SequencePreTokenizer: AnyClass;
};

const isObject = (value: unknown): value is JsonObject => typeof value === 'object' && value !== null && !Array.isArray(value);

const describe = (value: unknown) => (Array.isArray(value) ? 'an array' : value === null ? 'null' : `a ${typeof value}`);

/** True when `decoder` turns byte symbols back into bytes, alone or inside a Sequence. */
function hasByteLevelDecoder(decoder: unknown): boolean {
  if (!isObject(decoder)) return false;
  if (decoder.type === 'ByteLevel') return true;
  return decoder.type === 'Sequence' && Array.isArray(decoder.decoders) && decoder.decoders.some(hasByteLevelDecoder);
}

function checkTokenizerJSON(json: unknown, source: string): asserts json is JsonObject {
  if (!isObject(json)) throw new Error(`${source}: expected a tokenizer.json object, got ${describe(json)}`);
  const model = json.model;
  if (!isObject(model)) throw new Error(`${source}: "model" is missing or not an object`);
  if (model.type !== 'BPE') {
    throw new Error(
      `${source}: unsupported model type ${JSON.stringify(model.type ?? null)}; only byte-level BPE tokenizers are supported`,
    );
  }
  if (!isObject(model.vocab)) throw new Error(`${source}: model.vocab must be an object of token -> id`);
  for (const [token, id] of Object.entries(model.vocab)) {
    if (!Number.isInteger(id) || (id as number) < 0) {
      throw new Error(`${source}: model.vocab[${JSON.stringify(token)}] is ${JSON.stringify(id)}, not a token id`);
    }
  }
  if (!Array.isArray(model.merges)) throw new Error(`${source}: model.merges must be an array`);
  if (!hasByteLevelDecoder(json.decoder)) {
    const found = isObject(json.decoder) ? `"${String(json.decoder.type)}"` : 'none';
    throw new Error(`${source}: decoder is ${found}, not ByteLevel; only byte-level BPE tokenizers are supported`);
  }
  const added = json.added_tokens ?? [];
  if (!Array.isArray(added)) throw new Error(`${source}: added_tokens must be an array`);
  added.forEach((token, i) => {
    if (!isObject(token) || !Number.isInteger(token.id) || (token.id as number) < 0 || typeof token.content !== 'string') {
      throw new Error(`${source}: added_tokens[${i}] needs an integer "id" and a string "content"`);
    }
  });
}

/**
 * Gives the library's pre-tokenizers the patterns Rust `tokenizers` uses, alone or in a Sequence:
 * ByteLevel the Oniguruma-faithful GPT2_SPLIT, and Digits Rust's `char::is_numeric` (\p{N}: "²",
 * "٣" and "½" are digits too) where the library has JavaScript's ASCII-only `\d`.
 */
function installRustPatterns(preTokenizer: unknown): void {
  if (preTokenizer instanceof ByteLevelPreTokenizer) {
    const byteLevel = preTokenizer as unknown as { pattern?: unknown };
    if (byteLevel.pattern instanceof RegExp) byteLevel.pattern = GPT2_SPLIT;
  } else if (preTokenizer instanceof DigitsPreTokenizer) {
    const digits = preTokenizer as unknown as { pattern?: unknown; config?: { individual_digits?: boolean } };
    if (digits.pattern instanceof RegExp) digits.pattern = digits.config?.individual_digits ? /\P{N}+|\p{N}/gu : /\P{N}+|\p{N}+/gu;
  } else if (preTokenizer instanceof SequencePreTokenizer) {
    const inner = (preTokenizer as unknown as { tokenizers?: unknown }).tokenizers;
    if (Array.isArray(inner)) inner.forEach(installRustPatterns);
  }
}

/** Writes `text` to `path` through a temporary file and a rename, so readers never see half a file. */
function writeFileAtomic(path: string, text: string): void {
  mkdirSync(dirname(path), { recursive: true });
  const temporary = `${path}.tmp-${process.pid}-${Date.now()}`;
  try {
    writeFileSync(temporary, text);
    renameSync(temporary, path);
  } catch (err) {
    rmSync(temporary, { force: true });
    throw err;
  }
}

export class Tokenizer implements TextTokenizer {
  /** One more than the largest token id: the number of rows an embedding table needs. */
  readonly vocabSize: number;
  /** Special tokens (`special: true` in `added_tokens`) by content, e.g. "<|im_end|>" -> id. */
  readonly specialIds: ReadonlyMap<string, number>;
  /** Where this tokenizer came from, for error messages. */
  readonly source: string;

  private readonly json: JsonObject;
  private readonly hf: HfTokenizerApi;
  private readonly addedTokenContent = new Map<number, string>();
  private readonly specialIdSet: ReadonlySet<number>;
  private readonly bytesCache: (Uint8Array | undefined)[];

  private constructor(json: JsonObject, source: string) {
    this.json = json;
    this.source = source;
    // The library wants every component key present, null when unused, as `tokenizers` writes them.
    const complete = {
      normalizer: null,
      pre_tokenizer: null,
      post_processor: null,
      decoder: null,
      ...json,
      added_tokens: json.added_tokens ?? [],
    };
    try {
      // No clean-up of spaces before punctuation: decoding must give back the exact text.
      this.hf = new HfTokenizer(complete, { clean_up_tokenization_spaces: false });
      installRustPatterns(this.hf.pre_tokenizer);
    } catch (err) {
      throw new Error(`${source}: cannot build tokenizer: ${(err as Error).message}`);
    }

    const specials = new Map<string, number>();
    let maxId = -1;
    for (const id of Object.values((json.model as JsonObject).vocab as Record<string, number>)) maxId = Math.max(maxId, id);
    for (const token of (json.added_tokens as AddedTokenJSON[] | undefined) ?? []) {
      this.addedTokenContent.set(token.id, token.content);
      if (token.special) specials.set(token.content, token.id);
      maxId = Math.max(maxId, token.id);
    }
    this.vocabSize = maxId + 1;
    this.specialIds = specials;
    this.specialIdSet = new Set(specials.values());
    this.bytesCache = new Array(this.vocabSize);
  }

  /** Loads `tokenizer.json` from a file path, or from a directory that holds one. */
  static fromFile(path: string): Tokenizer {
    let file = path;
    if (existsSync(path) && statSync(path).isDirectory()) file = join(path, 'tokenizer.json');
    let text: string;
    try {
      text = readFileSync(file, 'utf8');
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'ENOENT') throw new Error(`tokenizer file not found: ${file}`);
      throw new Error(`cannot read tokenizer file ${file}: ${(err as Error).message}`);
    }
    let json: unknown;
    try {
      json = JSON.parse(text);
    } catch (err) {
      throw new Error(`${file}: invalid JSON: ${(err as Error).message}`);
    }
    return Tokenizer.fromJSON(json, file);
  }

  /** Builds a tokenizer from a parsed `tokenizer.json`; `source` names it in error messages. */
  static fromJSON(json: unknown, source = 'tokenizer JSON'): Tokenizer {
    checkTokenizerJSON(json, source);
    return new Tokenizer(structuredClone(json), source);
  }

  encode(text: string, opts: EncodeOptions = {}): number[] {
    if (typeof text !== 'string') throw new Error(`${this.source}: encode expects a string, got ${describe(text)}`);
    const { ids, tokens } = this.hf.encode(text, { add_special_tokens: opts.addSpecialTokens ?? true });
    const missing = ids.findIndex((id) => id === undefined || id === null);
    if (missing >= 0) {
      throw new Error(
        `${this.source}: the vocabulary has no id for token ${JSON.stringify(tokens[missing])} (the tokenizer lacks some byte symbols)`,
      );
    }
    return ids as number[];
  }

  decode(ids: readonly number[], opts: DecodeOptions = {}): string {
    for (let i = 0; i < ids.length; i++) this.checkId(ids[i], `decode: ids[${i}]`);
    if (ids.length === 0) return '';
    return this.hf.decode([...ids], { skip_special_tokens: opts.skipSpecial ?? false, clean_up_tokenization_spaces: false });
  }

  tokenToId(token: string): number | undefined {
    return this.hf.token_to_id(token);
  }

  /** Like `tokenToId`, but a missing token is an error naming the tokenizer. */
  requireTokenId(token: string): number {
    const id = this.tokenToId(token);
    if (id === undefined) throw new Error(`${this.source}: token ${JSON.stringify(token)} is not in the vocabulary`);
    return id;
  }

  /** The token's string as stored in the vocabulary (byte symbols, e.g. "Ġworld"). */
  idToToken(id: number): string | undefined {
    if (!Number.isInteger(id) || id < 0 || id >= this.vocabSize) return undefined;
    return this.hf.id_to_token(id);
  }

  isSpecial(id: number): boolean {
    return this.specialIdSet.has(id);
  }

  /** The text of an added token (special or not), or undefined for a learned token. */
  addedTokenText(id: number): string | undefined {
    return this.addedTokenContent.get(id);
  }

  /**
   * The exact bytes token `id` stands for. Concatenating the bytes of a sequence and decoding
   * them as UTF-8 gives the decoded text, so stop strings can be matched and allowed texts
   * walked byte by byte even when one character spans several tokens.
   */
  tokenBytes(id: number): Uint8Array {
    this.checkId(id, 'tokenBytes');
    let bytes = this.bytesCache[id];
    if (bytes) return bytes;
    const added = this.addedTokenContent.get(id);
    if (added !== undefined) {
      // Added tokens are matched in the raw text, so they stand for their content's UTF-8.
      bytes = new TextEncoder().encode(added);
    } else {
      const token = this.hf.id_to_token(id)!;
      const symbols = [...token];
      bytes = new Uint8Array(symbols.length);
      symbols.forEach((symbol, i) => {
        const byte = SYMBOL_TO_BYTE.get(symbol);
        if (byte === undefined) {
          const codePoint = symbol.codePointAt(0)!.toString(16).toUpperCase().padStart(4, '0');
          throw new Error(`${this.source}: token ${id} (${JSON.stringify(token)}) holds U+${codePoint}, which is not a byte-level symbol`);
        }
        bytes![i] = byte;
      });
    }
    this.bytesCache[id] = bytes;
    return bytes;
  }

  /** A decoder that turns ids into text one at a time, as they are sampled. */
  streamDecoder(opts: DecodeOptions = {}): StreamDecoder {
    return new StreamDecoder(this, opts.skipSpecial ?? false);
  }

  /** A copy of the `tokenizer.json` object this tokenizer was built from. */
  toJSON(): JsonObject {
    return structuredClone(this.json);
  }

  /** Writes `tokenizer.json` (temporary file, then rename: never half-written). */
  save(path: string): void {
    writeFileAtomic(path, JSON.stringify(this.json, null, 2) + '\n');
  }

  private checkId(id: number, where: string): void {
    if (!Number.isInteger(id) || id < 0 || id >= this.vocabSize || this.hf.id_to_token(id) === undefined) {
      throw new Error(`${this.source}: ${where}: ${String(id)} is not a token id (vocabulary size ${this.vocabSize})`);
    }
  }
}

/**
 * Incremental decoding: `push` returns the text each new token completes. A character whose UTF-8
 * bytes are split across tokens comes out once its last byte arrives, so the concatenated pieces
 * (plus `finish()`) equal `tokenizer.decode(ids)`.
 */
export class StreamDecoder {
  // ignoreBOM: a leading U+FEFF is text like any other (the library's decoder keeps it too).
  private utf8 = new TextDecoder('utf-8', { ignoreBOM: true });
  private readonly tokenizer: Tokenizer;
  private readonly skipSpecial: boolean;
  private decoded = '';

  constructor(tokenizer: Tokenizer, skipSpecial: boolean) {
    this.tokenizer = tokenizer;
    this.skipSpecial = skipSpecial;
  }

  /** All text produced so far. */
  get text(): string {
    return this.decoded;
  }

  push(id: number): string {
    let piece: string;
    const added = this.tokenizer.addedTokenText(id);
    if (this.tokenizer.isSpecial(id) && this.skipSpecial) {
      piece = '';
    } else if (added !== undefined) {
      // An added token ends any unfinished character before it, as in a one-shot decode.
      piece = this.utf8.decode() + added;
    } else {
      piece = this.utf8.decode(this.tokenizer.tokenBytes(id), { stream: true });
    }
    this.decoded += piece;
    return piece;
  }

  /** Flushes an unfinished character at the end (as U+FFFD, like `decode`). */
  finish(): string {
    const piece = this.utf8.decode();
    this.decoded += piece;
    return piece;
  }
}
