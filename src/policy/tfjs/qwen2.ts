/**
 * Decoder-only transformer of the Qwen2 / Llama family on TensorFlow.js, in the spirit of
 * Hugging Face's `modeling_qwen2.py`: RMSNorm, rotary position embeddings (rotate-half form),
 * SwiGLU MLP, grouped-query attention, tied or untied embeddings.
 *
 * Parameter names and layouts are exactly Hugging Face's (Linear weights are [out, in]), so a
 * `model.safetensors` written by `transformers` loads without renaming and ours loads there.
 */
import { tf } from './backend.ts';
import { LoraAdapters, type LoraConfig } from './lora.ts';
import { rotaryFrequencies, type RopeScaling } from './rope.ts';
import { columnsMatMul } from './native-matmul.ts';

export interface ModelConfig {
  model_type: 'qwen2' | 'llama';
  vocab_size: number;
  hidden_size: number;
  intermediate_size: number;
  num_hidden_layers: number;
  num_attention_heads: number;
  num_key_value_heads: number;
  max_position_embeddings: number;
  rms_norm_eps: number;
  rope_theta: number;
  /** Context-extension scaling of the rotary embeddings (transformers 4's `rope_scaling`); absent = unscaled. */
  rope_scaling?: RopeScaling | null;
  tie_word_embeddings: boolean;
  /** Llama only: bias on q/k/v/o projections. Qwen2 always has q/k/v bias and no o bias. */
  attention_bias?: boolean;
  /** Llama only: bias on the MLP projections. */
  mlp_bias?: boolean;
  head_dim?: number;
  initializer_range?: number;
  bos_token_id?: number | null;
  eos_token_id?: number | number[] | null;
  torch_dtype?: string;
  architectures?: string[];
}

/** Keys and values of one layer for the tokens seen so far: [batch, kvHeads, time, headDim]. */
export interface LayerCache {
  k: tf.Tensor4D;
  v: tf.Tensor4D;
}

export function headDim(c: ModelConfig): number {
  return c.head_dim ?? c.hidden_size / c.num_attention_heads;
}

/** Shapes of every parameter, by Hugging Face name. */
export function parameterShapes(c: ModelConfig): Map<string, number[]> {
  return new Map(parameterEntries(c));
}

/** parameterShapes one at a time, in the same order: a config may claim a billion layers. */
export function* parameterEntries(c: ModelConfig): Generator<[string, number[]]> {
  const d = c.hidden_size;
  const hd = headDim(c);
  const qOut = c.num_attention_heads * hd;
  const kvOut = c.num_key_value_heads * hd;
  yield ['model.embed_tokens.weight', [c.vocab_size, d]];
  const qkvBias = c.model_type === 'qwen2' || !!c.attention_bias;
  const oBias = c.model_type === 'llama' && !!c.attention_bias;
  const mlpBias = c.model_type === 'llama' && !!c.mlp_bias;
  for (let i = 0; i < c.num_hidden_layers; i++) {
    const p = `model.layers.${i}.`;
    yield [p + 'input_layernorm.weight', [d]];
    yield [p + 'self_attn.q_proj.weight', [qOut, d]];
    yield [p + 'self_attn.k_proj.weight', [kvOut, d]];
    yield [p + 'self_attn.v_proj.weight', [kvOut, d]];
    if (qkvBias) {
      yield [p + 'self_attn.q_proj.bias', [qOut]];
      yield [p + 'self_attn.k_proj.bias', [kvOut]];
      yield [p + 'self_attn.v_proj.bias', [kvOut]];
    }
    yield [p + 'self_attn.o_proj.weight', [d, qOut]];
    if (oBias) yield [p + 'self_attn.o_proj.bias', [d]];
    yield [p + 'post_attention_layernorm.weight', [d]];
    yield [p + 'mlp.gate_proj.weight', [c.intermediate_size, d]];
    yield [p + 'mlp.up_proj.weight', [c.intermediate_size, d]];
    yield [p + 'mlp.down_proj.weight', [d, c.intermediate_size]];
    if (mlpBias) {
      yield [p + 'mlp.gate_proj.bias', [c.intermediate_size]];
      yield [p + 'mlp.up_proj.bias', [c.intermediate_size]];
      yield [p + 'mlp.down_proj.bias', [d]];
    }
  }
  yield ['model.norm.weight', [d]];
  if (!c.tie_word_embeddings) yield ['lm_head.weight', [c.vocab_size, d]];
}

/**
 * The parameters parameterShapes lists, counted without listing them (a config.json may claim a
 * billion layers).
 */
export function countParameters(c: ModelConfig): number {
  const d = c.hidden_size;
  const hd = headDim(c);
  const qOut = c.num_attention_heads * hd;
  const kvOut = c.num_key_value_heads * hd;
  const ff = c.intermediate_size;
  const qkvBias = c.model_type === 'qwen2' || !!c.attention_bias;
  const oBias = c.model_type === 'llama' && !!c.attention_bias;
  const mlpBias = c.model_type === 'llama' && !!c.mlp_bias;
  const perLayer =
    2 * d + // the two norms
    (qOut + 2 * kvOut) * d +
    (qkvBias ? qOut + 2 * kvOut : 0) +
    d * qOut +
    (oBias ? d : 0) +
    3 * ff * d +
    (mlpBias ? 2 * ff + d : 0);
  return c.vocab_size * d * (c.tie_word_embeddings ? 1 : 2) + d + c.num_hidden_layers * perLayer;
}

export interface ModelOptions {
  /** Low-rank adapters on the named projections; with them only the adapters train. */
  lora?: LoraConfig;
  /** Seeds the adapters' A matrices (B starts at zero) and their dropout masks. */
  loraSeed?: number;
}

export class Qwen2Model {
  readonly config: ModelConfig;
  /** The base weights, by Hugging Face name. Frozen while LoRA adapters are attached. */
  readonly params: Map<string, tf.Variable>;
  /** LoRA adapters, or null for full fine-tuning. */
  lora: LoraAdapters | null = null;
  /**
   * True only inside a training forward pass: the one place where LoRA dropout applies. The
   * engine sets it around its loss computation; scoring and generation leave it false.
   */
  training = false;
  private readonly invFreq: tf.Tensor1D;
  private readonly rotaryScaling: number;

  constructor(config: ModelConfig, params: Map<string, tf.Variable>, options: ModelOptions = {}) {
    validateConfig(config);
    this.config = config;
    this.params = params;
    if (options.lora) this.attachLora(options.lora, options.loraSeed ?? 0);
    const rotary = rotaryFrequencies(config.rope_theta, headDim(config), config.rope_scaling);
    this.invFreq = tf.keep(tf.tensor1d(rotary.invFreq));
    this.rotaryScaling = rotary.attentionScaling;
  }

  /** Fresh weights: normal(0, initializer_range) for matrices, ones for norms, zeros for biases. */
  static random(config: ModelConfig, seed: number, options: ModelOptions = {}): Qwen2Model {
    validateConfig(config);
    const std = config.initializer_range ?? 0.02;
    const params = new Map<string, tf.Variable>();
    let k = 0;
    for (const [name, shape] of parameterShapes(config)) {
      const init = tf.tidy(() => {
        if (name.endsWith('layernorm.weight') || name === 'model.norm.weight') return tf.ones(shape);
        if (name.endsWith('.bias')) return tf.zeros(shape);
        // tfjs treats a seed of 0 as "no seed" (Math.random), so never pass 0.
        return tf.randomNormal(shape, 0, std, 'float32', seed * 1000 + k + 1);
      });
      k++;
      // tfjs keeps one global registry of variable names; leaving the name to tfjs keeps it unique,
      // so several models (policy, reference, a loaded checkpoint) can live in one process.
      params.set(name, tf.variable(init, true));
      init.dispose();
    }
    return new Qwen2Model(config, params, options);
  }

  /**
   * Adds fresh adapters (A random, B zero: the model's outputs do not change) and freezes the
   * base weights. Refuses a model that already has adapters: merge or detach them first.
   */
  attachLora(lora: LoraConfig, seed: number): LoraAdapters {
    if (this.lora) throw new Error('attachLora: the model already has LoRA adapters');
    this.lora = LoraAdapters.create(this, lora, seed);
    return this.lora;
  }

  /** Replaces the adapters by ones read from disk (see loadLoraAdapter). */
  setLora(adapters: LoraAdapters | null): void {
    if (this.lora && this.lora !== adapters) this.lora.dispose();
    this.lora = adapters;
  }

  /**
   * Puts `adapters` in place without disposing the ones it replaces, which it returns: a server
   * holding several adapters over one base switches between them per request.
   */
  swapLora(adapters: LoraAdapters | null): LoraAdapters | null {
    const previous = this.lora;
    this.lora = adapters;
    return previous;
  }

  /** What an optimiser step updates: the adapters with LoRA, every base weight without. */
  trainableParams(): Map<string, tf.Variable> {
    return this.lora ? this.lora.variables() : this.params;
  }

  /**
   * Runs `fn` with the adapters switched off: the frozen base model, i.e. the reference policy
   * for a KL penalty, without a second copy of the weights.
   */
  withoutLora<T>(fn: () => T): T {
    const lora = this.lora;
    this.lora = null;
    try {
      return fn();
    } finally {
      this.lora = lora;
    }
  }

  /** Folds the adapters into the base weights (W += scaling·B·A) and removes them. */
  mergeLora(): void {
    const lora = this.lora;
    if (!lora) throw new Error('mergeLora: the model has no LoRA adapters');
    for (const [module, ad] of lora.modules) {
      const w = this.p(module + '.weight');
      tf.tidy(() => w.assign(w.add(tf.matMul(ad.B, ad.A).mul(lora.scaling))));
    }
    lora.dispose();
    this.lora = null;
  }

  private p(name: string): tf.Variable {
    const v = this.params.get(name);
    if (!v) throw new Error(`model parameter ${name} is missing`);
    return v;
  }

  private linear(x: tf.Tensor, prefix: string): tf.Tensor {
    const w = this.p(prefix + '.weight');
    const [b, t, d] = x.shape;
    const x2d = x.reshape([b * t, d]);
    let y = tf.matMul(x2d, w, false, true);
    const bias = this.params.get(prefix + '.bias');
    if (bias) y = y.add(bias);
    const adapter = this.lora?.modules.get(prefix);
    if (adapter) y = y.add(this.lora!.delta(x2d, adapter, this.training));
    return y.reshape([b, t, w.shape[0]]);
  }

  private rmsNorm(x: tf.Tensor, name: string): tf.Tensor {
    const variance = x.square().mean(-1, true);
    return x.mul(variance.add(this.config.rms_norm_eps).rsqrt()).mul(this.p(name));
  }

  /** cos and sin of the rotary angles, [batch, time, 1, headDim], for integer positions. */
  rotary(positions: tf.Tensor2D): [tf.Tensor, tf.Tensor] {
    const angles = positions.toFloat().expandDims(-1).mul(this.invFreq); // [B,T,hd/2]
    const full = tf.concat([angles, angles], -1).expandDims(2);
    if (this.rotaryScaling === 1) return [full.cos(), full.sin()];
    return [full.cos().mul(this.rotaryScaling), full.sin().mul(this.rotaryScaling)];
  }

  private applyRotary(x: tf.Tensor, cos: tf.Tensor, sin: tf.Tensor): tf.Tensor {
    const half = x.shape[3]! / 2;
    const [x1, x2] = tf.split(x, [half, half], -1);
    const rotated = tf.concat([x2.neg(), x1], -1);
    return x.mul(cos).add(rotated.mul(sin));
  }

  /**
   * Queries grouped by key/value head, [B, kvHeads, T·rep, hd] with row t·rep + r (so a run of
   * query times is a contiguous block of rows), and this call's keys and values [B, kvHeads, T, hd].
   */
  private projections(x: tf.Tensor, layer: number, cos: tf.Tensor, sin: tf.Tensor): { q: tf.Tensor4D; k: tf.Tensor4D; v: tf.Tensor4D } {
    const c = this.config;
    const [B, T] = x.shape as [number, number, number];
    const hd = headDim(c);
    const nkv = c.num_key_value_heads;
    const rep = c.num_attention_heads / nkv;
    const prefix = `model.layers.${layer}.self_attn.`;
    const q = this.applyRotary(this.linear(x, prefix + 'q_proj').reshape([B, T, c.num_attention_heads, hd]), cos, sin);
    const k = this.applyRotary(this.linear(x, prefix + 'k_proj').reshape([B, T, nkv, hd]), cos, sin);
    const v = this.linear(x, prefix + 'v_proj').reshape([B, T, nkv, hd]);
    return {
      q: q
        .reshape([B, T, nkv, rep, hd])
        .transpose([0, 2, 1, 3, 4])
        .reshape([B, nkv, T * rep, hd]) as tf.Tensor4D,
      k: k.transpose([0, 2, 1, 3]) as tf.Tensor4D,
      v: v.transpose([0, 2, 1, 3]) as tf.Tensor4D,
    };
  }

  /** Attention output [B, nkv, T·rep, hd] (grouped rows) back to [B, T, heads·hd], through o_proj. */
  private attentionOutput(ctx: tf.Tensor, layer: number, B: number, T: number): tf.Tensor {
    const c = this.config;
    const hd = headDim(c);
    const nkv = c.num_key_value_heads;
    const rep = c.num_attention_heads / nkv;
    const merged = ctx
      .reshape([B, nkv, T, rep, hd])
      .transpose([0, 2, 1, 3, 4])
      .reshape([B, T, c.num_attention_heads * hd]);
    return this.linear(merged, `model.layers.${layer}.self_attn.o_proj`);
  }

  private mlp(x: tf.Tensor, layer: number): tf.Tensor {
    const prefix = `model.layers.${layer}.mlp.`;
    const gate = this.linear(x, prefix + 'gate_proj');
    const up = this.linear(x, prefix + 'up_proj');
    return this.linear(gate.mul(gate.sigmoid()).mul(up), prefix + 'down_proj');
  }

  /**
   * Hidden states after the final norm, [batch, time, hidden], for token ids [batch, time] at the
   * given positions. With `cache`, the ids continue the cached sequence; the returned cache holds
   * the keys/values of everything seen. The mask decides which keys each query may see.
   *
   * The plain computation: every layer's activations stay alive (autograd keeps them all), so it
   * is for small inputs and as the reference the engine's memory-bounded paths are tested against.
   */
  forward(
    ids: tf.Tensor2D,
    positions: tf.Tensor2D,
    maskBias: tf.Tensor,
    cache?: LayerCache[],
  ): { hidden: tf.Tensor3D; cache: LayerCache[] } {
    const [cos, sin] = this.rotary(positions);
    let h: tf.Tensor = this.embed(ids);
    const [B, T] = ids.shape;
    const newCache: LayerCache[] = [];
    for (let i = 0; i < this.config.num_hidden_layers; i++) {
      const prefix = `model.layers.${i}.`;
      const { q, k, v } = this.projections(this.rmsNorm(h, prefix + 'input_layernorm.weight'), i, cos, sin);
      const keys = cache ? (tf.concat([cache[i].k, k], 2) as tf.Tensor4D) : k;
      const values = cache ? (tf.concat([cache[i].v, v], 2) as tf.Tensor4D) : v;
      h = h.add(this.attentionOutput(attendBlocks(q, [{ k: keys, v: values }], maskBias, this.attentionScale()), i, B, T));
      h = h.add(this.mlp(this.rmsNorm(h, prefix + 'post_attention_layernorm.weight'), i));
      newCache.push({ k: keys, v: values });
    }
    return { hidden: this.finalNorm(h), cache: newCache };
  }

  /** Token embeddings, [batch, time, hidden]. */
  embed(ids: tf.Tensor2D): tf.Tensor3D {
    return tf.gather(this.p('model.embed_tokens.weight'), ids) as tf.Tensor3D;
  }

  finalNorm(h: tf.Tensor): tf.Tensor3D {
    return this.rmsNorm(h, 'model.norm.weight') as tf.Tensor3D;
  }

  private attentionScale(): number {
    return 1 / Math.sqrt(headDim(this.config));
  }

  /**
   * One decoder layer for inference (no autograd): h [B, T, hidden] attends to the `past` key/value
   * blocks and then to its own keys, under `maskBias` [B or 1, 1, T, Σ past widths + T]. Returns
   * the layer's output and this call's keys/values (the caller keeps them as a new block).
   */
  layerStep(
    layer: number,
    h: tf.Tensor3D,
    cos: tf.Tensor,
    sin: tf.Tensor,
    maskBias: tf.Tensor,
    past: readonly LayerCache[],
  ): { h: tf.Tensor3D; kv: LayerCache } {
    const [B, T] = h.shape;
    const prefix = `model.layers.${layer}.`;
    const { q, k, v } = this.projections(this.rmsNorm(h, prefix + 'input_layernorm.weight'), layer, cos, sin);
    const kv = { k, v };
    let out = h.add(this.attentionOutput(attendBlocks(q, [...past, kv], maskBias, this.attentionScale()), layer, B, T));
    out = out.add(this.mlp(this.rmsNorm(out, prefix + 'post_attention_layernorm.weight'), layer));
    return { h: out as tf.Tensor3D, kv };
  }

  /**
   * Hidden states after the final norm for a whole right-padded batch. Attention runs in query
   * chunks of at most `attentionElements` scores with a hand-written backward pass, so no layer
   * holds a [T, T] score matrix per head for autograd. Same values and gradients as `forward`
   * (tested), for long sequences and large batches.
   *
   * - `checkpoint` (for batches whose activations would not fit otherwise): under autograd every
   *   layer keeps only its input and is recomputed in the backward pass, so memory grows with the
   *   number of layers by one [B, T, hidden] tensor each; about a third more compute.
   * - Not `differentiable` (scoring): each layer's input is freed as soon as the layer has run.
   */
  hiddenStates(
    ids: tf.Tensor2D,
    positions: tf.Tensor2D,
    maskBias: tf.Tensor,
    attentionElements: number,
    opts: { differentiable: boolean; checkpoint: boolean },
  ): tf.Tensor3D {
    const [cos, sin] = this.rotary(positions);
    let h: tf.Tensor3D = this.embed(ids);
    for (let i = 0; i < this.config.num_hidden_layers; i++) {
      const next =
        opts.differentiable && !opts.checkpoint
          ? this.layerForTraining(i, h, cos, sin, maskBias, attentionElements)
          : this.checkpointedLayer(i, h, cos, sin, maskBias, attentionElements);
      if (!opts.differentiable) h.dispose();
      h = next;
    }
    return this.finalNorm(h);
  }

  /** Layer `i` over the whole batch, with attention in query chunks (memoryEfficientAttention). */
  private layerForTraining(
    i: number,
    x: tf.Tensor3D,
    cos: tf.Tensor,
    sin: tf.Tensor,
    maskBias: tf.Tensor,
    attentionElements: number,
  ): tf.Tensor3D {
    const [B, T] = x.shape;
    const prefix = `model.layers.${i}.`;
    const { q, k, v } = this.projections(this.rmsNorm(x, prefix + 'input_layernorm.weight'), i, cos, sin);
    const out = x.add(this.attentionOutput(memoryEfficientAttention(q, k, v, maskBias, this.attentionScale(), attentionElements), i, B, T));
    return out.add(this.mlp(this.rmsNorm(out, prefix + 'post_attention_layernorm.weight'), i)) as tf.Tensor3D;
  }

  /** The variables an optimiser may update that layer `i` reads. */
  private layerTrainables(i: number): tf.Variable[] {
    const prefix = `model.layers.${i}.`;
    if (this.lora) return [...this.lora.modules].filter(([m]) => m.startsWith(prefix)).flatMap(([, ad]) => [ad.A, ad.B]);
    return [...this.params].filter(([name]) => name.startsWith(prefix)).map(([, v]) => v);
  }

  private checkpointedLayer(
    i: number,
    h: tf.Tensor3D,
    cos: tf.Tensor,
    sin: tf.Tensor,
    maskBias: tf.Tensor,
    attentionElements: number,
  ): tf.Tensor3D {
    const training = this.training;
    const dropoutFrom = this.lora?.dropoutCalls ?? 0;
    const run = (x: tf.Tensor3D, cos: tf.Tensor, sin: tf.Tensor, maskBias: tf.Tensor) =>
      this.layerForTraining(i, x, cos, sin, maskBias, attentionElements);
    const trainables = this.layerTrainables(i);
    const layer = tf.customGrad((...args: (tf.Tensor | tf.GradSaveFunc)[]) => {
      const save = args[args.length - 1] as tf.GradSaveFunc;
      const x = args[0] as tf.Tensor3D;
      // Saved, not captured: the forward pass's tensors are disposed before the backward pass runs.
      save([x, cos, sin, maskBias]);
      return {
        value: run(x, cos, sin, maskBias),
        gradFunc: (dy: tf.Tensor | tf.Tensor[], saved: tf.Tensor[]) =>
          recomputeGradients(
            () => {
              // The recomputation must see the same LoRA dropout masks and mode as the forward pass.
              const lora = this.lora;
              const resumeAt = lora?.dropoutCalls ?? 0;
              if (lora) lora.dropoutCalls = dropoutFrom;
              const wasTraining = this.training;
              this.training = training;
              try {
                return run(saved[0] as tf.Tensor3D, saved[1], saved[2], saved[3]);
              } finally {
                this.training = wasTraining;
                if (lora) lora.dropoutCalls = resumeAt;
              }
            },
            [saved[0], ...trainables],
            dy as tf.Tensor,
          ),
      };
    });
    return layer(h, ...trainables) as tf.Tensor3D;
  }

  private outputWeight(): tf.Variable {
    return this.config.tie_word_embeddings ? this.p('model.embed_tokens.weight') : this.p('lm_head.weight');
  }

  /** Output projection: [n, hidden] -> [n, vocab]. */
  logits(hidden2d: tf.Tensor2D): tf.Tensor2D {
    return tf.matMul(hidden2d, this.outputWeight(), false, true);
  }

  /**
   * log softmax(h·Wᵀ / temperature)[target] for each row of h [n, hidden], [n]. Rows go through
   * the output layer in chunks of at most `logitElements` logits, in the backward pass too (which
   * recomputes them: d/dz = (onehot − softmax) / temperature), so [n, vocab] is never held whole.
   */
  tokenLogprobs(h: tf.Tensor2D, targets: readonly number[], temperature: number, logitElements: number): tf.Tensor1D {
    const n = h.shape[0];
    if (targets.length !== n) throw new Error(`tokenLogprobs: ${n} rows but ${targets.length} targets`);
    const W = this.outputWeight();
    const V = W.shape[0];
    if (n === 0) return tf.zeros([0]) as tf.Tensor1D;
    const rows = Math.max(1, Math.floor(logitElements / V));
    const chunks: [number, number][] = [];
    for (let a = 0; a < n; a += rows) chunks.push([a, Math.min(n, a + rows)]);
    const scaledLogits = (x: tf.Tensor2D, w: tf.Tensor2D) => {
      const z = tf.matMul(x, w, false, true);
      return temperature === 1 ? z : z.div(temperature);
    };
    const forwardChunk = (x: tf.Tensor2D, w: tf.Tensor2D, [a, b]: [number, number]) =>
      tf.tidy(() => {
        const z = scaledLogits(x.slice([a, 0], [b - a, -1]), w);
        const picked = tf.gather(
          z.reshape([-1]),
          tf.tensor1d(
            targets.slice(a, b).map((t, j) => j * V + t),
            'int32',
          ),
        );
        return picked.sub(tf.logSumExp(z, 1));
      });
    // The output weight is differentiated only when it trains (no LoRA); otherwise it is a constant.
    const weightTrains = this.lora === null && W.trainable;
    const fn = tf.customGrad((...args: (tf.Tensor | tf.GradSaveFunc)[]) => {
      const save = args[args.length - 1] as tf.GradSaveFunc;
      const x = args[0] as tf.Tensor2D;
      const w = (weightTrains ? args[1] : W) as tf.Tensor2D;
      save(weightTrains ? [x, w] : [x]);
      const value =
        chunks.length === 1 ? forwardChunk(x, w, chunks[0]) : tf.tidy(() => tf.concat(chunks.map((c) => forwardChunk(x, w, c))));
      return {
        value,
        gradFunc: (dy: tf.Tensor | tf.Tensor[], saved: tf.Tensor[]) =>
          tf.tidy(() => {
            const xs = saved[0] as tf.Tensor2D;
            const ws = (weightTrains ? saved[1] : W) as tf.Tensor2D;
            const dxParts: tf.Tensor[] = [];
            let dw: tf.Tensor | null = null;
            for (const [a, b] of chunks) {
              const [dxc, dwc] = tf.tidy(() => {
                const xc = xs.slice([a, 0], [b - a, -1]);
                const z = scaledLogits(xc, ws);
                const onehot = tf.oneHot(tf.tensor1d(targets.slice(a, b), 'int32'), V).toFloat();
                const g = onehot
                  .sub(tf.softmax(z, 1))
                  .mul((dy as tf.Tensor).slice([a], [b - a]).reshape([b - a, 1]))
                  .div(temperature) as tf.Tensor2D;
                return weightTrains ? [tf.matMul(g, ws), tf.matMul(g, xc, true, false)] : [tf.matMul(g, ws)];
              });
              dxParts.push(dxc);
              if (dwc) {
                // A running sum in this tidy's scope; each chunk's temporaries died in the inner tidy.
                const next: tf.Tensor = dw ? (dw as tf.Tensor).add(dwc) : dwc;
                if (dw) tf.dispose([dw, dwc]);
                dw = next;
              }
            }
            const dx = dxParts.length === 1 ? dxParts[0] : tf.concat(dxParts);
            return weightTrains ? [dx, dw!] : [dx];
          }),
      };
    });
    return (weightTrains ? fn(h, W) : fn(h)) as tf.Tensor1D;
  }

  dispose(): void {
    this.lora?.dispose();
    this.lora = null;
    for (const v of this.params.values()) v.dispose();
    this.invFreq.dispose();
  }
}

export function validateConfig(c: ModelConfig, where = 'config.json'): void {
  const need = [
    'vocab_size',
    'hidden_size',
    'intermediate_size',
    'num_hidden_layers',
    'num_attention_heads',
    'num_key_value_heads',
    'rms_norm_eps',
    'rope_theta',
  ] as const;
  for (const key of need) {
    const v = (c as unknown as Record<string, unknown>)[key];
    if (typeof v !== 'number' || !(v > 0)) throw new Error(`${where}: "${key}" must be a positive number (got ${JSON.stringify(v)})`);
  }
  if (c.model_type !== 'qwen2' && c.model_type !== 'llama')
    throw new Error(`${where}: "model_type" must be "qwen2" or "llama" (got ${JSON.stringify(c.model_type)})`);
  if (c.num_attention_heads % c.num_key_value_heads !== 0)
    throw new Error(
      `${where}: num_attention_heads (${c.num_attention_heads}) must be a multiple of num_key_value_heads (${c.num_key_value_heads})`,
    );
  if (headDim(c) % 2 !== 0 || !Number.isInteger(headDim(c)))
    throw new Error(`${where}: head dimension must be an even integer (got ${headDim(c)})`);
}

/**
 * Attention of grouped queries q [B, nkv, T·rep, hd] (row t·rep + r) over key/value blocks laid
 * side by side (each [B, nkv, S_j, hd]), under maskBias [B or 1, 1, T, Σ S_j]. Blocks let a cached
 * prefix and newly computed keys be used together without copying the prefix each step.
 */
export function attendBlocks(q: tf.Tensor4D, blocks: readonly LayerCache[], maskBias: tf.Tensor, scale: number): tf.Tensor4D {
  const rows = q.shape[2];
  const rep = rows / maskBias.shape[2]!;
  const widths = blocks.map((b) => b.k.shape[2]);
  const qs = q.mul(scale);
  const scores =
    blocks.length === 1
      ? tf.matMul(qs, blocks[0].k, false, true)
      : tf.concat(
          blocks.map((b) => tf.matMul(qs, b.k, false, true)),
          3,
        );
  const probs = maskedSoftmax(scores, maskBias, rep);
  if (blocks.length === 1) return tf.matMul(probs, blocks[0].v) as tf.Tensor4D;
  return attendSplit(probs as tf.Tensor4D, blocks, widths);
}

/**
 * Σ_j probs[…, block j's columns] · v_j, the products tf.split would feed, without the wasm backend's
 * slice: its kernel copies the whole input out of the heap for every part (readSync), so a prefill
 * chunk over k key/value blocks copied its probabilities k times, and a long prompt prefilled in many
 * chunks (a memory rollout's tips) spent most of its time copying. With the native BLAS each product
 * reads its columns in place; otherwise gather copies only each part, in wasm. Either way the same
 * values go into the same products, so the sums are the same.
 */
function attendSplit(probs: tf.Tensor4D, blocks: readonly LayerCache[], widths: readonly number[]): tf.Tensor4D {
  let start = 0;
  const outs = widths.map((w, j) => {
    const from = start;
    start += w;
    const inPlace = columnsMatMul(probs, blocks[j].v, from);
    if (inPlace) return inPlace;
    const indices = tf.range(from, from + w, 1, 'int32');
    const part = tf.gather(probs, indices, 3) as tf.Tensor4D;
    indices.dispose();
    const out = tf.matMul(part, blocks[j].v);
    part.dispose();
    return out;
  });
  probs.dispose();
  const sum = tf.addN(outs) as tf.Tensor4D;
  for (const o of outs) o.dispose();
  return sum;
}

/**
 * x[:, :, a:b] of a rank-4 tensor: tf.slice's values, copied by gather in wasm. The wasm backend's
 * slice copies the whole input out of the heap first, so slicing a long sequence's queries and mask
 * into c chunks copied them c times (a memory rollout's tip-laden prompts, scored per step).
 */
function rowsOf(x: tf.Tensor, a: number, b: number): tf.Tensor {
  const indices = tf.range(a, b, 1, 'int32');
  const rows = tf.gather(x, indices, 2);
  indices.dispose();
  return rows;
}

/** Query times per chunk so that one chunk's scores stay within `elements`. */
function queryChunk(B: number, nkv: number, rep: number, T: number, S: number, elements: number): number {
  return Math.max(1, Math.min(T, Math.floor(elements / (B * nkv * rep * S))));
}

/**
 * softmax over keys of scores [B, nkv, t·rep, S] plus maskBias [B or 1, 1, t, S], disposing what it
 * no longer needs as it goes, so at most two score-sized tensors exist at once.
 */
function maskedSoftmax(scores: tf.Tensor, maskBias: tf.Tensor, rep: number): tf.Tensor {
  const [B, nkv, rows, S] = scores.shape;
  const t = rows / rep;
  // A reshape shares its input's buffer, so a buffer is freed only once every view of it is disposed.
  const grouped = scores.reshape([B, nkv, t, rep, S]);
  scores.dispose();
  const masked = grouped.add(maskBias.reshape([maskBias.shape[0], 1, t, 1, S]));
  grouped.dispose();
  const probs = tf.softmax(masked, -1);
  masked.dispose();
  const out = probs.reshape([B, nkv, rows, S]);
  probs.dispose();
  return out;
}

/**
 * attendBlocks over a single block (the sequence's own keys) in query chunks, with the backward
 * pass written out so that no more than one chunk's probabilities exist at a time, and at most
 * three score-sized tensors within a chunk (FlashAttention's recurrences, without its tiling):
 *   P = softmax(s·q·kᵀ + mask), O = P·v;  dv = Pᵀ·dO, dS = P ⊙ (dO·vᵀ − rowsum(dO ⊙ O)),
 *   dq = s·dS·k, dk = s·dSᵀ·q.
 */
export function memoryEfficientAttention(
  q: tf.Tensor4D,
  k: tf.Tensor4D,
  v: tf.Tensor4D,
  maskBias: tf.Tensor,
  scale: number,
  elements: number,
): tf.Tensor4D {
  const [B, nkv, rows, hd] = q.shape;
  const T = maskBias.shape[2]!;
  const rep = rows / T;
  const S = k.shape[2];
  const tc = queryChunk(B, nkv, rep, T, S, elements);
  const chunks: [number, number][] = [];
  for (let a = 0; a < T; a += tc) chunks.push([a, Math.min(T, a + tc)]);
  const whole = chunks.length === 1;
  const qChunk = (x: tf.Tensor4D, [a, b]: [number, number]) => (whole ? x : (rowsOf(x, a * rep, b * rep) as tf.Tensor4D));
  const maskChunk = (mask: tf.Tensor, [a, b]: [number, number]) => (whole ? mask : rowsOf(mask, a, b));
  /** Probabilities of one chunk's (unscaled) queries. */
  const probsOf = (qc: tf.Tensor4D, kk: tf.Tensor4D, mask: tf.Tensor, c: [number, number]) =>
    maskedSoftmax(tf.matMul(qc.mul(scale), kk, false, true), maskChunk(mask, c), rep);
  const fn = tf.customGrad((...args: (tf.Tensor | tf.GradSaveFunc)[]) => {
    const [qq, kk, vv] = args as tf.Tensor4D[];
    // The mask is saved too: the forward pass's tensors are disposed before the backward pass runs.
    (args[3] as tf.GradSaveFunc)([qq, kk, vv, maskBias]);
    const outChunk = (c: [number, number]) => tf.tidy(() => tf.matMul(probsOf(qChunk(qq, c), kk, maskBias, c), vv));
    const value = whole ? outChunk(chunks[0]) : tf.tidy(() => tf.concat(chunks.map(outChunk), 2));
    return {
      value,
      gradFunc: (dy: tf.Tensor | tf.Tensor[], saved: tf.Tensor[]) =>
        tf.tidy(() => {
          const [qs, ks, vs, mask] = saved as tf.Tensor4D[];
          const dO = dy as tf.Tensor4D;
          const dq: tf.Tensor[] = [];
          let dk: tf.Tensor | null = null;
          let dv: tf.Tensor | null = null;
          // Running sums in this tidy's scope; each chunk's own temporaries die in its inner tidy.
          const accumulate = (sum: tf.Tensor | null, part: tf.Tensor) => {
            if (!sum) return part;
            const next = sum.add(part);
            tf.dispose([sum, part]);
            return next;
          };
          for (const c of chunks) {
            const [dqc, dkc, dvc] = tf.tidy(() => {
              const qc = qChunk(qs, c);
              const dOc = qChunk(dO, c);
              const P = probsOf(qc, ks, mask, c);
              // rowsum(dP ⊙ P) = rowsum(dO ⊙ O): no score-sized product needed for it.
              const rowDot = dOc.mul(tf.matMul(P, vs)).sum(-1, true);
              const dP = tf.matMul(dOc, vs, false, true);
              const centred = dP.sub(rowDot);
              dP.dispose();
              const dS = centred.mul(P);
              centred.dispose();
              const dvc = tf.matMul(P, dOc, true, false);
              P.dispose();
              return [tf.matMul(dS, ks).mul(scale), tf.matMul(dS, qc, true, false).mul(scale), dvc];
            });
            dq.push(dqc);
            dk = accumulate(dk, dkc);
            dv = accumulate(dv, dvc);
          }
          return [dq.length === 1 ? dq[0] : tf.concat(dq, 2), dk!, dv!];
        }),
    };
  });
  return fn(q, k, v) as tf.Tensor4D;
}

/**
 * Gradients of `f` (recomputed now) with respect to `xs`, for a checkpointed block's backward pass:
 * runs inside the outer backward pass, where tfjs's engine would otherwise start its tape over the
 * outer one's and then fail to clean the outer one up; the outer tape is put back afterwards.
 * Inputs that do not reach the output get zeros.
 */
export function recomputeGradients(f: () => tf.Tensor, xs: tf.Tensor[], dy: tf.Tensor): tf.Tensor[] {
  const engine = tf.engine() as unknown as {
    state: { activeTape: unknown };
    gradients: (
      f: () => tf.Tensor,
      xs: tf.Tensor[],
      dy: tf.Tensor,
      allowNoGradients: boolean,
    ) => { value: tf.Tensor; grads: (tf.Tensor | undefined)[] };
  };
  const outerTape = engine.state.activeTape;
  try {
    return tf.tidy(() => {
      const { value, grads } = engine.gradients(f, xs, dy, true);
      value.dispose();
      return grads.map((g, j) => g ?? tf.zerosLike(xs[j]));
    });
  } finally {
    engine.state.activeTape = outerTape;
  }
}
