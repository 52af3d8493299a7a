/**
 * The in-process policy engine: a Qwen2/Llama model on TensorFlow.js that samples actions in
 * batches with a KV cache, scores responses (per-token log-probs) and takes optimiser steps on the
 * clipped objective.
 *
 * Memory: the wasm heap holds at most 4 GiB, weights included, and aborts the process when it runs
 * out, so every pass is cut to fit before it starts (memory-plan.ts): generation prefills in chunks,
 * one layer at a time, and splits the batch into groups whose keys/values fit; scoring and training
 * run micro-batches sized by their activation memory, with checkpointed layers and chunked
 * attention and output layers. A sequence that cannot fit even alone is refused with an error.
 *
 * Generation with `cacheKeys` keeps each key's keys/values in host memory (kv-cache.ts) and
 * prefills only the tokens after the longest common prefix with the new prompt.
 *
 * Batching is padded: for generation each row's new tokens are right-aligned (every row's next
 * token in the same column) after the row's reused prefix; for scoring, right padding with a causal
 * mask that keeps padding invisible to real tokens.
 */
import { tf } from './backend.ts';
import { Qwen2Model, headDim, type LayerCache } from './qwen2.ts';
import { AdamW, type AdamWConfig } from './adamw.ts';
import type { LoraConfig } from './lora.ts';
import {
  KvCacheStore,
  commonPrefix,
  validateKvCacheLimits,
  type KvCacheEntry,
  type KvCacheLimits,
  type KvCacheStats,
  type KvSegment,
} from './kv-cache.ts';
import {
  DEFAULT_CHUNKS,
  HEAP_SAFETY,
  WASM_HEAP_MAX,
  type ChunkSizes,
  chunkReserveBytes,
  inferenceBytesPerToken,
  kvBytesPerToken,
  formatBytes,
  plainTrainingBytesPerToken,
  trainingBytesPerToken,
} from './memory-plan.ts';
import { buildTries, checkConstraints, TokenTrie } from '../constrained.ts';
import { sampleToken } from '../sampling.ts';
import { objectiveTerms, type ObjectiveConfig } from '../../algo/objective.ts';
import { Rng } from '../../util/rng.ts';
import { turnEventLoop } from '../../util/event-loop.ts';
import type {
  Generation,
  GenerateOptions,
  PolicyEngine,
  ScoredSequence,
  TextTokenizer,
  TokenConstraint,
  TrainSequence,
  TrainStats,
} from '../types.ts';

const MASKED = -1e9;

/**
 * With a signal (empo2 serve), lets the event loop turn between tokens so other requests are served,
 * and stops once it is aborted (the caller's finally frees the caches). Without one, nothing.
 */
async function yieldTo(signal: AbortSignal | undefined): Promise<void> {
  if (!signal) return;
  await turnEventLoop();
  signal.throwIfAborted();
}

/**
 * Between two chunks of a prefill, with or without a signal: a long prompt holds the thread for
 * seconds per chunk, and Ctrl-C, SIGTERM (which closes an HTTP environment's instances first) and a
 * test runner's messages are handled only when the event loop turns. One turn costs microseconds.
 */
async function turnBetweenChunks(signal: AbortSignal | undefined): Promise<void> {
  await turnEventLoop();
  signal?.throwIfAborted();
}

export interface EngineOptions {
  optimizer: AdamWConfig;
  /** Clip the global gradient norm to this (0 disables). */
  maxGradNorm: number;
  /** Upper bound on padded tokens per forward pass; bounds memory, not the result. */
  microBatchTokens: number;
  /** Token ids that end a response (end of turn, end of text). */
  endTokens: number[];
  padToken: number;
  /**
   * Train low-rank adapters instead of the whole model: attached to the model here unless it
   * already has adapters (e.g. loaded from a checkpoint), which are then kept as they are.
   */
  lora?: LoraConfig;
  /** Seeds fresh adapters (A) and LoRA dropout. */
  loraSeed?: number;
  /** Heap bytes the engine plans with, live tensors included. Default: the wasm heap's maximum (4 GiB). */
  memoryLimitBytes?: number;
  /** Limits of the prefix caches kept for `cacheKeys` (host memory). Default: 256 entries, 4 GiB. */
  kvCache?: KvCacheLimits;
  /** Working-memory chunk sizes (memory-plan.ts); results do not depend on them. */
  chunks?: Partial<ChunkSizes>;
  /**
   * Recompute layers in the backward pass: 'auto' (default) when a micro-batch's activations would
   * not fit the heap otherwise, 'always' to spend a third more compute on less memory.
   */
  checkpointLayers?: 'auto' | 'always';
}

export const DEFAULT_KV_CACHE_LIMITS: KvCacheLimits = { maxEntries: 256, maxBytes: 4 * 2 ** 30 };

interface RowState {
  tokens: number[];
  logprobs: number[];
  done: boolean;
  finish: 'stop' | 'length';
}

/** What a generate call reuses for one row: the cached entry and how many of its tokens. */
interface Reuse {
  entry: KvCacheEntry | null;
  length: number;
}

/** One generate call as its groups of rows see it. */
interface GenerationCall {
  prompts: number[][];
  reuse: Reuse[];
  maxTokens: number;
  out: RowState[];
  sample: (b: number, logits: Float32Array) => void;
  /** A row's decoding rule (allowed texts' trie or constraint), or null. */
  rule: (b: number) => TokenConstraint | null;
  jumpForward: boolean;
  keys: (string | null)[] | undefined;
  weights: object[];
  signal?: AbortSignal;
}

/**
 * Where a group's rows sit in its keys/values: G rows (indices into the call's prompts), row j's reused
 * prefix r[j] of at most R and its n[j] new tokens right-aligned in N columns from offset[j].
 */
interface GroupLayout {
  rows: number[];
  G: number;
  r: number[];
  n: number[];
  R: number;
  N: number;
  offset: number[];
}

export class TfjsEngine implements PolicyEngine {
  readonly optimizer: AdamW;
  private readonly kvCache: KvCacheStore;
  private readonly chunks: ChunkSizes;

  constructor(
    readonly model: Qwen2Model,
    readonly tokenizer: TextTokenizer,
    readonly options: EngineOptions,
  ) {
    if (options.endTokens.length === 0) throw new Error('engine: at least one end token id is needed');
    if (options.memoryLimitBytes !== undefined && !(options.memoryLimitBytes > 0))
      throw new Error(`engine: memoryLimitBytes must be positive (got ${options.memoryLimitBytes})`);
    if (options.kvCache) validateKvCacheLimits(options.kvCache, 'engine: kvCache');
    this.chunks = { ...DEFAULT_CHUNKS, ...options.chunks };
    for (const [name, v] of Object.entries(this.chunks))
      if (!(Number.isInteger(v) && v >= 1)) throw new Error(`engine: chunks.${name} must be a positive integer (got ${v})`);
    this.optimizer = new AdamW(options.optimizer);
    if (options.lora && !model.lora) model.attachLora(options.lora, options.loraSeed ?? 0);
    const c = model.config;
    this.kvCache = new KvCacheStore(
      { layers: c.num_hidden_layers, kvHeads: c.num_key_value_heads, headDim: headDim(c) },
      options.kvCache ?? DEFAULT_KV_CACHE_LIMITS,
    );
  }

  /** The model's max_position_embeddings. */
  get contextLength(): number {
    return this.model.config.max_position_embeddings;
  }

  /** What to do about a sequence of `tokens` too long for the heap: the other engine, unless the model cannot read it at all. */
  private tooBigHint(tokens: number): string {
    const context = this.contextLength;
    if (tokens > context)
      return `it is also longer than the model's context of ${context} tokens (max_position_embeddings), so no engine would read it: shorten it`;
    return 'use model.engine: torch for sequences this long';
  }

  // ---------------------------------------------------------------- memory

  /** Heap bytes a pass may plan to allocate now, next to what is already live. */
  private workingBytes(): number {
    const limit = this.options.memoryLimitBytes ?? WASM_HEAP_MAX;
    return Math.max(0, (limit - tf.memory().numBytes) * HEAP_SAFETY);
  }

  // ---------------------------------------------------------------- generation

  async generate(prompts: number[][], opts: GenerateOptions & { useCache?: boolean }): Promise<Generation[]> {
    const B = prompts.length;
    if (B === 0) return [];
    prompts.forEach((p, i) => {
      if (p.length === 0) throw new Error(`generate: prompt ${i} is empty`);
    });
    if (!(Number.isInteger(opts.maxTokens) && opts.maxTokens >= 0))
      throw new Error(`generate: maxTokens must be a non-negative integer (got ${opts.maxTokens})`);
    if (opts.allowedTexts && opts.allowedTexts.length !== B)
      throw new Error(`generate: allowedTexts has ${opts.allowedTexts.length} entries for ${B} prompts`);
    const constraints = checkConstraints(opts, B);
    const keys = opts.cacheKeys;
    if (keys) {
      if (keys.length !== B) throw new Error(`generate: cacheKeys has ${keys.length} entries for ${B} prompts`);
      const seen = new Map<string, number>();
      keys.forEach((k, i) => {
        if (k === null || k === undefined) return;
        if (typeof k !== 'string') throw new Error(`generate: cacheKeys[${i}] must be a string or null (got ${JSON.stringify(k)})`);
        if (seen.has(k))
          throw new Error(`generate: cacheKeys[${i}] repeats cacheKeys[${seen.get(k)}] (${JSON.stringify(k)}); one row per key`);
        seen.set(k, i);
      });
    }
    // One generator per row: a row's tokens do not depend on how rows are grouped into passes (which
    // changes with the memory plan and with cached prefixes). Row 0 draws from the seed's own stream,
    // so a one-prompt call samples what it always did.
    const base = new Rng(opts.seed);
    const rngs = prompts.map((_, b) => (b === 0 ? new Rng(opts.seed) : base.fork(b)));
    const endToken = this.options.endTokens[0];
    const tries = await buildTries(opts.allowedTexts ?? [], (t) => this.tokenizer.encode(t), endToken, opts.signal);
    const out: RowState[] = prompts.map(() => ({ tokens: [], logprobs: [], done: false, finish: 'length' }));
    if (opts.maxTokens === 0) return out.map(() => ({ tokens: [], logprobs: [], text: '', finish: 'length' }));
    const rule = (b: number) => tries[b] ?? constraints?.[b] ?? null;
    const sample = (b: number, logits: Float32Array) => this.sampleInto(out[b], logits, opts, rngs[b], rule(b));

    opts.signal?.throwIfAborted();
    if (opts.useCache === false) {
      await this.generateWithoutCache(prompts, opts.maxTokens, out, sample, opts.signal);
    } else {
      const weights = this.weightsIdentity();
      const reuse: Reuse[] = prompts.map((p, b) => {
        const key = keys?.[b];
        if (key === null || key === undefined) return { entry: null, length: 0 };
        const entry = this.kvCache.get(key, weights) ?? null;
        // At least the prompt's last token is run again: its logits start the response.
        return { entry, length: entry ? Math.min(commonPrefix(entry.tokens, p), p.length - 1) : 0 };
      });
      const groups = this.generationGroups(prompts, reuse, opts.maxTokens);
      reuse.forEach((r, b) => {
        if (keys?.[b] === null || keys?.[b] === undefined) return;
        if (r.length > 0) this.kvCache.counters.hits++;
        else this.kvCache.counters.misses++;
        this.kvCache.counters.reusedTokens += r.length;
      });
      const call: GenerationCall = {
        prompts,
        reuse,
        maxTokens: opts.maxTokens,
        out,
        sample,
        rule,
        jumpForward: opts.jumpForward === true,
        keys,
        weights,
        signal: opts.signal,
      };
      for (const group of groups) await this.generateGroup(group, call);
    }
    return out.map((r) => ({ tokens: r.tokens, logprobs: r.logprobs, text: this.decodeResponse(r.tokens), finish: r.finish }));
  }

  /** Samples the next token of a row that is still running; marks it done at an end token or stop text. */
  private sampleInto(row: RowState, logits: Float32Array, opts: GenerateOptions, rng: Rng, rule: TokenConstraint | null): void {
    if (row.done) return;
    const allowed = rule ? rule.allowedAfter(row.tokens) : null;
    // An empty list would sample free text (as a trie does past its end): a constraint that allows nothing is a fault.
    if (allowed && allowed.length === 0 && !(rule instanceof TokenTrie))
      throw new Error(
        `generate: the decoding constraint allows no token after ${row.tokens.length} tokens (${JSON.stringify(this.decodeResponse(row.tokens))})`,
      );
    const pick = sampleToken(logits, opts, rng, allowed);
    row.tokens.push(pick.token);
    row.logprobs.push(pick.logprob);
    if (this.options.endTokens.includes(pick.token)) {
      row.done = true;
      row.finish = 'stop';
    } else if (opts.stop && opts.stop.length > 0) {
      const text = this.tokenizer.decode(row.tokens);
      if (opts.stop.some((s) => text.includes(s))) {
        row.done = true;
        row.finish = 'stop';
      }
    }
  }

  /** Drops the prefix caches of these keys (their episodes ended). */
  releaseCache(keys: readonly string[]): void {
    this.kvCache.delete(keys);
  }

  /** Drops every prefix cache. */
  clearCache(): void {
    this.kvCache.clear();
  }

  /** What the prefix caches hold and how much they saved. */
  prefillCounts(): { prefilledTokens: number; reusedTokens: number } {
    const c = this.kvCache.counters;
    return { prefilledTokens: c.prefilledTokens, reusedTokens: c.reusedTokens };
  }

  cacheStats(): KvCacheStats {
    return this.kvCache.stats();
  }

  /**
   * Identifies the current weights: tfjs never writes a buffer in place (an update gives a variable
   * a new data id), so cached keys/values are valid exactly while these ids are the same.
   */
  private weightsIdentity(): object[] {
    const vars = [...this.model.params.values(), ...(this.model.lora ? this.model.lora.variables().values() : [])];
    return vars.map((v) => v.dataId);
  }

  /**
   * Rows grouped so that each group's keys/values (rows × widest reused prefix + widest new part +
   * maxTokens) fit the heap; rows with similar numbers of new tokens go together (less padding).
   */
  private generationGroups(prompts: number[][], reuse: Reuse[], maxTokens: number): number[][] {
    const perToken = kvBytesPerToken(this.model.config);
    const budget =
      this.workingBytes() - chunkReserveBytes(this.chunks) - this.chunks.prefillTokens * inferenceBytesPerToken(this.model.config);
    const fresh = (b: number) => prompts[b].length - reuse[b].length;
    prompts.forEach((p, b) => {
      const need = (p.length + maxTokens) * perToken;
      if (need > budget) {
        const fits = Math.max(0, Math.floor(budget / perToken) - maxTokens);
        throw new Error(
          `generate: prompt ${b} (${p.length} tokens + ${maxTokens} to generate) needs ${formatBytes(need)} of keys/values, but the wasm heap has room for ` +
            `${formatBytes(Math.max(0, budget))} (prompts up to ${fits} tokens); ${this.tooBigHint(p.length + maxTokens)}`,
        );
      }
    });
    const order = prompts.map((_, b) => b).sort((a, b) => fresh(b) - fresh(a) || a - b);
    const groups: number[][] = [];
    let current: number[] = [];
    let widestReuse = 0;
    let widestFresh = 0;
    for (const b of order) {
      const r = Math.max(widestReuse, reuse[b].length);
      const n = Math.max(widestFresh, fresh(b));
      if (current.length > 0 && (current.length + 1) * (r + n + maxTokens) * perToken > budget) {
        groups.push(current);
        current = [];
        widestReuse = 0;
        widestFresh = 0;
      }
      current.push(b);
      widestReuse = Math.max(widestReuse, reuse[b].length);
      widestFresh = Math.max(widestFresh, fresh(b));
    }
    if (current.length > 0) groups.push(current);
    return groups;
  }

  /**
   * Generates for one group of rows: uploads the reused prefixes, prefills the new tokens in
   * chunks (one layer at a time), decodes, and stores keyed rows' keys/values back.
   *
   * Columns of every layer's keys: [reused prefix: R] [new prompt tokens, right-aligned: N] [generated: up to maxTokens].
   */
  private async generateGroup(rows: number[], call: GenerationCall): Promise<void> {
    const { prompts, reuse } = call;
    const r = rows.map((b) => reuse[b].length);
    const n = rows.map((b, j) => prompts[b].length - r[j]);
    const N = Math.max(...n);
    const at: GroupLayout = { rows, G: rows.length, r, n, R: Math.max(...r), N, offset: n.map((nj) => N - nj) };
    const layers = this.model.config.num_hidden_layers;
    // Per layer: [prefix block?, new-token block(s)...]; the generated tokens' keys go to `tail`.
    const blocks: LayerCache[][] = Array.from({ length: layers }, () => []);
    const tail: (LayerCache | null)[] = Array(layers).fill(null);
    try {
      if (at.R > 0) this.uploadPrefixes(at, reuse, blocks);
      const logits = await this.prefill(at, prompts, { blocks, signal: call.signal });
      // One block for all new tokens, so every decode step multiplies by few blocks.
      for (let l = 0; l < layers; l++) {
        const fresh = blocks[l].slice(at.R > 0 ? 1 : 0);
        if (fresh.length > 1) {
          const merged = {
            k: tf.concat(
              fresh.map((x) => x.k),
              2,
            ) as tf.Tensor4D,
            v: tf.concat(
              fresh.map((x) => x.v),
              2,
            ) as tf.Tensor4D,
          };
          for (const x of fresh) tf.dispose([x.k, x.v]);
          blocks[l] = [...blocks[l].slice(0, at.R > 0 ? 1 : 0), merged];
        }
      }
      const fed = await this.decode(at, call, { blocks, tail, logits });
      const keyed = rows.map((b, j) => ({ b, j, key: call.keys?.[b] })).filter((x) => x.key !== null && x.key !== undefined);
      const storing = performance.now();
      if (keyed.length > 0)
        this.storeCaches(
          keyed as { b: number; j: number; key: string }[],
          prompts,
          reuse,
          call.out,
          blocks,
          tail,
          { ...at, ...fed },
          call.weights,
        );
      this.kvCache.counters.copyMs += performance.now() - storing;
    } finally {
      for (const bl of blocks) for (const x of bl) tf.dispose([x.k, x.v]);
      for (const x of tail) if (x) tf.dispose([x.k, x.v]);
    }
  }

  /** The group's reused prefixes, copied from the prefix caches into one block per layer. */
  private uploadPrefixes(at: GroupLayout, reuse: Reuse[], blocks: LayerCache[][]): void {
    const c = this.model.config;
    const H = c.num_key_value_heads;
    const D = headDim(c);
    const { G, R, r } = at;
    const started = performance.now();
    for (let l = 0; l < c.num_hidden_layers; l++) {
      const k = new Float32Array(G * H * R * D);
      const v = new Float32Array(G * H * R * D);
      at.rows.forEach((b, j) => {
        if (r[j] > 0) this.kvCache.copyPrefix(reuse[b].entry!, r[j], l, k, v, j, R);
      });
      blocks[l].push({ k: tf.tensor4d(k, [G, H, R, D]), v: tf.tensor4d(v, [G, H, R, D]) });
    }
    this.kvCache.counters.copyMs += performance.now() - started;
  }

  /** Runs the group's new prompt tokens in chunks, keeping their keys/values; returns the logits of each row's last token. */
  private async prefill(
    at: GroupLayout,
    prompts: number[][],
    o: { blocks: LayerCache[][]; signal: AbortSignal | undefined },
  ): Promise<Float32Array> {
    const { blocks } = o;
    const { rows, G, r, R, N, offset } = at;
    const pad = this.options.padToken;
    const heads = this.model.config.num_attention_heads;
    const chunk = Math.max(
      1,
      Math.min(N, Math.floor(this.chunks.prefillTokens / G), Math.floor(this.chunks.attentionElements / (G * heads * (R + N)))),
    );
    let logits: Float32Array | null = null;
    for (let t0 = 0; t0 < N; t0 += chunk) {
      if (t0 > 0) await turnBetweenChunks(o.signal);
      const t1 = Math.min(N, t0 + chunk);
      const T = t1 - t0;
      const S = R + t1;
      const ids = new Int32Array(G * T).fill(pad);
      const pos = new Int32Array(G * T);
      const mask = new Float32Array(G * T * S).fill(MASKED);
      rows.forEach((b, j) => {
        for (let t = t0; t < t1; t++) {
          const at = j * T + (t - t0);
          if (t < offset[j]) continue; // padding column: attends to nothing it could harm
          ids[at] = prompts[b][r[j] + t - offset[j]];
          pos[at] = r[j] + t - offset[j];
          const row = at * S;
          // Its own reused prefix, then its new tokens up to itself.
          for (let col = 0; col < r[j]; col++) mask[row + col] = 0;
          for (let u = offset[j]; u <= t; u++) mask[row + R + u] = 0;
        }
      });
      const last = t1 === N;
      const result = this.runLayers(ids, pos, mask, G, T, S, blocks, (l, kv) => blocks[l].push(kv), last);
      if (last) logits = result;
      this.kvCache.counters.prefilledTokens += offset.reduce((a, off) => a + Math.max(0, t1 - Math.max(t0, off)), 0);
    }
    return logits!;
  }

  /**
   * Samples up to maxTokens for every row of the group, one batched pass at a time: a pass feeds each
   * running row its last sampled token and, with jump-forward, the tokens its rule forces after it (their
   * log-probs read from the same pass). Returns the tail's columns and, per row, the tail column of each
   * response token fed back, in token order.
   */
  private async decode(
    at: GroupLayout,
    call: GenerationCall,
    kv: { blocks: LayerCache[][]; tail: (LayerCache | null)[]; logits: Float32Array },
  ): Promise<{ columns: number; fedCols: number[][] }> {
    const { rows, G, r, R, N, offset } = at;
    const { prompts, maxTokens, out, sample } = call;
    const { blocks, tail } = kv;
    const pad = this.options.padToken;
    let logits = kv.logits;
    const V = logits.length / G;
    const fedCols: number[][] = rows.map(() => []);
    // Per row: its first logits row in `logits`, and how many forced tokens it fed in the last pass.
    let first = rows.map((_, j) => j);
    let forced = rows.map(() => 0);
    let columns = 0;
    for (;;) {
      rows.forEach((b, j) => {
        for (let t = 0; t <= forced[j] && !out[b].done && out[b].tokens.length < maxTokens; t++)
          sample(b, logits.subarray((first[j] + t) * V, (first[j] + t + 1) * V));
      });
      const running = rows.map((b) => !out[b].done && out[b].tokens.length < maxTokens);
      if (!running.some(Boolean)) break;
      await yieldTo(call.signal);
      const feeds = rows.map((b, j) => {
        const toks = out[b].tokens;
        const last = toks.length > 0 ? toks[toks.length - 1] : pad;
        if (!running[j] || !call.jumpForward) return [last];
        return [last, ...forcedRun(call.rule(b), toks, maxTokens - toks.length - 1, this.options.endTokens)];
      });
      const T = Math.max(...feeds.map((f) => f.length));
      const S = R + N + columns + T;
      const ids = new Int32Array(G * T).fill(pad);
      const pos = new Int32Array(G * T);
      const mask = new Float32Array(G * T * S).fill(MASKED);
      rows.forEach((b, j) => {
        // A stopped row is fed its last token again (its answer is not read); a running one its own tokens.
        const start = running[j] ? prompts[b].length + out[b].tokens.length - 1 : prompts[b].length + columns;
        const seen = running[j] ? fedCols[j] : Array.from({ length: columns }, (_, c) => c);
        for (let t = 0; t < T; t++) {
          const row = (j * T + t) * S;
          for (let col = 0; col < r[j]; col++) mask[row + col] = 0;
          for (let u = offset[j]; u < N; u++) mask[row + R + u] = 0;
          if (t >= feeds[j].length) continue; // padding column: attends to the prompt only, read by no one
          ids[j * T + t] = feeds[j][t];
          pos[j * T + t] = start + t;
          for (const c of seen) mask[row + R + N + c] = 0;
          for (let u = 0; u <= t; u++) mask[row + R + N + columns + u] = 0;
        }
      });
      const wanted = rows.flatMap((_, j) => feeds[j].map((__, t) => j * T + t));
      logits = this.runLayers(
        ids,
        pos,
        mask,
        G,
        T,
        S,
        blocks.map((bl, l) => (tail[l] ? [...bl, tail[l]!] : bl)),
        (l, layerKv) => {
          const prev = tail[l];
          if (!prev) tail[l] = layerKv;
          else {
            tail[l] = { k: tf.concat([prev.k, layerKv.k], 2) as tf.Tensor4D, v: tf.concat([prev.v, layerKv.v], 2) as tf.Tensor4D };
            tf.dispose([prev.k, prev.v, layerKv.k, layerKv.v]);
          }
        },
        true,
        T > 1 ? wanted : undefined,
      )!;
      let at0 = 0;
      first = feeds.map((f) => (at0 += f.length) - f.length);
      forced = feeds.map((f, j) => (running[j] ? f.length - 1 : 0));
      rows.forEach((_, j) => {
        if (running[j]) feeds[j].forEach((__, t) => fedCols[j].push(columns + t));
      });
      columns += T;
    }
    return { columns, fedCols };
  }

  /**
   * Runs ids [G, T] through every layer, one layer's activations at a time, attending to `past`
   * (per layer) and to themselves; hands each layer's new keys/values to `keep`. Returns the
   * last column's logits [G·V] when asked, or those of `logitRows` (indices into the G·T columns).
   */
  private runLayers(
    ids: Int32Array,
    pos: Int32Array,
    mask: Float32Array,
    G: number,
    T: number,
    S: number,
    past: LayerCache[][],
    keep: (layer: number, kv: LayerCache) => void,
    wantLogits: boolean,
    logitRows?: number[],
  ): Float32Array | null {
    const model = this.model;
    const idsT = tf.tensor2d(ids, [G, T], 'int32');
    const posT = tf.tensor2d(pos, [G, T], 'int32');
    const maskT = tf.tensor4d(mask, [G, 1, T, S]);
    const [cos, sin] = tf.tidy(() => model.rotary(posT));
    let h = tf.tidy(() => model.embed(idsT));
    try {
      for (let l = 0; l < model.config.num_hidden_layers; l++) {
        const [next, k, v] = tf.tidy(() => {
          const step = model.layerStep(l, h, cos, sin, maskT, past[l]);
          return [step.h, step.kv.k, step.kv.v];
        });
        h.dispose();
        h = next as tf.Tensor3D;
        keep(l, { k: k as tf.Tensor4D, v: v as tf.Tensor4D });
      }
      if (!wantLogits) return null;
      if (logitRows)
        return tf.tidy(() => {
          const d = h.shape[2];
          const picked = tf.gather(h.reshape([G * T, d]), tf.tensor1d(logitRows, 'int32')).reshape([1, logitRows.length, d]) as tf.Tensor3D;
          return model.logits(model.finalNorm(picked).reshape([logitRows.length, d]) as tf.Tensor2D).dataSync() as Float32Array;
        });
      return tf.tidy(() => {
        const d = h.shape[2];
        const lastHidden = model.finalNorm(h.slice([0, T - 1, 0], [G, 1, d])).reshape([G, d]) as tf.Tensor2D;
        return model.logits(lastHidden).dataSync() as Float32Array;
      });
    } finally {
      tf.dispose([idsT, posT, maskT, cos, sin, h]);
    }
  }

  /** Stores, per keyed row, the keys/values of its prompt and of the generated tokens that were fed back. */
  private storeCaches(
    keyed: { b: number; j: number; key: string }[],
    prompts: number[][],
    reuse: Reuse[],
    out: RowState[],
    blocks: LayerCache[][],
    tail: (LayerCache | null)[],
    g: { R: number; N: number; r: number[]; n: number[]; offset: number[]; columns: number; fedCols: number[][] },
    weights: object[],
  ): void {
    const c = this.model.config;
    const layers = c.num_hidden_layers;
    const H = c.num_key_value_heads;
    const D = headDim(c);
    const { N, columns, fedCols } = g;
    // The generated tokens that were fed back (not the last one sampled: its keys were never computed).
    const fed = keyed.map(({ b, j }) => Math.min(fedCols[j].length, out[b].tokens.length));
    const segs = keyed.map(({ j }, i) => new Float32Array(layers * 2 * H * (g.n[j] + fed[i]) * D));
    for (let l = 0; l < layers; l++) {
      const fresh = blocks[l][blocks[l].length - 1];
      for (const [kind, which] of [
        [0, 'k'],
        [1, 'v'],
      ] as const) {
        const newData = fresh[which].dataSync() as Float32Array; // [G, H, N, D]
        const tailData = tail[l] ? (tail[l]![which].dataSync() as Float32Array) : null; // [G, H, columns, D]
        keyed.forEach(({ j }, i) => {
          const len = g.n[j] + fed[i];
          const seg = segs[i];
          for (let h = 0; h < H; h++) {
            const to = ((l * 2 + kind) * H + h) * len * D;
            const from = ((j * H + h) * N + g.offset[j]) * D;
            seg.set(newData.subarray(from, from + g.n[j] * D), to);
            for (let k = 0; k < fed[i]; k++) {
              const tf0 = ((j * H + h) * columns + fedCols[j][k]) * D;
              seg.set(tailData!.subarray(tf0, tf0 + D), to + (g.n[j] + k) * D);
            }
          }
        });
      }
    }
    keyed.forEach(({ b, j, key }, i) => {
      const prev = reuse[b];
      const kept: KvSegment[] = prev.entry ? this.kvCache.truncate(prev.entry.segments, g.r[j]) : [];
      const segment: KvSegment = { start: g.r[j], length: g.n[j] + fed[i], data: segs[i] };
      this.kvCache.set(key, { tokens: [...prompts[b], ...out[b].tokens.slice(0, fed[i])], segments: [...kept, segment], weights });
    });
  }

  /** Recomputes the whole padded batch for every token (no KV cache): the slow reference for tests. */
  private async generateWithoutCache(
    prompts: number[][],
    maxTokens: number,
    out: RowState[],
    sample: (b: number, logits: Float32Array) => void,
    signal?: AbortSignal,
  ): Promise<void> {
    for (let step = 0; step < maxTokens; step++) {
      if (step > 0) await yieldTo(signal);
      const rows = prompts.map((p, b) => [...p, ...out[b].tokens]);
      const logits = this.lastLogitsPlain(rows);
      const V = logits.length / rows.length;
      prompts.forEach((_, b) => sample(b, logits.subarray(b * V, (b + 1) * V)));
      if (out.every((r) => r.done)) break;
    }
  }

  /** Last-column logits of left-padded rows through Qwen2Model.forward, [B·V]. */
  private lastLogitsPlain(rows: number[][]): Float32Array {
    const B = rows.length;
    const L = Math.max(...rows.map((r) => r.length));
    const ids = new Int32Array(B * L).fill(this.options.padToken);
    const pos = new Int32Array(B * L);
    const valid = new Uint8Array(B * L);
    rows.forEach((row, b) => {
      const offset = L - row.length;
      row.forEach((tok, j) => {
        ids[b * L + offset + j] = tok;
        pos[b * L + offset + j] = j;
        valid[b * L + offset + j] = 1;
      });
    });
    const mask = new Float32Array(B * L * L);
    for (let b = 0; b < B; b++)
      for (let q = 0; q < L; q++) for (let k = 0; k < L; k++) mask[(b * L + q) * L + k] = k <= q && valid[b * L + k] ? 0 : MASKED;
    return tf.tidy(() => {
      const { hidden } = this.model.forward(
        tf.tensor2d(ids, [B, L], 'int32'),
        tf.tensor2d(pos, [B, L], 'int32'),
        tf.tensor4d(mask, [B, 1, L, L]),
      );
      const lastHidden = hidden.slice([0, L - 1, 0], [B, 1, hidden.shape[2]]).reshape([B, hidden.shape[2]]) as tf.Tensor2D;
      return this.model.logits(lastHidden).dataSync() as Float32Array;
    });
  }

  private decodeResponse(tokens: number[]): string {
    const body = tokens.length > 0 && this.options.endTokens.includes(tokens[tokens.length - 1]) ? tokens.slice(0, -1) : tokens;
    return this.tokenizer.decode(body);
  }

  // ---------------------------------------------------------------- scoring

  async logprobs(batch: ScoredSequence[], temperature = 1): Promise<number[][]> {
    batch.forEach((s, i) => scoredPositions(s, `logprobs: sequence ${i}`));
    const result: number[][] = new Array(batch.length);
    for (const group of this.microBatches(batch, inferenceBytesPerToken(this.model.config), 'logprobs')) {
      const seqs = group.map((i) => batch[i]);
      const flat = tf.tidy(() =>
        responseLogprobs(this.model, seqs, temperature, this.options.padToken, this.chunks, {
          differentiable: false,
          checkpoint: false,
        }).dataSync(),
      );
      let at = 0;
      for (const i of group) {
        const n = scoredPositions(batch[i], '').length;
        result[i] = Array.from(flat.subarray(at, at + n));
        at += n;
      }
    }
    return result;
  }

  /**
   * Groups of indices, sorted by length so padding stays small, each within the token budget and
   * within the heap at `bytesPerToken` of padded tokens. A sequence too long to fit alone is refused
   * before any work.
   */
  private microBatches(batch: ScoredSequence[], bytesPerToken: number, what: string, budget = this.passBudget()): number[][] {
    const fitTokens = Math.floor(budget / bytesPerToken);
    batch.forEach((s, i) => {
      const n = seqLen(s);
      if (n > fitTokens) {
        throw new Error(
          `${what}: sequence ${i} has ${n} tokens, but the wasm heap has room for ${Math.max(0, fitTokens)} tokens per pass of this model ` +
            `(${formatBytes(bytesPerToken)} per token, ${formatBytes(Math.max(0, budget))} free); ${this.tooBigHint(n)}`,
        );
      }
    });
    const cap = Math.min(fitTokens, this.options.microBatchTokens);
    const order = batch.map((_, i) => i).sort((a, b) => seqLen(batch[a]) - seqLen(batch[b]));
    const groups: number[][] = [];
    let current: number[] = [];
    for (const i of order) {
      const width = seqLen(batch[i]);
      if (current.length > 0 && (current.length + 1) * width > cap) {
        groups.push(current);
        current = [];
      }
      current.push(i);
    }
    if (current.length > 0) groups.push(current);
    return groups;
  }

  /** Heap bytes a scoring or training pass may use for its activations. */
  private passBudget(): number {
    return this.workingBytes() - chunkReserveBytes(this.chunks);
  }

  // ---------------------------------------------------------------- training

  async trainStep(batch: TrainSequence[], objective: ObjectiveConfig, temperature = 1, lr?: number): Promise<TrainStats> {
    batch.forEach((s, i) => checkTrainSequence(s, i, objective));
    // With LoRA only the adapters are differentiated and updated, so the optimiser never holds
    // state for a base weight.
    const trainable = this.model.trainableParams();
    const params = [...trainable.values()];
    const gradSums = new Map<string, tf.Tensor>();
    let lossSum = 0;
    let tokens = 0;
    let clipped = 0;
    let ratioSum = 0;
    let klSum = 0;
    const lora = this.model.lora?.config ?? null;
    const budget = this.passBudget();
    const plainPerToken = plainTrainingBytesPerToken(this.model.config, lora);
    for (const group of this.microBatches(batch, trainingBytesPerToken(this.model.config, lora), 'trainStep', budget)) {
      const seqs = group.map((i) => batch[i]);
      // Checkpointed layers cost a recomputation; only a micro-batch that would not fit otherwise pays it.
      const checkpoint =
        this.options.checkpointLayers === 'always' || group.length * Math.max(...seqs.map(seqLen)) * plainPerToken > budget;
      if (seqs.every((s) => scoredPositions(s, '').length === 0)) continue;
      const { grads, stats } = this.microBatchGradients(seqs, { objective, temperature, checkpoint, params });
      const [l, n, c, r, k] = stats;
      lossSum += l;
      tokens += n;
      clipped += c;
      ratioSum += r;
      klSum += k;
      // variableGrads keys gradients by tfjs variable name, which is not the parameter's name.
      for (const [name, variable] of trainable) {
        const g = grads[variable.name];
        if (!g) continue;
        const prev = gradSums.get(name);
        if (prev) {
          gradSums.set(name, tf.keep(prev.add(g)));
          prev.dispose();
          g.dispose();
        } else gradSums.set(name, g);
      }
    }
    // Token mean over the whole batch: the sums are exact, so divide once at the end.
    const denom = Math.max(1, tokens);
    const gradNorm =
      gradSums.size === 0
        ? 0
        : tf.tidy(() => Math.sqrt(tf.addN([...gradSums.values()].map((g) => g.square().sum())).dataSync()[0]) / denom);
    const scale = (this.options.maxGradNorm > 0 && gradNorm > this.options.maxGradNorm ? this.options.maxGradNorm / gradNorm : 1) / denom;
    try {
      if (tokens > 0) this.optimizer.apply(trainable, gradSums, lr, scale);
    } finally {
      tf.dispose([...gradSums.values()]);
    }
    return { loss: lossSum / denom, tokens, clipFraction: clipped / denom, meanRatio: ratioSum / denom, kl: klSum / denom, gradNorm };
  }
  /**
   * One micro-batch's gradients of the objective's loss sum (exact sums, divided once per step), with
   * its loss, token, clip, ratio and KL sums.
   */
  private microBatchGradients(
    seqs: TrainSequence[],
    o: { objective: ObjectiveConfig; temperature: number; checkpoint: boolean; params: tf.Variable[] },
  ): { grads: tf.NamedTensorMap; stats: number[] } {
    const { objective } = o;
    let stats: tf.Tensor[] = [];
    this.model.training = true;
    let result: { value: tf.Scalar; grads: tf.NamedTensorMap };
    try {
      result = tf.variableGrads(() => {
        const logp = responseLogprobs(this.model, seqs, o.temperature, this.options.padToken, this.chunks, {
          differentiable: true,
          checkpoint: o.checkpoint,
        });
        const flat = (pick: (s: TrainSequence) => number[]) => tf.tensor1d(seqs.flatMap(pick));
        const terms = objectiveTerms(
          {
            logp,
            oldLogp: flat((s) => s.oldLogprobs),
            advantages: flat((s) => s.advantages),
            mask: flat((s) => s.mask),
            refLogp: objective.klCoef > 0 ? flat((s) => s.refLogprobs ?? s.oldLogprobs) : undefined,
            lowProbScope:
              objective.lowProbDelta !== null ? flat((s) => s.advantages.map(() => (s.lowProbMask === false ? 0 : 1))) : undefined,
          },
          objective,
        );
        stats = [terms.lossSum, terms.tokens, terms.clipped, terms.ratioSum, terms.klSum].map((t) => tf.keep(t.clone()));
        return terms.lossSum as tf.Scalar;
      }, o.params);
    } finally {
      this.model.training = false;
    }
    const { value, grads } = result;
    const sums = stats.map((t) => t.dataSync()[0]);
    tf.dispose([...stats, value]);
    return { grads, stats: sums };
  }

  async save(dir: string): Promise<void> {
    const { saveModelDir } = await import('./checkpoint.ts');
    await saveModelDir(dir, this.model, this.tokenizer);
  }

  dispose(): void {
    this.kvCache.clear();
    this.model.dispose();
    this.optimizer.dispose();
  }
}

/**
 * The tokens `rule` forces after `tokens`, one allowed token at a time, at most `limit`; stops before an
 * end token (sampled from the pass's last column, where the row's finish is decided as usual).
 */
function forcedRun(rule: TokenConstraint | null, tokens: readonly number[], limit: number, endTokens: readonly number[]): number[] {
  const run: number[] = [];
  if (!rule) return run;
  const prefix = [...tokens];
  while (run.length < limit) {
    const allowed = rule.allowedAfter(prefix);
    if (allowed.length !== 1 || endTokens.includes(allowed[0])) break;
    run.push(allowed[0]);
    prefix.push(allowed[0]);
  }
  return run;
}

function seqLen(s: ScoredSequence): number {
  return s.prompt.length + s.response.length;
}

/**
 * Indices into `response` of the tokens that are scored: all of them, or those `policyTokens`
 * marks 1 (a packed episode). Throws, prefixed with `where`, when policyTokens is malformed.
 */
export function scoredPositions(s: ScoredSequence, where: string): number[] {
  // Trunk plus branches is the PyTorch worker's (supportsBranches); the trainer sends this engine one sequence per tipped step.
  if (s.branches?.length) throw new Error(`${where}: the TypeScript engine does not take trunk-plus-branches sequences (branches)`);
  const p = s.policyTokens;
  if (p === undefined) return s.response.map((_, j) => j);
  if (!Array.isArray(p) || p.length !== s.response.length)
    throw new Error(
      `${where}: policyTokens has ${Array.isArray(p) ? p.length : typeof p} entries but the response has ${s.response.length} tokens`,
    );
  const out: number[] = [];
  p.forEach((x, j) => {
    if (x !== 0 && x !== 1) throw new Error(`${where}: policyTokens[${j}] is ${JSON.stringify(x)}, not 0 or 1`);
    if (x === 1) out.push(j);
  });
  return out;
}

/** Per-token arrays must have one value per scored token; says which sequence and array are off. */
function checkTrainSequence(s: TrainSequence, i: number, objective: ObjectiveConfig): void {
  const where = `trainStep: sequence ${i}`;
  const n = scoredPositions(s, where).length;
  const unit = s.policyTokens ? 'policy token' : 'response token';
  const arrays: [string, number[] | undefined][] = [
    ['advantages', s.advantages],
    ['oldLogprobs', s.oldLogprobs],
    ['mask', s.mask],
  ];
  if (objective.klCoef > 0 && s.refLogprobs) arrays.push(['refLogprobs', s.refLogprobs]);
  for (const [name, a] of arrays) {
    if (!Array.isArray(a) || a.length !== n)
      throw new Error(`${where}: "${name}" has ${Array.isArray(a) ? a.length : 'no'} values, expected ${n} (one per ${unit})`);
  }
}

/**
 * log π(token | everything before it) for every scored response token of every sequence (all of
 * them, or the policy tokens of a packed episode), flattened in order, [Σ scored tokens].
 * Differentiable with respect to the model's variables unless `pass.differentiable` is false;
 * memory is bounded as in hiddenStates (checkpointed layers with `pass.checkpoint`) and
 * tokenLogprobs (only scored positions go through the output layer).
 */
export function responseLogprobs(
  model: Qwen2Model,
  seqs: ScoredSequence[],
  temperature: number,
  padToken: number,
  chunks: ChunkSizes = DEFAULT_CHUNKS,
  pass: { differentiable: boolean; checkpoint: boolean } = { differentiable: true, checkpoint: false },
): tf.Tensor1D {
  const B = seqs.length;
  const L = Math.max(...seqs.map(seqLen));
  const ids = new Int32Array(B * L).fill(padToken);
  const pos = new Int32Array(B * L);
  const rowsOfHidden: number[] = [];
  const targets: number[] = [];
  seqs.forEach((s, b) => {
    if (s.prompt.length === 0) throw new Error(`scoring: sequence ${b} has an empty prompt`);
    const full = [...s.prompt, ...s.response];
    full.forEach((tok, j) => {
      ids[b * L + j] = tok;
      pos[b * L + j] = j;
    });
    for (const j of scoredPositions(s, `scoring: sequence ${b}`)) {
      rowsOfHidden.push(b * L + s.prompt.length + j - 1);
      targets.push(s.response[j]);
    }
  });
  const causal = new Float32Array(L * L);
  for (let q = 0; q < L; q++) for (let k = 0; k < L; k++) causal[q * L + k] = k <= q ? 0 : MASKED;
  const hidden = model.hiddenStates(
    tf.tensor2d(ids, [B, L], 'int32'),
    tf.tensor2d(pos, [B, L], 'int32'),
    tf.tensor4d(causal, [1, 1, L, L]),
    chunks.attentionElements,
    pass,
  );
  const d = hidden.shape[2];
  const picked = tf.gather(hidden.reshape([B * L, d]), tf.tensor1d(rowsOfHidden, 'int32')) as tf.Tensor2D;
  return model.tokenLogprobs(picked, targets, temperature, chunks.logitElements);
}
