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
  const d = c.hidden_size;
  const hd = headDim(c);
  const qOut = c.num_attention_heads * hd;
  const kvOut = c.num_key_value_heads * hd;
  const shapes = new Map<string, number[]>();
  shapes.set('model.embed_tokens.weight', [c.vocab_size, d]);
  const qkvBias = c.model_type === 'qwen2' || !!c.attention_bias;
  const oBias = c.model_type === 'llama' && !!c.attention_bias;
  const mlpBias = c.model_type === 'llama' && !!c.mlp_bias;
  for (let i = 0; i < c.num_hidden_layers; i++) {
    const p = `model.layers.${i}.`;
    shapes.set(p + 'input_layernorm.weight', [d]);
    shapes.set(p + 'self_attn.q_proj.weight', [qOut, d]);
    shapes.set(p + 'self_attn.k_proj.weight', [kvOut, d]);
    shapes.set(p + 'self_attn.v_proj.weight', [kvOut, d]);
    if (qkvBias) {
      shapes.set(p + 'self_attn.q_proj.bias', [qOut]);
      shapes.set(p + 'self_attn.k_proj.bias', [kvOut]);
      shapes.set(p + 'self_attn.v_proj.bias', [kvOut]);
    }
    shapes.set(p + 'self_attn.o_proj.weight', [d, qOut]);
    if (oBias) shapes.set(p + 'self_attn.o_proj.bias', [d]);
    shapes.set(p + 'post_attention_layernorm.weight', [d]);
    shapes.set(p + 'mlp.gate_proj.weight', [c.intermediate_size, d]);
    shapes.set(p + 'mlp.up_proj.weight', [c.intermediate_size, d]);
    shapes.set(p + 'mlp.down_proj.weight', [d, c.intermediate_size]);
    if (mlpBias) {
      shapes.set(p + 'mlp.gate_proj.bias', [c.intermediate_size]);
      shapes.set(p + 'mlp.up_proj.bias', [c.intermediate_size]);
      shapes.set(p + 'mlp.down_proj.bias', [d]);
    }
  }
  shapes.set('model.norm.weight', [d]);
  if (!c.tie_word_embeddings) shapes.set('lm_head.weight', [c.vocab_size, d]);
  return shapes;
}

export function countParameters(c: ModelConfig): number {
  let n = 0;
  for (const s of parameterShapes(c).values()) n += s.reduce((a, b) => a * b, 1);
  return n;
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
  private rotary(positions: tf.Tensor2D): [tf.Tensor, tf.Tensor] {
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
   * Self-attention with grouped-query heads. Query heads that share a key/value head are folded
   * into the time axis, so keys and values are never copied per query head.
   * `maskBias` is added to the scores: [batch or 1, 1, queryTime, keyTime], 0 where allowed, -1e9 elsewhere.
   */
  private attention(x: tf.Tensor, layer: number, cos: tf.Tensor, sin: tf.Tensor, maskBias: tf.Tensor, cache?: LayerCache): { out: tf.Tensor; cache: LayerCache } {
    const c = this.config;
    const [B, T] = x.shape as [number, number, number];
    const hd = headDim(c);
    const nkv = c.num_key_value_heads;
    const rep = c.num_attention_heads / nkv;
    const prefix = `model.layers.${layer}.self_attn.`;
    let q = this.linear(x, prefix + 'q_proj').reshape([B, T, c.num_attention_heads, hd]);
    let k = this.linear(x, prefix + 'k_proj').reshape([B, T, nkv, hd]);
    const vNew = this.linear(x, prefix + 'v_proj').reshape([B, T, nkv, hd]).transpose([0, 2, 1, 3]) as tf.Tensor4D;
    q = this.applyRotary(q, cos, sin);
    k = this.applyRotary(k, cos, sin);
    const kNew = k.transpose([0, 2, 1, 3]) as tf.Tensor4D;
    const keys = cache ? tf.concat([cache.k, kNew], 2) : kNew;
    const values = cache ? tf.concat([cache.v, vNew], 2) : vNew;
    const S = keys.shape[2];
    // [B,T,nkv,rep,hd] -> [B,nkv,rep,T,hd] -> [B,nkv,rep*T,hd]
    const qg = q.reshape([B, T, nkv, rep, hd]).transpose([0, 2, 3, 1, 4]).reshape([B, nkv, rep * T, hd]);
    const scores = tf.matMul(qg, keys, false, true).mul(1 / Math.sqrt(hd)).reshape([B, nkv, rep, T, S]);
    const probs = tf.softmax(scores.add(maskBias.reshape([maskBias.shape[0], 1, 1, T, S])), -1).reshape([B, nkv, rep * T, S]);
    const ctx = tf.matMul(probs, values).reshape([B, nkv, rep, T, hd]).transpose([0, 3, 1, 2, 4]).reshape([B, T, c.num_attention_heads * hd]);
    return { out: this.linear(ctx, prefix + 'o_proj'), cache: { k: keys as tf.Tensor4D, v: values as tf.Tensor4D } };
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
   */
  forward(ids: tf.Tensor2D, positions: tf.Tensor2D, maskBias: tf.Tensor, cache?: LayerCache[]): { hidden: tf.Tensor3D; cache: LayerCache[] } {
    const [cos, sin] = this.rotary(positions);
    let h: tf.Tensor = tf.gather(this.p('model.embed_tokens.weight'), ids);
    const newCache: LayerCache[] = [];
    for (let i = 0; i < this.config.num_hidden_layers; i++) {
      const prefix = `model.layers.${i}.`;
      const att = this.attention(this.rmsNorm(h, prefix + 'input_layernorm.weight'), i, cos, sin, maskBias, cache?.[i]);
      h = h.add(att.out);
      h = h.add(this.mlp(this.rmsNorm(h, prefix + 'post_attention_layernorm.weight'), i));
      newCache.push(att.cache);
    }
    return { hidden: this.rmsNorm(h, 'model.norm.weight') as tf.Tensor3D, cache: newCache };
  }

  /** Output projection: [n, hidden] -> [n, vocab]. */
  logits(hidden2d: tf.Tensor2D): tf.Tensor2D {
    const w = this.config.tie_word_embeddings ? this.p('model.embed_tokens.weight') : this.p('lm_head.weight');
    return tf.matMul(hidden2d, w, false, true);
  }

  dispose(): void {
    this.lora?.dispose();
    this.lora = null;
    for (const v of this.params.values()) v.dispose();
    this.invFreq.dispose();
  }
}

export function validateConfig(c: ModelConfig, where = 'config.json'): void {
  const need = ['vocab_size', 'hidden_size', 'intermediate_size', 'num_hidden_layers', 'num_attention_heads', 'num_key_value_heads', 'rms_norm_eps', 'rope_theta'] as const;
  for (const key of need) {
    const v = (c as unknown as Record<string, unknown>)[key];
    if (typeof v !== 'number' || !(v > 0)) throw new Error(`${where}: "${key}" must be a positive number (got ${JSON.stringify(v)})`);
  }
  if (c.model_type !== 'qwen2' && c.model_type !== 'llama') throw new Error(`${where}: "model_type" must be "qwen2" or "llama" (got ${JSON.stringify(c.model_type)})`);
  if (c.num_attention_heads % c.num_key_value_heads !== 0) throw new Error(`${where}: num_attention_heads (${c.num_attention_heads}) must be a multiple of num_key_value_heads (${c.num_key_value_heads})`);
  if (headDim(c) % 2 !== 0 || !Number.isInteger(headDim(c))) throw new Error(`${where}: head dimension must be an even integer (got ${headDim(c)})`);
}
