/**
 * The in-process policy engine: a Qwen2/Llama model on TensorFlow.js that samples actions in
 * batches with a KV cache, scores responses (per-token log-probs) and takes optimiser steps on the
 * clipped objective. All batching is padded: left padding for generation (so every row's next
 * token is in the same column), right padding for scoring (a causal mask then keeps padding
 * invisible to real tokens).
 */
import { tf } from './backend.ts';
import { Qwen2Model, type LayerCache } from './qwen2.ts';
import { AdamW, type AdamWConfig } from './adamw.ts';
import type { LoraConfig } from './lora.ts';
import { TokenTrie } from '../constrained.ts';
import { sampleToken } from '../sampling.ts';
import { objectiveTerms, type ObjectiveConfig } from '../../algo/objective.ts';
import { Rng } from '../../util/rng.ts';
import { turnEventLoop } from '../../util/event-loop.ts';
import type { Generation, GenerateOptions, PolicyEngine, ScoredSequence, TextTokenizer, TrainSequence, TrainStats } from '../types.ts';

const MASKED = -1e9;

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
}

export class TfjsEngine implements PolicyEngine {
  readonly optimizer: AdamW;

  constructor(
    readonly model: Qwen2Model,
    readonly tokenizer: TextTokenizer,
    readonly options: EngineOptions,
  ) {
    if (options.endTokens.length === 0) throw new Error('engine: at least one end token id is needed');
    this.optimizer = new AdamW(options.optimizer);
    if (options.lora && !model.lora) model.attachLora(options.lora, options.loraSeed ?? 0);
  }

  // ---------------------------------------------------------------- generation

  async generate(prompts: number[][], opts: GenerateOptions & { useCache?: boolean }): Promise<Generation[]> {
    const B = prompts.length;
    if (B === 0) return [];
    prompts.forEach((p, i) => {
      if (p.length === 0) throw new Error(`generate: prompt ${i} is empty`);
    });
    // Long prompts (tips, full histories) in a large batch would exhaust the wasm heap in the
    // prefill's attention; such batches run in chunks, each with its own derived seed.
    const chunks = this.attentionChunks(prompts.map((p) => p.length + opts.maxTokens), 1);
    if (chunks.length > 1) {
      const out: Generation[] = new Array(B);
      for (const [k, chunk] of chunks.entries()) {
        const gens = await this.generate(
          chunk.map((i) => prompts[i]),
          { ...opts, seed: opts.seed * 31 + 7919 * (k + 1), allowedTexts: opts.allowedTexts ? chunk.map((i) => opts.allowedTexts![i]) : undefined },
        );
        chunk.forEach((i, j) => (out[i] = gens[j]));
      }
      return out;
    }
    const rng = new Rng(opts.seed);
    const endToken = this.options.endTokens[0];
    const tries = (opts.allowedTexts ?? []).map((texts) =>
      texts && texts.length > 0 ? TokenTrie.fromTexts(texts, (t) => this.tokenizer.encode(t), endToken) : null,
    );
    const L = Math.max(...prompts.map((p) => p.length));
    const out: { tokens: number[]; logprobs: number[]; done: boolean; finish: 'stop' | 'length' }[] = prompts.map(() => ({ tokens: [], logprobs: [], done: false, finish: 'length' }));
    const useCache = opts.useCache ?? true;

    let cache: LayerCache[] | undefined;
    opts.signal?.throwIfAborted();
    let logits = this.prefill(prompts, L, useCache, (c) => (cache = c));
    for (let step = 0; step < opts.maxTokens; step++) {
      const V = logits.length / B;
      for (let b = 0; b < B; b++) {
        const row = out[b];
        if (row.done) continue;
        const trie = tries[b];
        const allowed = trie ? trie.allowedAfter(row.tokens) : null;
        const pick = sampleToken(logits.subarray(b * V, (b + 1) * V), opts, rng, allowed);
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
      if (out.every((r) => r.done) || step === opts.maxTokens - 1) break;
      if (opts.signal) {
        await turnEventLoop();
        if (opts.signal.aborted) {
          if (cache) for (const c of cache) tf.dispose([c.k, c.v]);
          throw opts.signal.reason;
        }
      }
      const last = out.map((r) => (r.tokens.length > 0 ? r.tokens[r.tokens.length - 1] : this.options.padToken));
      logits = useCache
        ? this.decodeStep(prompts, L, step, last, cache!, (c) => (cache = c))
        : this.prefill(prompts.map((p, b) => [...p, ...out[b].tokens]), L + step + 1, false, () => {});
    }
    if (cache) for (const c of cache) tf.dispose([c.k, c.v]);
    return out.map((r) => ({ tokens: r.tokens, logprobs: r.logprobs, text: this.decodeResponse(r.tokens), finish: r.finish }));
  }

  private decodeResponse(tokens: number[]): string {
    const body = tokens.length > 0 && this.options.endTokens.includes(tokens[tokens.length - 1]) ? tokens.slice(0, -1) : tokens;
    return this.tokenizer.decode(body);
  }

  /**
   * Runs the padded prompts (left-padded to width L) and returns the logits of the last column,
   * [B*V] on the host. Rows may carry generated tokens after the prompt (the no-cache path).
   */
  private prefill(rows: number[][], L: number, keepCache: boolean, setCache: (c: LayerCache[]) => void): Float32Array {
    const B = rows.length;
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
      for (let q = 0; q < L; q++)
        for (let k = 0; k < L; k++) mask[(b * L + q) * L + k] = k <= q && valid[b * L + k] ? 0 : MASKED;
    return tf.tidy(() => {
      const { hidden, cache } = this.model.forward(tf.tensor2d(ids, [B, L], 'int32'), tf.tensor2d(pos, [B, L], 'int32'), tf.tensor4d(mask, [B, 1, L, L]));
      if (keepCache) {
        for (const c of cache) tf.keep(c.k), tf.keep(c.v);
        setCache(cache);
      }
      const lastHidden = hidden.slice([0, L - 1, 0], [B, 1, hidden.shape[2]]).reshape([B, hidden.shape[2]]) as tf.Tensor2D;
      return this.model.logits(lastHidden).dataSync() as Float32Array;
    });
  }

  private decodeStep(prompts: number[][], L: number, step: number, last: number[], cache: LayerCache[], setCache: (c: LayerCache[]) => void): Float32Array {
    const B = prompts.length;
    const S = L + step + 1; // keys after appending this token
    const mask = new Float32Array(B * S);
    const pos = new Int32Array(B);
    prompts.forEach((p, b) => {
      const offset = L - p.length;
      for (let k = 0; k < S; k++) mask[b * S + k] = k >= offset ? 0 : MASKED;
      pos[b] = p.length + step;
    });
    const result = tf.tidy(() => {
      const { hidden, cache: next } = this.model.forward(tf.tensor2d(last, [B, 1], 'int32'), tf.tensor2d(pos, [B, 1], 'int32'), tf.tensor4d(mask, [B, 1, 1, S]), cache);
      for (const c of next) tf.keep(c.k), tf.keep(c.v);
      setCache(next);
      return this.model.logits(hidden.reshape([B, hidden.shape[2]]) as tf.Tensor2D).dataSync() as Float32Array;
    });
    for (const c of cache) tf.dispose([c.k, c.v]);
    return result;
  }

  // ---------------------------------------------------------------- scoring

  async logprobs(batch: ScoredSequence[], temperature = 1): Promise<number[][]> {
    const result: number[][] = new Array(batch.length);
    for (const group of this.microBatches(batch)) {
      const flat = tf.tidy(() => responseLogprobs(this.model, group.map((i) => batch[i]), temperature, this.options.padToken).dataSync());
      let at = 0;
      for (const i of group) {
        const n = batch[i].response.length;
        result[i] = Array.from(flat.subarray(at, at + n));
        at += n;
      }
    }
    return result;
  }

  /**
   * Consecutive groups of rows whose attention scores (rows × heads × width², times `layers` when
   * a backward pass keeps every layer's) stay within ATTENTION_BUDGET elements.
   */
  private attentionChunks(widths: number[], layers: number): number[][] {
    const heads = this.model.config.num_attention_heads;
    const groups: number[][] = [];
    let current: number[] = [];
    let widest = 0;
    widths.forEach((w, i) => {
      const next = Math.max(widest, w);
      if (current.length > 0 && (current.length + 1) * heads * next * next * layers > ATTENTION_BUDGET) {
        groups.push(current);
        current = [];
        widest = 0;
      }
      current.push(i);
      widest = Math.max(widest, w);
    });
    if (current.length > 0) groups.push(current);
    return groups;
  }

  /** Groups of indices, sorted by length so padding stays small, each within the token and attention budgets. */
  private microBatches(batch: ScoredSequence[]): number[][] {
    const order = batch.map((_, i) => i).sort((a, b) => seqLen(batch[a]) - seqLen(batch[b]));
    const groups: number[][] = [];
    let current: number[] = [];
    const attentionPerRow = (w: number) => this.model.config.num_attention_heads * w * w * this.model.config.num_hidden_layers;
    for (const i of order) {
      const width = seqLen(batch[i]);
      if (current.length > 0 && ((current.length + 1) * width > this.options.microBatchTokens || (current.length + 1) * attentionPerRow(width) > ATTENTION_BUDGET)) {
        groups.push(current);
        current = [];
      }
      current.push(i);
    }
    if (current.length > 0) groups.push(current);
    return groups;
  }

  // ---------------------------------------------------------------- training

  async trainStep(batch: TrainSequence[], objective: ObjectiveConfig, temperature = 1, lr?: number): Promise<TrainStats> {
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
    for (const group of this.microBatches(batch)) {
      const seqs = group.map((i) => batch[i]);
      if (seqs.every((s) => s.response.length === 0)) continue;
      let stats: tf.Tensor[] = [];
      this.model.training = true;
      let result: { value: tf.Scalar; grads: tf.NamedTensorMap };
      try {
        result = tf.variableGrads(() => {
          const logp = responseLogprobs(this.model, seqs, temperature, this.options.padToken);
          const flat = (pick: (s: TrainSequence) => number[]) => tf.tensor1d(seqs.flatMap(pick));
          const terms = objectiveTerms(
            {
              logp,
              oldLogp: flat((s) => s.oldLogprobs),
              advantages: flat((s) => s.advantages),
              mask: flat((s) => s.mask),
              refLogp: objective.klCoef > 0 ? flat((s) => s.refLogprobs ?? s.oldLogprobs) : undefined,
              lowProbScope: objective.lowProbDelta !== null ? flat((s) => s.response.map(() => (s.lowProbMask === false ? 0 : 1))) : undefined,
            },
            objective,
          );
          stats = [terms.lossSum, terms.tokens, terms.clipped, terms.ratioSum, terms.klSum].map((t) => tf.keep(t.clone()));
          return terms.lossSum as tf.Scalar;
        }, params);
      } finally {
        this.model.training = false;
      }
      const { value, grads } = result;
      const [l, n, c, r, k] = stats.map((t) => t.dataSync()[0]);
      tf.dispose([...stats, value]);
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
    const gradNorm = tf.tidy(() => Math.sqrt(tf.addN([...gradSums.values()].map((g) => g.square().sum())).dataSync()[0]) / denom);
    const scale = (this.options.maxGradNorm > 0 && gradNorm > this.options.maxGradNorm ? this.options.maxGradNorm / gradNorm : 1) / denom;
    const scaled = new Map<string, tf.Tensor>();
    for (const [name, g] of gradSums) {
      scaled.set(name, tf.tidy(() => g.mul(scale)));
      g.dispose();
    }
    if (tokens > 0) this.optimizer.apply(trainable, scaled, lr);
    tf.dispose([...scaled.values()]);
    return { loss: lossSum / denom, tokens, clipFraction: clipped / denom, meanRatio: ratioSum / denom, kl: klSum / denom, gradNorm };
  }

  async save(dir: string): Promise<void> {
    const { saveModelDir } = await import('./checkpoint.ts');
    await saveModelDir(dir, this.model, this.tokenizer);
  }

  dispose(): void {
    this.model.dispose();
    this.optimizer.dispose();
  }
}

/** Attention-score elements one pass may hold (2^25 floats = 128 MiB), far below the wasm heap limit. */
const ATTENTION_BUDGET = 2 ** 25;

function seqLen(s: ScoredSequence): number {
  return s.prompt.length + s.response.length;
}

/**
 * log π(response_t | prompt, response_<t) for every response token of every sequence, flattened in
 * order, [Σ response lengths]. Differentiable with respect to the model's variables.
 */
export function responseLogprobs(model: Qwen2Model, seqs: ScoredSequence[], temperature: number, padToken: number): tf.Tensor1D {
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
    s.response.forEach((tok, j) => {
      rowsOfHidden.push(b * L + s.prompt.length + j - 1);
      targets.push(tok);
    });
  });
  const causal = new Float32Array(L * L);
  for (let q = 0; q < L; q++) for (let k = 0; k < L; k++) causal[q * L + k] = k <= q ? 0 : MASKED;
  const { hidden } = model.forward(tf.tensor2d(ids, [B, L], 'int32'), tf.tensor2d(pos, [B, L], 'int32'), tf.tensor4d(causal, [1, 1, L, L]));
  const d = hidden.shape[2];
  const n = targets.length;
  const picked = tf.gather(hidden.reshape([B * L, d]), tf.tensor1d(rowsOfHidden, 'int32')) as tf.Tensor2D;
  let logits: tf.Tensor2D = model.logits(picked);
  if (temperature !== 1) logits = logits.div(temperature);
  const V = logits.shape[1];
  const flatIdx = tf.tensor1d(targets.map((t, i) => i * V + t), 'int32');
  const targetLogits = tf.gather(logits.reshape([n * V]), flatIdx);
  return targetLogits.sub(tf.logSumExp(logits, 1)) as tf.Tensor1D;
}
