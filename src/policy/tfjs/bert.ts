/**
 * BERT encoder on TensorFlow.js, in the spirit of Hugging Face's `modeling_bert.py` (inference
 * only): token + absolute position + token-type embeddings and a LayerNorm, then post-norm
 * transformer layers (self-attention -> dense -> residual -> LayerNorm; intermediate dense -> GELU
 * -> dense -> residual -> LayerNorm). It returns the last hidden states; pooling is the caller's.
 *
 * Parameter names and layouts are Hugging Face's (`embeddings.word_embeddings.weight`,
 * `encoder.layer.N.attention.self.query.weight`, ...; Linear weights are [out, in]), so the
 * `model.safetensors` of any `BertModel` (e.g. sentence-transformers' MiniLM) loads without renaming.
 * Checkpoints of task heads (`BertForMaskedLM`...) prefix the encoder with `bert.`; that prefix
 * is accepted and the head weights are ignored.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { readSafetensorsDir, toFloat32 } from '../safetensors.ts';
import { tf } from './backend.ts';

export type BertActivation = 'gelu' | 'gelu_new' | 'gelu_pytorch_tanh' | 'relu';

export interface BertConfig {
  model_type?: string;
  vocab_size: number;
  hidden_size: number;
  num_hidden_layers: number;
  num_attention_heads: number;
  intermediate_size: number;
  max_position_embeddings: number;
  type_vocab_size: number;
  layer_norm_eps: number;
  /** "gelu" is the exact (erf) GELU, as in HF BERT; the tanh forms and ReLU are accepted too. */
  hidden_act: BertActivation;
  /** Only "absolute" is supported (what BERT and MiniLM use). */
  position_embedding_type?: string;
  pad_token_id?: number;
}

const ACTIVATIONS: readonly BertActivation[] = ['gelu', 'gelu_new', 'gelu_pytorch_tanh', 'relu'];

/** Checks the fields the encoder relies on; `where` names the file in messages. */
export function validateBertConfig(raw: unknown, where = 'config.json'): BertConfig {
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) throw new Error(`${where}: expected a JSON object`);
  const c = raw as Record<string, unknown>;
  const positive = [
    'vocab_size',
    'hidden_size',
    'num_hidden_layers',
    'num_attention_heads',
    'intermediate_size',
    'max_position_embeddings',
    'type_vocab_size',
  ] as const;
  for (const key of positive) {
    if (!Number.isInteger(c[key]) || (c[key] as number) <= 0)
      throw new Error(`${where}: "${key}" must be a positive integer (got ${JSON.stringify(c[key])})`);
  }
  if (typeof c.layer_norm_eps !== 'number' || !(c.layer_norm_eps > 0))
    throw new Error(`${where}: "layer_norm_eps" must be a positive number (got ${JSON.stringify(c.layer_norm_eps)})`);
  if (c.model_type !== undefined && c.model_type !== 'bert')
    throw new Error(`${where}: "model_type" is ${JSON.stringify(c.model_type)}; only "bert" encoders are supported`);
  const act = c.hidden_act ?? 'gelu';
  if (!ACTIVATIONS.includes(act as BertActivation))
    throw new Error(`${where}: "hidden_act" ${JSON.stringify(act)} is not supported (use one of ${ACTIVATIONS.join(', ')})`);
  const positions = c.position_embedding_type ?? 'absolute';
  if (positions !== 'absolute')
    throw new Error(`${where}: "position_embedding_type" ${JSON.stringify(positions)} is not supported (only "absolute")`);
  if ((c.hidden_size as number) % (c.num_attention_heads as number) !== 0) {
    throw new Error(`${where}: hidden_size (${c.hidden_size}) must be a multiple of num_attention_heads (${c.num_attention_heads})`);
  }
  return { ...(c as unknown as BertConfig), hidden_act: act as BertActivation, position_embedding_type: 'absolute' };
}

/** Shapes of every parameter the encoder uses, by Hugging Face name. */
export function bertParameterShapes(c: BertConfig): Map<string, number[]> {
  const d = c.hidden_size;
  const shapes = new Map<string, number[]>();
  shapes.set('embeddings.word_embeddings.weight', [c.vocab_size, d]);
  shapes.set('embeddings.position_embeddings.weight', [c.max_position_embeddings, d]);
  shapes.set('embeddings.token_type_embeddings.weight', [c.type_vocab_size, d]);
  shapes.set('embeddings.LayerNorm.weight', [d]);
  shapes.set('embeddings.LayerNorm.bias', [d]);
  for (let i = 0; i < c.num_hidden_layers; i++) {
    const p = `encoder.layer.${i}.`;
    for (const name of ['query', 'key', 'value']) {
      shapes.set(`${p}attention.self.${name}.weight`, [d, d]);
      shapes.set(`${p}attention.self.${name}.bias`, [d]);
    }
    shapes.set(p + 'attention.output.dense.weight', [d, d]);
    shapes.set(p + 'attention.output.dense.bias', [d]);
    shapes.set(p + 'attention.output.LayerNorm.weight', [d]);
    shapes.set(p + 'attention.output.LayerNorm.bias', [d]);
    shapes.set(p + 'intermediate.dense.weight', [c.intermediate_size, d]);
    shapes.set(p + 'intermediate.dense.bias', [c.intermediate_size]);
    shapes.set(p + 'output.dense.weight', [d, c.intermediate_size]);
    shapes.set(p + 'output.dense.bias', [d]);
    shapes.set(p + 'output.LayerNorm.weight', [d]);
    shapes.set(p + 'output.LayerNorm.bias', [d]);
  }
  return shapes;
}

/** One parameter as stored: row-major float32 data and its shape. */
export interface BertWeight {
  shape: readonly number[];
  data: Float32Array;
}

const SQRT_HALF = Math.SQRT1_2;
const SQRT_2_OVER_PI = Math.sqrt(2 / Math.PI);

export class BertModel {
  readonly config: BertConfig;
  /**
   * Weights by Hugging Face name. Linear weights are kept transposed, [in, out], so every
   * projection is a plain matmul: the layout the wasm backend's fast (xnnpack) path takes.
   */
  private readonly params: Map<string, tf.Tensor>;
  /**
   * The three embedding tables, kept in JavaScript: summing looked-up rows here takes a few ms
   * for a 4096-token batch, where the wasm backend's Gather and Tile took ~100 ms each.
   */
  private readonly wordTable: Float32Array;
  private readonly positionTable: Float32Array;
  private readonly typeTable: Float32Array;
  private readonly headDim: number;

  /**
   * `weights` by Hugging Face name and layout ([out, in] Linear weights), as plain arrays: the
   * embedding tables stay in JavaScript and never pass through the wasm heap.
   */
  constructor(config: BertConfig, weights: ReadonlyMap<string, BertWeight>) {
    this.config = validateBertConfig(config);
    this.headDim = config.hidden_size / config.num_attention_heads;
    const shapes = bertParameterShapes(this.config);
    for (const [name, shape] of shapes) {
      const w = weights.get(name);
      if (!w) throw new Error(`BERT parameter ${name} is missing`);
      if (w.shape.length !== shape.length || w.shape.some((n, i) => n !== shape[i])) {
        throw new Error(`BERT parameter ${name} has shape [${w.shape.join(', ')}], expected [${shape.join(', ')}]`);
      }
      const size = shape.reduce((a, b) => a * b, 1);
      if (!(w.data instanceof Float32Array) || w.data.length !== size)
        throw new Error(`BERT parameter ${name} needs a Float32Array of ${size} numbers`);
    }
    this.wordTable = weights.get('embeddings.word_embeddings.weight')!.data;
    this.positionTable = weights.get('embeddings.position_embeddings.weight')!.data;
    this.typeTable = weights.get('embeddings.token_type_embeddings.weight')!.data;
    this.params = new Map();
    for (const [name, shape] of shapes) {
      if (name.endsWith('_embeddings.weight')) continue;
      const isLinearWeight = name.startsWith('encoder.') && name.endsWith('.weight') && !name.includes('LayerNorm');
      const data = weights.get(name)!.data;
      this.params.set(
        name,
        tf.tidy(() => (isLinearWeight ? tf.transpose(tf.tensor2d(data, shape as [number, number])) : tf.tensor(data, shape))),
      );
    }
  }

  /**
   * Reads `config.json` and `model.safetensors` (or its sharded form) from a Hugging Face model
   * directory. Errors name the file that is missing or wrong. Call after `initBackend()`.
   */
  static load(dir: string): BertModel {
    const configPath = join(dir, 'config.json');
    if (!existsSync(configPath))
      throw new Error(`${configPath} is missing (a BERT model directory needs config.json and model.safetensors)`);
    let raw: unknown;
    try {
      raw = JSON.parse(readFileSync(configPath, 'utf8'));
    } catch (err) {
      throw new Error(`${configPath}: invalid JSON: ${(err as Error).message}`);
    }
    const config = validateBertConfig(raw, configPath);
    const wanted = bertParameterShapes(config);
    const stored = (name: string) =>
      wanted.has(name) ? name : name.startsWith('bert.') && wanted.has(name.slice(5)) ? name.slice(5) : null;
    let contents;
    try {
      contents = readSafetensorsDir(dir, { filter: (name) => stored(name) !== null });
    } catch (err) {
      throw new Error(`cannot read the weights of ${dir}: ${(err as Error).message}`);
    }
    const weights = new Map<string, BertWeight>();
    for (const [name, tensor] of contents.tensors) {
      const ours = stored(name)!;
      if (weights.has(ours)) throw new Error(`${dir}: parameter ${ours} is stored twice (with and without the "bert." prefix)`);
      const expected = wanted.get(ours)!;
      if (tensor.shape.length !== expected.length || tensor.shape.some((n, i) => n !== expected[i])) {
        throw new Error(`${dir}: ${name} has shape [${tensor.shape.join(', ')}], but config.json implies [${expected.join(', ')}]`);
      }
      weights.set(ours, { shape: tensor.shape, data: toFloat32(tensor) });
    }
    const missing = [...wanted.keys()].filter((name) => !weights.has(name));
    if (missing.length > 0) {
      throw new Error(`${dir}: the weights lack ${missing.length} BERT parameter(s), e.g. ${missing.slice(0, 3).join(', ')}`);
    }
    return new BertModel(config, weights);
  }

  private p(name: string): tf.Tensor {
    const t = this.params.get(name);
    if (!t) throw new Error(`BERT parameter ${name} is missing`);
    return t;
  }

  /** x [n, in] -> [n, out] with the stored [in, out] weight and its bias. */
  private linear(x: tf.Tensor2D, prefix: string): tf.Tensor2D {
    return tf.add(tf.matMul(x, this.p(prefix + '.weight') as tf.Tensor2D), this.p(prefix + '.bias'));
  }

  private layerNorm(x: tf.Tensor, prefix: string): tf.Tensor {
    const { mean, variance } = tf.moments(x, -1, true);
    const normalised = tf.mul(tf.sub(x, mean), tf.rsqrt(tf.add(variance, this.config.layer_norm_eps)));
    return tf.add(tf.mul(normalised, this.p(prefix + '.weight')), this.p(prefix + '.bias'));
  }

  private activation(x: tf.Tensor): tf.Tensor {
    switch (this.config.hidden_act) {
      case 'gelu':
        return tf.mul(tf.mul(x, 0.5), tf.add(tf.erf(tf.mul(x, SQRT_HALF)), 1));
      case 'gelu_new':
      case 'gelu_pytorch_tanh': {
        const inner = tf.mul(tf.add(x, tf.mul(tf.pow(x, 3), 0.044715)), SQRT_2_OVER_PI);
        return tf.mul(tf.mul(x, 0.5), tf.add(tf.tanh(inner), 1));
      }
      case 'relu':
        return tf.relu(x);
    }
  }

  /**
   * One layer on the flattened hidden states h [B*T, D]; `maskBias` [B, 1, 1, T] is 0 for real
   * tokens and -1e9 for padding, so no query attends to padding.
   */
  private layer(h: tf.Tensor2D, i: number, B: number, T: number, maskBias: tf.Tensor): tf.Tensor2D {
    const H = this.config.num_attention_heads;
    const hd = this.headDim;
    const D = this.config.hidden_size;
    const prefix = `encoder.layer.${i}.`;
    const heads = (x: tf.Tensor2D) => tf.transpose(tf.reshape(x, [B, T, H, hd]), [0, 2, 1, 3]);
    // The 1/sqrt(hd) scale goes on the queries: T*hd multiplications instead of T*T.
    const q = heads(tf.mul(this.linear(h, prefix + 'attention.self.query'), 1 / Math.sqrt(hd)) as tf.Tensor2D);
    const k = heads(this.linear(h, prefix + 'attention.self.key'));
    const v = heads(this.linear(h, prefix + 'attention.self.value'));
    const probs = tf.softmax(tf.add(tf.matMul(q, k, false, true), maskBias), -1);
    const context = tf.reshape(tf.transpose(tf.matMul(probs, v), [0, 2, 1, 3]), [B * T, D]) as tf.Tensor2D;
    const attended = this.layerNorm(
      tf.add(this.linear(context, prefix + 'attention.output.dense'), h),
      prefix + 'attention.output.LayerNorm',
    ) as tf.Tensor2D;
    const intermediate = this.activation(this.linear(attended, prefix + 'intermediate.dense')) as tf.Tensor2D;
    return this.layerNorm(tf.add(this.linear(intermediate, prefix + 'output.dense'), attended), prefix + 'output.LayerNorm') as tf.Tensor2D;
  }

  /**
   * Sum of word, position and token-type embeddings, [B*T, D]. Ids are checked here: a lookup
   * out of range would otherwise read another row or garbage without complaint.
   */
  private embed(ids: tf.Tensor2D, tokenTypeIds: tf.Tensor2D | undefined): tf.Tensor2D {
    const [B, T] = ids.shape;
    const D = this.config.hidden_size;
    const idData = ids.dataSync();
    const typeData = tokenTypeIds?.dataSync();
    const out = new Float32Array(B * T * D);
    for (let row = 0; row < B * T; row++) {
      const id = idData[row];
      const type = typeData ? typeData[row] : 0;
      if (!Number.isInteger(id) || id < 0 || id >= this.config.vocab_size)
        throw new Error(
          `BERT input: token id ${id} at [${Math.floor(row / T)}, ${row % T}] is outside the vocabulary (0..${this.config.vocab_size - 1})`,
        );
      if (!Number.isInteger(type) || type < 0 || type >= this.config.type_vocab_size)
        throw new Error(
          `BERT input: token type ${type} at [${Math.floor(row / T)}, ${row % T}] is outside 0..${this.config.type_vocab_size - 1}`,
        );
      const o = row * D;
      const w = id * D;
      const p = (row % T) * D;
      const y = type * D;
      for (let d = 0; d < D; d++) out[o + d] = this.wordTable[w + d] + this.positionTable[p + d] + this.typeTable[y + d];
    }
    return tf.tensor2d(out, [B * T, D]);
  }

  /**
   * Last hidden states [batch, time, hidden] for token ids [batch, time] (int32) with
   * `attentionMask` [batch, time] (1 = token, 0 = padding) and optional token type ids
   * (default all 0). Positions are 0..time-1, as in HF BERT with right padding.
   */
  forward(ids: tf.Tensor2D, attentionMask: tf.Tensor2D, tokenTypeIds?: tf.Tensor2D): tf.Tensor3D {
    const [B, T] = ids.shape;
    const c = this.config;
    if (T > c.max_position_embeddings)
      throw new Error(`BERT input has ${T} tokens, more than max_position_embeddings (${c.max_position_embeddings})`);
    for (const [what, t] of [
      ['attention mask', attentionMask],
      ['token type ids', tokenTypeIds],
    ] as const) {
      if (t && (t.shape[0] !== B || t.shape[1] !== T)) throw new Error(`${what} has shape [${t.shape.join(', ')}], expected [${B}, ${T}]`);
    }
    const maskBias = tf.tidy(() => tf.reshape(tf.mul(tf.sub(1, tf.cast(attentionMask, 'float32')), -1e9), [B, 1, 1, T]));
    let h: tf.Tensor2D;
    try {
      h = tf.tidy(() => this.layerNorm(this.embed(ids, tokenTypeIds), 'embeddings.LayerNorm') as tf.Tensor2D);
    } catch (err) {
      maskBias.dispose();
      throw err;
    }
    try {
      // One tidy per layer: a single tidy around the whole stack would keep every layer's
      // intermediates alive until the end, and the wasm heap never shrinks after growing.
      for (let i = 0; i < c.num_hidden_layers; i++) {
        const previous = h;
        h = tf.tidy(() => this.layer(previous, i, B, T, maskBias));
        previous.dispose();
      }
      return tf.reshape(h, [B, T, c.hidden_size]) as tf.Tensor3D;
    } finally {
      // The reshaped output shares h's data, which tfjs keeps alive while either handle exists.
      h.dispose();
      maskBias.dispose();
    }
  }

  dispose(): void {
    for (const t of this.params.values()) t.dispose();
    this.params.clear();
  }
}
