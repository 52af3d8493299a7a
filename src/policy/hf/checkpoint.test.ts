/**
 * Loading Hugging Face model directories without Python: both config generations, refusal of
 * features the model does not compute (named by field), sharded weights with an index, 16-bit
 * weights converted exactly, and errors naming the file and tensor for broken checkpoints.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { copyFileSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, truncateSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseHfConfig } from './config.ts';
import { initBackend, tf } from '../tfjs/backend.ts';
import { loadModelDir, saveModelDir } from '../tfjs/checkpoint.ts';
import { Qwen2Model, countParameters, parameterShapes, type ModelConfig } from '../tfjs/qwen2.ts';
import { readSafetensors, writeSafetensors, type TensorToWrite } from '../safetensors.ts';
import { trainByteLevelBPE, Tokenizer } from '../tokenizer.ts';

const QWEN_V5 = {
  architectures: ['Qwen2ForCausalLM'],
  model_type: 'qwen2',
  attention_dropout: 0.0,
  hidden_act: 'silu',
  hidden_size: 32,
  intermediate_size: 64,
  num_attention_heads: 4,
  num_hidden_layers: 2,
  num_key_value_heads: 2,
  vocab_size: 300,
  rms_norm_eps: 1e-6,
  rope_parameters: { rope_theta: 1000000.0, rope_type: 'default' },
  layer_types: ['full_attention', 'full_attention'],
  use_sliding_window: false,
  sliding_window: null,
  tie_word_embeddings: true,
  dtype: 'bfloat16',
};
const LLAMA_V4 = {
  architectures: ['LlamaForCausalLM'],
  model_type: 'llama',
  hidden_size: 32,
  intermediate_size: 48,
  num_attention_heads: 4,
  num_hidden_layers: 2,
  num_key_value_heads: 1,
  vocab_size: 300,
  rms_norm_eps: 1e-5,
  rope_theta: 500000.0,
  rope_scaling: null,
  head_dim: 16,
  attention_bias: false,
  mlp_bias: false,
  pretraining_tp: 1,
  torch_dtype: 'bfloat16',
};

/** IEEE half bits -> number, written out here so the test does not share the loader's conversion. */
function f16ToNumber(bits: number): number {
  const e = (bits >> 10) & 31;
  const m = bits & 1023;
  const v = e === 0 ? m * 2 ** -24 : e === 31 ? (m ? NaN : Infinity) : (1 + m / 1024) * 2 ** (e - 15);
  return bits & 0x8000 ? -v : v;
}

describe('config.json', () => {
  it('reads transformers 5 (rope_parameters) and 4 (rope_theta) configs with their defaults', () => {
    expect(parseHfConfig(QWEN_V5)).toMatchObject({
      model_type: 'qwen2',
      rope_theta: 1e6,
      tie_word_embeddings: true,
      max_position_embeddings: 32768,
    });
    expect(parseHfConfig(LLAMA_V4)).toMatchObject({
      model_type: 'llama',
      rope_theta: 5e5,
      head_dim: 16,
      attention_bias: false,
      mlp_bias: false,
      tie_word_embeddings: false,
    });
    const { rope_theta: _drop, ...noTheta } = LLAMA_V4;
    expect(parseHfConfig({ ...noTheta, num_key_value_heads: undefined }).num_key_value_heads).toBe(4);
    expect(parseHfConfig(noTheta).rope_theta).toBe(10000);
  });

  it('reads scaled rotary embeddings from either generation (Llama 3.2 and Qwen2.5 long-context style)', () => {
    const llama32 = {
      ...LLAMA_V4,
      max_position_embeddings: 131072,
      rope_scaling: {
        factor: 32.0,
        high_freq_factor: 4.0,
        low_freq_factor: 1.0,
        original_max_position_embeddings: 8192,
        rope_type: 'llama3',
      },
    };
    expect(parseHfConfig(llama32).rope_scaling).toEqual({
      rope_type: 'llama3',
      factor: 32,
      low_freq_factor: 1,
      high_freq_factor: 4,
      original_max_position_embeddings: 8192,
    });
    const qwenYarn = {
      ...QWEN_V5,
      rope_parameters: { rope_type: 'yarn', rope_theta: 1e6, factor: 4, original_max_position_embeddings: 32768 },
    };
    expect(parseHfConfig(qwenYarn)).toMatchObject({
      rope_theta: 1e6,
      rope_scaling: { rope_type: 'yarn', factor: 4, original_max_position_embeddings: 32768 },
    });
    // A top-level original_max_position_embeddings wins, as in transformers.
    expect(parseHfConfig({ ...qwenYarn, original_max_position_embeddings: 4096 }).rope_scaling).toMatchObject({
      original_max_position_embeddings: 4096,
    });
    expect(parseHfConfig(QWEN_V5).rope_scaling).toBeUndefined();
  });

  const refusals: [string, Record<string, unknown>, string][] = [
    [
      'dynamic NTK rope scaling',
      { ...LLAMA_V4, rope_scaling: { type: 'dynamic', factor: 2 } },
      '"rope_scaling" rope_type "dynamic" is not implemented',
    ],
    [
      'a llama3 entry without its band',
      { ...LLAMA_V4, rope_scaling: { rope_type: 'llama3', factor: 8 } },
      '"rope_scaling.low_freq_factor" must be a positive number',
    ],
    [
      'rope_parameters per attention type',
      { ...QWEN_V5, rope_parameters: { full_attention: { rope_type: 'default', rope_theta: 1e6 } } },
      '"rope_parameters" is nested by attention type',
    ],
    [
      'partial rotary',
      { ...QWEN_V5, rope_parameters: { rope_type: 'default', rope_theta: 1e6, partial_rotary_factor: 0.5 } },
      '"rope_parameters.partial_rotary_factor"',
    ],
    ['sliding window', { ...QWEN_V5, use_sliding_window: true }, '"use_sliding_window" is true'],
    ['a sliding layer', { ...QWEN_V5, layer_types: ['full_attention', 'sliding_attention'] }, '"layer_types"[1] is "sliding_attention"'],
    ['GELU', { ...LLAMA_V4, hidden_act: 'gelu' }, '"hidden_act" "gelu" is not implemented'],
    ['attention dropout', { ...LLAMA_V4, attention_dropout: 0.1 }, '"attention_dropout" 0.1 is not implemented'],
    ['quantised', { ...LLAMA_V4, quantization_config: { quant_method: 'gptq' } }, '"quantization_config" is present'],
    ['Mistral', { ...LLAMA_V4, model_type: 'mistral' }, '"model_type" "mistral" is not supported'],
    [
      'a sequence classifier',
      { ...LLAMA_V4, architectures: ['LlamaForSequenceClassification'] },
      '"architectures" ["LlamaForSequenceClassification"] does not include LlamaForCausalLM',
    ],
    ['a missing size', { ...LLAMA_V4, hidden_size: undefined }, '"hidden_size" must be a number'],
  ];
  for (const [what, raw, message] of refusals) {
    it(`refuses ${what}, naming the field`, () => expect(() => parseHfConfig(raw, '/m/config.json')).toThrow(`/m/config.json: ${message}`));
  }
});

describe('model directories', () => {
  let tokenizer: Tokenizer;
  let single: string;
  let model: Qwen2Model;
  const dirs: string[] = [];
  const tempDir = () => {
    const d = mkdtempSync(join(tmpdir(), 'empo2-hfload-'));
    dirs.push(d);
    return d;
  };
  const logits = (m: Qwen2Model) =>
    tf.tidy(() => {
      const n = 6;
      const mask = new Float32Array(n * n).map((_, i) => (i % n <= Math.floor(i / n) ? 0 : -1e9));
      const { hidden } = m.forward(
        tf.tensor2d([[3, 14, 15, 92, 65, 35]], [1, n], 'int32'),
        tf.tensor2d([[0, 1, 2, 3, 4, 5]], [1, n], 'int32'),
        tf.tensor4d(mask, [1, 1, n, n]),
      );
      return Array.from(m.logits(hidden.reshape([n, 32]) as tf.Tensor2D).dataSync());
    });

  /** Rewrites `src`'s weights as shards of two tensors each with an index, like transformers' max_shard_size. */
  function shard(src: string, dtype: 'F32' | 'F16' | 'BF16'): string {
    const d = tempDir();
    for (const f of ['config.json', 'tokenizer.json']) copyFileSync(join(src, f), join(d, f));
    const { tensors } = readSafetensors(join(src, 'model.safetensors'));
    const names = [...tensors.keys()].sort();
    const weightMap: Record<string, string> = {};
    const count = Math.ceil(names.length / 2);
    for (let i = 0; i < count; i++) {
      const file = `model-${String(i + 1).padStart(5, '0')}-of-${String(count).padStart(5, '0')}.safetensors`;
      const part = new Map<string, TensorToWrite>();
      for (const name of names.slice(2 * i, 2 * i + 2)) {
        const t = tensors.get(name)!;
        part.set(name, { dtype, shape: t.shape, data: t.data });
        weightMap[name] = file;
      }
      writeSafetensors(join(d, file), part, { format: 'pt' });
    }
    writeFileSync(join(d, 'model.safetensors.index.json'), JSON.stringify({ metadata: { total_size: 0 }, weight_map: weightMap }));
    return d;
  }

  beforeAll(async () => {
    await initBackend();
    tokenizer = Tokenizer.fromJSON(
      trainByteLevelBPE(['open red box', 'take yellow hat'], { vocabSize: 270, specialTokens: ['<|endoftext|>'] }),
    );
    const config: ModelConfig = {
      model_type: 'llama',
      vocab_size: 300,
      hidden_size: 32,
      intermediate_size: 48,
      num_hidden_layers: 2,
      num_attention_heads: 4,
      num_key_value_heads: 1,
      head_dim: 16,
      max_position_embeddings: 128,
      rms_norm_eps: 1e-5,
      rope_theta: 5e5,
      tie_word_embeddings: false,
      attention_bias: true,
      initializer_range: 0.3,
    };
    model = Qwen2Model.random(config, 9);
    single = tempDir();
    await saveModelDir(single, model, tokenizer);
  });
  afterAll(() => {
    model.dispose();
    dirs.forEach((d) => rmSync(d, { recursive: true, force: true }));
  });

  it('sharded F32 weights load bit-identically; BF16 and F16 shards equal the rounded weights exactly', () => {
    const f32 = loadModelDir(shard(single, 'F32')).model;
    expect(logits(f32)).toEqual(logits(model));
    for (const dtype of ['BF16', 'F16'] as const) {
      const d = shard(single, dtype);
      const loaded = loadModelDir(d).model;
      // Reference: a model built from the shards' 16-bit values converted independently of the loader.
      const rounded = new Map<string, tf.Variable>();
      for (const f of readdirSync(d).filter((f) => f.endsWith('.safetensors'))) {
        for (const [name, t] of readSafetensors(join(d, f)).tensors) {
          expect(t.dtype).toBe(dtype);
          const bits = t.data as Uint16Array;
          const values =
            dtype === 'BF16' ? new Float32Array(Uint32Array.from(bits, (b) => b << 16).buffer) : Float32Array.from(bits, f16ToNumber);
          rounded.set(name, tf.variable(tf.tensor(values, t.shape), true));
        }
      }
      expect(logits(loaded)).toEqual(logits(new Qwen2Model(model.config, rounded)));
      // And rounding really happened: close to the fp32 model, not equal.
      const reference = logits(model);
      const diff = Math.max(...logits(loaded).map((x, i) => Math.abs(x - reference[i])));
      expect(diff).toBeGreaterThan(0);
      expect(diff).toBeLessThan(dtype === 'F16' ? 0.05 : 0.5);
      for (const v of rounded.values()) v.dispose();
      loaded.dispose();
    }
    f32.dispose();
  });

  it('a model with scaled rotary embeddings saves and loads with its scaling (same logits)', async () => {
    const scaled = new Qwen2Model(
      {
        ...model.config,
        rope_scaling: { rope_type: 'llama3', factor: 8, low_freq_factor: 1, high_freq_factor: 4, original_max_position_embeddings: 16 },
      },
      model.params,
    );
    const d = tempDir();
    await saveModelDir(d, scaled, tokenizer);
    const loaded = loadModelDir(d).model;
    expect(loaded.config.rope_scaling).toEqual(scaled.config.rope_scaling);
    expect(logits(loaded)).toEqual(logits(scaled));
    expect(logits(loaded)).not.toEqual(logits(model));
    loaded.dispose();
  });

  it('a missing tensor names the index; a truncated shard names the shard; an integer weight names file and tensor', () => {
    const d = shard(single, 'F32');
    const indexPath = join(d, 'model.safetensors.index.json');
    const index = JSON.parse(readFileSync(indexPath, 'utf8'));
    const victim = 'model.layers.1.mlp.up_proj.weight';
    const victimFile = join(d, index.weight_map[victim]);
    const { tensors } = readSafetensors(victimFile);
    tensors.delete(victim);
    writeSafetensors(victimFile, tensors);
    delete index.weight_map[victim];
    writeFileSync(indexPath, JSON.stringify(index));
    expect(() => loadModelDir(d)).toThrow(`${indexPath}: no tensor "${victim}" (needed by config.json)`);

    const d2 = shard(single, 'F32');
    const shardFile = join(
      d2,
      JSON.parse(readFileSync(join(d2, 'model.safetensors.index.json'), 'utf8')).weight_map['model.layers.0.self_attn.q_proj.weight'],
    );
    truncateSync(shardFile, statSync(shardFile).size - 10);
    expect(() => loadModelDir(d2)).toThrow(
      new RegExp(`^${shardFile.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}: tensor ".*": data_offsets .* run past the end of the data`),
    );

    const d3 = shard(single, 'F32');
    const i3 = JSON.parse(readFileSync(join(d3, 'model.safetensors.index.json'), 'utf8'));
    const name = 'model.norm.weight';
    const f3 = join(d3, i3.weight_map[name]);
    const t3 = readSafetensors(f3).tensors;
    const norm = t3.get(name)!;
    t3.set(name, { dtype: 'I32', shape: norm.shape, data: Int32Array.from(norm.data as Float32Array) });
    writeSafetensors(f3, t3);
    expect(() => loadModelDir(d3)).toThrow(`${f3}: tensor "${name}" has dtype I32; weights must be F32, F16 or BF16`);
  });

  it('an unknown dtype in a header names the file and tensor', () => {
    const d = tempDir();
    for (const f of ['config.json', 'tokenizer.json', 'model.safetensors']) copyFileSync(join(single, f), join(d, f));
    const file = join(d, 'model.safetensors');
    const bytes = readFileSync(file);
    const headerLength = Number(bytes.readBigUInt64LE(0));
    const header = bytes
      .subarray(8, 8 + headerLength)
      .toString('utf8')
      .replace('"dtype":"F32"', '"dtype":"X32"'); // same length: offsets stay valid
    writeFileSync(file, Buffer.concat([bytes.subarray(0, 8), Buffer.from(header), bytes.subarray(8 + headerLength)]));
    expect(() => loadModelDir(d)).toThrow(new RegExp(`${file.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}: tensor ".*": unknown dtype "X32"`));
  });

  it('a config.json claiming a billion layers is refused at the first missing tensor, without listing the rest', () => {
    const d = tempDir();
    for (const f of ['config.json', 'tokenizer.json', 'model.safetensors']) copyFileSync(join(single, f), join(d, f));
    const cfg = JSON.parse(readFileSync(join(d, 'config.json'), 'utf8'));
    writeFileSync(join(d, 'config.json'), JSON.stringify({ ...cfg, num_hidden_layers: 1e9 }));
    const started = performance.now();
    expect(() => loadModelDir(d)).toThrow(
      `${join(d, 'model.safetensors')}: no tensor "model.layers.2.input_layernorm.weight" (needed by config.json); config.json says num_hidden_layers 1000000000 but the weight files hold 2`,
    );
    expect(performance.now() - started).toBeLessThan(1_000);
  });

  it('countParameters counts what parameterShapes lists, for every layout', () => {
    const base = {
      vocab_size: 300,
      hidden_size: 32,
      intermediate_size: 48,
      num_hidden_layers: 3,
      num_attention_heads: 4,
      num_key_value_heads: 2,
    };
    const common = { max_position_embeddings: 128, rms_norm_eps: 1e-6, rope_theta: 1e4 };
    const layouts: ModelConfig[] = [
      { model_type: 'qwen2', ...base, ...common, tie_word_embeddings: true },
      { model_type: 'qwen2', ...base, ...common, tie_word_embeddings: false, head_dim: 16 },
      { model_type: 'llama', ...base, ...common, tie_word_embeddings: false },
      { model_type: 'llama', ...base, ...common, tie_word_embeddings: true, attention_bias: true, mlp_bias: true },
    ];
    for (const c of layouts) {
      let listed = 0;
      for (const shape of parameterShapes(c).values()) listed += shape.reduce((a, b) => a * b, 1);
      expect(countParameters(c), JSON.stringify(c)).toBe(listed);
    }
  });

  it('a config.json refusal surfaces through loadModelDir with the file path', () => {
    const d = tempDir();
    for (const f of ['config.json', 'tokenizer.json', 'model.safetensors']) copyFileSync(join(single, f), join(d, f));
    const cfg = JSON.parse(readFileSync(join(d, 'config.json'), 'utf8'));
    writeFileSync(join(d, 'config.json'), JSON.stringify({ ...cfg, rope_scaling: { type: 'dynamic', factor: 2 } }));
    expect(() => loadModelDir(d)).toThrow(`${join(d, 'config.json')}: "rope_scaling" rope_type "dynamic" is not implemented`);
  });
});
