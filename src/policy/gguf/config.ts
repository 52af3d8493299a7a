/**
 * A Hugging Face `config.json` and `generation_config.json` from a GGUF file's metadata (the
 * `<arch>.*` keys llama.cpp's converter writes) and tensor directory, for the two architectures
 * the engine implements: "llama" (Llama 2/3, SmolLM, Mistral-style dense models) and "qwen2"
 * (Qwen2 / Qwen2.5). Whatever the model code would not reproduce (mixture of experts, partial
 * rotary embeddings, rotary factors that are not Llama 3's, unusual YaRN settings) is refused with
 * the key or tensor named, rather than imported into a model that computes something else.
 */
import { readTensor, type GgufFile } from './file.ts';

export const ARCHITECTURES = { llama: 'LlamaForCausalLM', qwen2: 'Qwen2ForCausalLM' } as const;
export type GgufArchitecture = keyof typeof ARCHITECTURES;

export interface ImportedConfig {
  architecture: GgufArchitecture;
  /** config.json */
  config: Record<string, unknown>;
  /** generation_config.json */
  generation: Record<string, unknown>;
  headDim: number;
}

function architectureOf(file: GgufFile): GgufArchitecture {
  const arch = file.metadata.string('general.architecture');
  if (!Object.hasOwn(ARCHITECTURES, arch)) {
    throw new Error(
      `${file.path}: general.architecture "${arch}" is not supported (only ${Object.keys(ARCHITECTURES)
        .map((a) => `"${a}"`)
        .join(' and ')})`,
    );
  }
  return arch as GgufArchitecture;
}

/** rope_scaling for config.json from `<arch>.rope.scaling.*`, or null when unscaled. */
function ropeScaling(file: GgufFile, arch: string): Record<string, unknown> | null {
  const m = file.metadata;
  const typeKey = `${arch}.rope.scaling.type`;
  const type = m.optionalString(typeKey) ?? 'none';
  const factorKey = `${arch}.rope.scaling.factor`;
  switch (type) {
    case 'none':
      return null;
    case 'linear':
      return { rope_type: 'linear', factor: m.number(factorKey) };
    case 'yarn': {
      // transformers' defaults; a file that states other values would need them passed on.
      for (const [key, expected] of [
        [`${arch}.rope.scaling.yarn_beta_fast`, 32],
        [`${arch}.rope.scaling.yarn_beta_slow`, 1],
        [`${arch}.rope.scaling.yarn_log_multiplier`, 0.1],
      ] as const) {
        const v = m.optionalNumber(key);
        if (v !== undefined && Math.abs(v - expected) > 1e-6)
          throw new Error(`${file.path}: metadata "${key}" is ${v}; only ${expected} (transformers' YaRN default) is implemented`);
      }
      const attnFactor = m.optionalNumber(`${arch}.rope.scaling.attn_factor`);
      if (attnFactor !== undefined && attnFactor !== 1)
        throw new Error(`${file.path}: metadata "${arch}.rope.scaling.attn_factor" is ${attnFactor}; only 1 is implemented`);
      return {
        rope_type: 'yarn',
        factor: m.number(factorKey),
        original_max_position_embeddings: m.count(`${arch}.rope.scaling.original_context_length`),
      };
    }
    default:
      throw new Error(`${file.path}: metadata "${typeKey}" is "${type}"; only none, linear and yarn are implemented`);
  }
}

/**
 * Llama 3.1-style rotary scaling from the per-dimension factors llama.cpp's converter stores in
 * `rope_freqs.weight` instead of the config's rope_scaling. Its formula: factor 1 for wavelengths
 * below L / high_freq_factor, `factor` above L / low_freq_factor, and 1 / ((1 − s) / factor + s)
 * in between, with s = (L / wavelength − low) / (high − low). `factor` is the largest entry; s is
 * linear in 1 / wavelength, so the entries in between give (high − low) / L and low / L, and
 * L = 8192 (the converter's default) fixes the three; any L with the same ratios gives the same
 * frequencies. The recomputed factors must match every stored one, else the tensor is refused.
 */
export function llama3ScalingFromFactors(
  factors: Float32Array,
  theta: number,
  headDim: number,
  what: string,
): Record<string, unknown> | null {
  const half = headDim / 2;
  if (factors.length !== half) throw new Error(`${what} has ${factors.length} entries; heads of ${headDim} dimensions need ${half}`);
  const factor = Math.max(...factors);
  if (factors.every((f) => Math.abs(f - 1) < 1e-6)) return null;
  // As the converter computes them: float32 inverse frequencies, wavelengths in double.
  const wavelength = [...factors.keys()].map((i) => (2 * Math.PI) / Math.fround(1 / Math.fround(theta ** Math.fround((2 * i) / headDim))));
  const between = [...factors.keys()].filter((i) => factors[i] > 1 + 1e-6 && factors[i] < factor * (1 - 1e-6));
  const refuse = (why: string) => new Error(`${what} does not hold Llama 3 rotary factors (${why}); the import converts only those`);
  if (between.length < 2)
    throw refuse(`${between.length} entries lie between 1 and the largest, ${factor}; two are needed to recover the frequency band`);
  // Least squares of s = a / wavelength + b over the entries in between.
  const xs = between.map((i) => 1 / wavelength[i]);
  const ys = between.map((i) => (1 / factors[i] - 1 / factor) / (1 - 1 / factor));
  const mean = (v: number[]) => v.reduce((a, b) => a + b, 0) / v.length;
  const mx = mean(xs);
  const my = mean(ys);
  const a = xs.reduce((acc, x, k) => acc + (x - mx) * (ys[k] - my), 0) / xs.reduce((acc, x) => acc + (x - mx) ** 2, 0);
  const b = my - a * mx;
  const context = 8192;
  const round = (v: number) => Number(v.toPrecision(6));
  const low = round((-b * context) / a);
  const high = round(low + context / a);
  if (!(low > 0 && high > low)) throw refuse(`the band fitted has low_freq_factor ${low} and high_freq_factor ${high}`);
  factors.forEach((stored, i) => {
    const w = wavelength[i];
    const s = (context / w - low) / (high - low);
    const expected = w < context / high ? 1 : w > context / low ? factor : 1 / ((1 - s) / factor + s);
    if (Math.abs(expected - stored) > 1e-5 * stored)
      throw refuse(
        `entry ${i} is ${stored}, the Llama 3 formula with factor ${factor}, low_freq_factor ${low}, high_freq_factor ${high} gives ${expected}`,
      );
  });
  return { rope_type: 'llama3', factor, low_freq_factor: low, high_freq_factor: high, original_max_position_embeddings: context };
}

export function configFromGguf(file: GgufFile): ImportedConfig {
  const m = file.metadata;
  const arch = architectureOf(file);
  const key = (k: string) => `${arch}.${k}`;
  const experts = m.optionalCount(key('expert_count')) ?? 0;
  if (experts > 0)
    throw new Error(`${file.path}: metadata "${key('expert_count')}" is ${experts}: mixture-of-experts models are not supported`);
  const hidden = m.count(key('embedding_length'));
  const heads = m.count(key('attention.head_count'));
  const kvHeads = m.optionalCount(key('attention.head_count_kv')) ?? heads;
  if (heads === 0 || kvHeads === 0 || heads % kvHeads !== 0)
    throw new Error(
      `${file.path}: metadata "${key('attention.head_count')}" ${heads} is not a multiple of "${key('attention.head_count_kv')}" ${kvHeads}`,
    );
  const headDim = m.optionalCount(key('attention.key_length')) ?? hidden / heads;
  if (!Number.isInteger(headDim))
    throw new Error(
      `${file.path}: metadata "${key('embedding_length')}" ${hidden} is not a multiple of "${key('attention.head_count')}" ${heads}`,
    );
  const valueDim = m.optionalCount(key('attention.value_length'));
  if (valueDim !== undefined && valueDim !== headDim)
    throw new Error(
      `${file.path}: metadata "${key('attention.value_length')}" ${valueDim} differs from the key length ${headDim}; not implemented`,
    );
  const rotaryDims = m.optionalCount(key('rope.dimension_count'));
  if (rotaryDims !== undefined && rotaryDims !== headDim)
    throw new Error(
      `${file.path}: metadata "${key('rope.dimension_count')}" is ${rotaryDims} but heads have ${headDim} dimensions: partial rotary embeddings are not implemented`,
    );

  const ropeTheta = m.optionalNumber(key('rope.freq_base')) ?? 10000;
  let scaling = ropeScaling(file, arch);
  const ropeFactors = file.byName.get('rope_freqs.weight');
  if (ropeFactors) {
    if (scaling)
      throw new Error(
        `${file.path}: both metadata "${key('rope.scaling.type')}" and tensor "rope_freqs.weight" scale the rotary embeddings`,
      );
    scaling = llama3ScalingFromFactors(readTensor(file, ropeFactors), ropeTheta, headDim, `${file.path}: tensor "rope_freqs.weight"`);
  }

  const embedding = file.byName.get('token_embd.weight');
  if (!embedding) throw new Error(`${file.path}: tensor "token_embd.weight" is missing`);
  if (embedding.shape.length !== 2 || embedding.shape[1] !== hidden)
    throw new Error(`${file.path}: tensor "token_embd.weight" has shape [${embedding.shape}], expected [vocab, ${hidden}]`);
  const vocab = embedding.shape[0];
  const statedVocab = m.optionalCount(key('vocab_size'));
  if (statedVocab !== undefined && statedVocab !== vocab)
    throw new Error(`${file.path}: metadata "${key('vocab_size')}" is ${statedVocab} but "token_embd.weight" has ${vocab} rows`);

  const tokenId = (k: string): number | null => {
    const id = m.optionalCount(`tokenizer.ggml.${k}`);
    if (id === undefined) return null;
    if (id >= vocab) throw new Error(`${file.path}: metadata "tokenizer.ggml.${k}" is ${id}, outside the vocabulary of ${vocab}`);
    return id;
  };
  const bos = tokenId('bos_token_id');
  const eos = tokenId('eos_token_id');
  const pad = tokenId('padding_token_id');
  // Chat models end a turn with an end-of-turn token that may differ from EOS (Llama 3's <|eot_id|>).
  const stops = [eos, tokenId('eot_token_id'), tokenId('eom_token_id')].filter(
    (id, i, all): id is number => id !== null && all.indexOf(id) === i,
  );

  const config: Record<string, unknown> = {
    architectures: [ARCHITECTURES[arch]],
    model_type: arch,
    vocab_size: vocab,
    hidden_size: hidden,
    intermediate_size: m.count(key('feed_forward_length')),
    num_hidden_layers: m.count(key('block_count')),
    num_attention_heads: heads,
    num_key_value_heads: kvHeads,
    head_dim: headDim,
    max_position_embeddings: m.count(key('context_length')),
    rms_norm_eps: m.number(key('attention.layer_norm_rms_epsilon')),
    rope_theta: ropeTheta,
    rope_scaling: scaling,
    hidden_act: 'silu',
    // llama.cpp writes the output projection only when it is not the embedding matrix.
    tie_word_embeddings: !file.byName.has('output.weight'),
    bos_token_id: bos,
    eos_token_id: eos,
    pad_token_id: pad,
    torch_dtype: 'float32',
  };
  if (arch === 'llama') {
    config.attention_bias = file.byName.has('blk.0.attn_q.bias');
    config.mlp_bias = file.byName.has('blk.0.ffn_up.bias');
  } else {
    config.use_sliding_window = false;
  }
  const generation: Record<string, unknown> = {
    bos_token_id: bos,
    eos_token_id: stops.length === 1 ? stops[0] : stops.length === 0 ? null : stops,
    pad_token_id: pad,
  };
  return { architecture: arch, config, generation, headDim };
}
