/**
 * Reads a Hugging Face `config.json` of the Qwen2 / Qwen2.5 or Llama family into our ModelConfig.
 *
 * Both config generations are accepted: transformers 4 writes `rope_theta` (+ `rope_scaling`),
 * transformers 5 writes `rope_parameters`. Anything the model code does not implement (partial
 * rotary embeddings, length-dependent rotary scaling, sliding-window attention, an activation
 * other than SiLU, attention dropout, quantised weights) is refused with the offending field named, because silently
 * ignoring it would give a model that loads and then computes something other than the checkpoint.
 */
import type { ModelConfig } from '../tfjs/qwen2.ts';
import { validateConfig } from '../tfjs/qwen2.ts';
import { parseRopeScaling, type RopeScaling } from '../tfjs/rope.ts';

const ARCHITECTURES: Record<ModelConfig['model_type'], string> = {
  qwen2: 'Qwen2ForCausalLM',
  llama: 'LlamaForCausalLM',
};

/** Defaults of transformers' Qwen2Config / LlamaConfig for keys a config.json may leave out. */
const DEFAULTS: Record<ModelConfig['model_type'], { rope_theta: number; rms_norm_eps: number; max_position_embeddings: number }> = {
  qwen2: { rope_theta: 10000, rms_norm_eps: 1e-6, max_position_embeddings: 32768 },
  llama: { rope_theta: 10000, rms_norm_eps: 1e-6, max_position_embeddings: 2048 },
};

type Json = Record<string, unknown>;

const isObject = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);

/**
 * The rotary base and scaling from either config generation. Unscaled ("default"), linear,
 * llama3 and YaRN rotary embeddings are computed (rope.ts); anything else is refused.
 * As in transformers, a non-null `rope_scaling` takes precedence over `rope_parameters`.
 */
function rope(raw: Json, where: string, fallbackTheta: number, maxPositions: number): { theta: number; scaling: RopeScaling | null } {
  let theta: unknown = raw.rope_theta;
  // transformers prefers a top-level original_max_position_embeddings (Phi-3 style) to the entry's own.
  const topContext = typeof raw.original_max_position_embeddings === 'number' ? raw.original_max_position_embeddings : undefined;
  const readScaling = (entry: Json, key: string): RopeScaling | null => {
    const scaling = parseRopeScaling(entry, key, where, topContext ?? maxPositions, maxPositions);
    if (scaling && topContext !== undefined && 'original_max_position_embeddings' in scaling)
      scaling.original_max_position_embeddings = topContext;
    return scaling;
  };
  let scaling: RopeScaling | null = null;
  const params = raw.rope_parameters;
  if (params !== undefined && params !== null) {
    if (!isObject(params)) throw new Error(`${where}: "rope_parameters" must be an object (got ${JSON.stringify(params)})`);
    // transformers 5 allows one entry per attention type; we only have full attention.
    if (isObject(params.full_attention))
      throw new Error(`${where}: "rope_parameters" is nested by attention type; only one global entry is implemented`);
    const partial = params.partial_rotary_factor;
    if (partial !== undefined && partial !== null && partial !== 1)
      throw new Error(`${where}: "rope_parameters.partial_rotary_factor" ${JSON.stringify(partial)} is not implemented (only 1)`);
    if (params.rope_theta !== undefined) theta = params.rope_theta;
    scaling = readScaling(params, 'rope_parameters');
  }
  const legacy = raw.rope_scaling;
  if (legacy !== undefined && legacy !== null) {
    if (!isObject(legacy)) throw new Error(`${where}: "rope_scaling" must be an object or null (got ${JSON.stringify(legacy)})`);
    scaling = readScaling(legacy, 'rope_scaling');
  }
  if (raw.partial_rotary_factor !== undefined && raw.partial_rotary_factor !== null && raw.partial_rotary_factor !== 1) {
    throw new Error(`${where}: "partial_rotary_factor" ${JSON.stringify(raw.partial_rotary_factor)} is not implemented (only 1)`);
  }
  if (theta === undefined) return { theta: fallbackTheta, scaling };
  if (typeof theta !== 'number' || !(theta > 0))
    throw new Error(`${where}: "rope_theta" must be a positive number (got ${JSON.stringify(theta)})`);
  return { theta, scaling };
}

/** Parses a config.json object; `where` (the file path) prefixes every error. */
export function parseHfConfig(raw: unknown, where = 'config.json'): ModelConfig {
  if (!isObject(raw)) throw new Error(`${where}: expected a JSON object`);
  const modelType = raw.model_type;
  if (modelType !== 'qwen2' && modelType !== 'llama') {
    throw new Error(
      `${where}: "model_type" ${JSON.stringify(modelType)} is not supported (only "qwen2" for Qwen2/Qwen2.5 and "llama" for the Llama family)`,
    );
  }
  const architectures = raw.architectures;
  if (architectures !== undefined && architectures !== null) {
    if (!Array.isArray(architectures) || !architectures.includes(ARCHITECTURES[modelType])) {
      throw new Error(
        `${where}: "architectures" ${JSON.stringify(architectures)} does not include ${ARCHITECTURES[modelType]} (only causal language models load)`,
      );
    }
  }
  const act = raw.hidden_act ?? 'silu';
  if (act !== 'silu') throw new Error(`${where}: "hidden_act" ${JSON.stringify(act)} is not implemented (only "silu")`);
  for (const key of ['attention_dropout', 'hidden_dropout', 'embd_pdrop', 'resid_pdrop'] as const) {
    const v = raw[key];
    if (v !== undefined && v !== null && v !== 0)
      throw new Error(
        `${where}: "${key}" ${JSON.stringify(v)} is not implemented (the engine has no dropout in the base model; set it to 0)`,
      );
  }
  if (raw.quantization_config !== undefined && raw.quantization_config !== null) {
    throw new Error(`${where}: "quantization_config" is present; quantised checkpoints are not supported (use a bf16/fp16/fp32 one)`);
  }
  if (modelType === 'qwen2') {
    if (raw.use_sliding_window === true)
      throw new Error(`${where}: "use_sliding_window" is true; sliding-window attention is not implemented`);
    const layerTypes = raw.layer_types;
    if (Array.isArray(layerTypes)) {
      const odd = layerTypes.findIndex((t) => t !== 'full_attention');
      if (odd >= 0)
        throw new Error(`${where}: "layer_types"[${odd}] is ${JSON.stringify(layerTypes[odd])}; only "full_attention" is implemented`);
    }
  }
  const optionalBool = (key: string): boolean => {
    const v = raw[key];
    if (v === undefined || v === null) return false;
    if (typeof v !== 'boolean') throw new Error(`${where}: "${key}" must be true or false (got ${JSON.stringify(v)})`);
    return v;
  };
  const number = (key: string, fallback?: number): number => {
    const v = raw[key] ?? fallback;
    if (typeof v !== 'number') throw new Error(`${where}: "${key}" must be a number (got ${JSON.stringify(raw[key])})`);
    return v;
  };
  const defaults = DEFAULTS[modelType];
  const maxPositions = number('max_position_embeddings', defaults.max_position_embeddings);
  const rotary = rope(raw, where, defaults.rope_theta, maxPositions);
  const config: ModelConfig = {
    model_type: modelType,
    architectures: [ARCHITECTURES[modelType]],
    vocab_size: number('vocab_size'),
    hidden_size: number('hidden_size'),
    intermediate_size: number('intermediate_size'),
    num_hidden_layers: number('num_hidden_layers'),
    num_attention_heads: number('num_attention_heads'),
    // transformers' default: as many key/value heads as query heads (plain multi-head attention).
    num_key_value_heads: number('num_key_value_heads', raw.num_attention_heads as number),
    max_position_embeddings: maxPositions,
    rms_norm_eps: number('rms_norm_eps', defaults.rms_norm_eps),
    rope_theta: rotary.theta,
    tie_word_embeddings: optionalBool('tie_word_embeddings'),
  };
  if (rotary.scaling) config.rope_scaling = rotary.scaling;
  if (raw.head_dim !== undefined && raw.head_dim !== null) config.head_dim = number('head_dim');
  if (modelType === 'llama') {
    config.attention_bias = optionalBool('attention_bias');
    config.mlp_bias = optionalBool('mlp_bias');
  }
  if (typeof raw.initializer_range === 'number') config.initializer_range = raw.initializer_range;
  if (raw.bos_token_id !== undefined) config.bos_token_id = raw.bos_token_id as number | null;
  if (raw.eos_token_id !== undefined) config.eos_token_id = raw.eos_token_id as number | number[] | null;
  validateConfig(config, where);
  return config;
}
