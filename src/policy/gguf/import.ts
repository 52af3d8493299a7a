/**
 * `empo2 import-gguf`: a Llama- or Qwen2-architecture GGUF file to the Hugging Face layout the
 * engines load (config.json, generation_config.json, tokenizer.json, tokenizer_config.json with
 * the chat template, model.safetensors in float32, or shards with an index for a large model) plus
 * gguf-import.json saying where it came from.
 *
 * llama.cpp's converter permutes the rows of a Llama model's q_proj and k_proj so that its rotary
 * kernel can rotate adjacent pairs; the import undoes that, as transformers' GGUF loader does
 * (Qwen2 files are written unpermuted). The output is written into a temporary folder beside the
 * target and renamed into place when complete, so an interrupted import leaves nothing half-made.
 */
import { existsSync, mkdirSync, readdirSync, renameSync, rmSync, statSync } from 'node:fs';
import { basename, dirname, join, resolve } from 'node:path';
import { parseHfConfig } from '../hf/config.ts';
import { parameterShapes } from '../tfjs/qwen2.ts';
import { writeJsonAtomic } from '../../util/atomic-write.ts';
import { writeSafetensors, type TensorToWrite } from '../safetensors.ts';
import { Tokenizer } from '../tokenizer.ts';
import { configFromGguf } from './config.ts';
import { ggmlTypeName } from './dequantize.ts';
import { openGguf, readTensor, type GgufFile, type GgufTensor } from './file.ts';
import { tokenizerFromGguf } from './tokenizer.ts';

/** Written last: its presence marks a complete import, and it records the source. */
export const IMPORT_RECORD = 'gguf-import.json';
/** Bumped when the output of the same file would change, so caches made by older code are redone. */
export const IMPORT_FORMAT = 1;

const GLOBAL_TENSORS: Record<string, string> = {
  'token_embd.weight': 'model.embed_tokens.weight',
  'output_norm.weight': 'model.norm.weight',
  'output.weight': 'lm_head.weight',
};
const LAYER_TENSORS: Record<string, string> = {
  'attn_norm.weight': 'input_layernorm.weight',
  'ffn_norm.weight': 'post_attention_layernorm.weight',
  'attn_q.weight': 'self_attn.q_proj.weight',
  'attn_q.bias': 'self_attn.q_proj.bias',
  'attn_k.weight': 'self_attn.k_proj.weight',
  'attn_k.bias': 'self_attn.k_proj.bias',
  'attn_v.weight': 'self_attn.v_proj.weight',
  'attn_v.bias': 'self_attn.v_proj.bias',
  'attn_output.weight': 'self_attn.o_proj.weight',
  'attn_output.bias': 'self_attn.o_proj.bias',
  'ffn_gate.weight': 'mlp.gate_proj.weight',
  'ffn_gate.bias': 'mlp.gate_proj.bias',
  'ffn_up.weight': 'mlp.up_proj.weight',
  'ffn_up.bias': 'mlp.up_proj.bias',
  'ffn_down.weight': 'mlp.down_proj.weight',
  'ffn_down.bias': 'mlp.down_proj.bias',
};

/** The Hugging Face name of a GGUF tensor, or undefined for one this import does not know. */
export function hfTensorName(name: string): string | undefined {
  if (Object.hasOwn(GLOBAL_TENSORS, name)) return GLOBAL_TENSORS[name];
  const layer = /^blk\.(\d+)\.(.+)$/.exec(name);
  if (layer && Object.hasOwn(LAYER_TENSORS, layer[2])) return `model.layers.${Number(layer[1])}.${LAYER_TENSORS[layer[2]]}`;
  return undefined;
}

/**
 * Undoes llama.cpp's rotary permutation of q/k rows: within each head, GGUF row 2j+i holds the
 * original row i·(headDim/2)+j. `values` is [rows, cols] row-major (cols 1 for a bias).
 */
export function unpermuteRotaryRows(values: Float32Array, heads: number, rows: number): Float32Array {
  const cols = values.length / rows;
  const headRows = rows / heads;
  const halfRows = headRows / 2;
  if (!Number.isInteger(cols) || !Number.isInteger(halfRows))
    throw new Error(`cannot undo the rotary permutation: ${rows} rows are not ${heads} heads of an even size`);
  const out = new Float32Array(values.length);
  for (let h = 0; h < heads; h++) {
    for (let i = 0; i < 2; i++) {
      for (let j = 0; j < halfRows; j++) {
        const from = (h * headRows + 2 * j + i) * cols;
        const to = (h * headRows + i * halfRows + j) * cols;
        out.set(values.subarray(from, from + cols), to);
      }
    }
  }
  return out;
}

export interface ImportOptions {
  /** Largest safetensors file, in bytes of float32 data; more makes shards with an index. Default 2 GiB. */
  maxShardBytes?: number;
  /** Replace an existing output folder (default: refuse). */
  replace?: boolean;
  /** Progress lines (default: none). */
  log?: (line: string) => void;
}

export interface ImportResult {
  dir: string;
  architecture: string;
  parameters: number;
  /** Tensors per GGML type, e.g. { Q4_1: 210, F32: 61, Q8_0: 1 }. */
  types: Record<string, number>;
}

interface PlannedTensor {
  source: GgufTensor;
  name: string;
  /** Heads whose rotary permutation is undone, or 0. */
  unpermuteHeads: number;
}

/** Every GGUF tensor mapped, checked against the shapes config.json implies, in file order. */
function planTensors(file: GgufFile, config: Record<string, unknown>, where: string): PlannedTensor[] {
  const modelConfig = parseHfConfig(config, `${where} (config from its metadata)`);
  const expected = parameterShapes(modelConfig);
  const permuted = modelConfig.model_type === 'llama';
  const plan: PlannedTensor[] = [];
  for (const source of file.tensors) {
    // Llama 3's rotary factors: turned into config.json's rope_scaling by configFromGguf.
    if (source.name === 'rope_freqs.weight') continue;
    const name = hfTensorName(source.name);
    if (name === undefined)
      throw new Error(`${where}: tensor "${source.name}" has no counterpart in a ${modelConfig.architectures?.[0]} checkpoint`);
    const shape = expected.get(name);
    if (!shape) throw new Error(`${where}: tensor "${source.name}" (${name}) is not used by the model its metadata describes`);
    if (shape.join(',') !== source.shape.join(','))
      throw new Error(`${where}: tensor "${source.name}" has shape [${source.shape}] but the metadata implies [${shape}]`);
    let unpermuteHeads = 0;
    if (permuted && /\.self_attn\.q_proj\./.test(name)) unpermuteHeads = modelConfig.num_attention_heads;
    if (permuted && /\.self_attn\.k_proj\./.test(name)) unpermuteHeads = modelConfig.num_key_value_heads;
    plan.push({ source, name, unpermuteHeads });
  }
  const present = new Set(plan.map((p) => p.name));
  for (const name of expected.keys())
    if (!present.has(name)) throw new Error(`${where}: no tensor for ${name}, which the metadata implies`);
  return plan;
}

function shardFiles(plan: PlannedTensor[], maxBytes: number): PlannedTensor[][] {
  const shards: PlannedTensor[][] = [[]];
  let bytes = 0;
  for (const t of plan) {
    const size = t.source.elements * 4;
    if (shards[shards.length - 1].length > 0 && bytes + size > maxBytes) {
      shards.push([]);
      bytes = 0;
    }
    shards[shards.length - 1].push(t);
    bytes += size;
  }
  return shards;
}

/** Imports `ggufPath` into the folder `outDir` (see the module comment). */
export async function importGguf(ggufPath: string, outDir: string, opts: ImportOptions = {}): Promise<ImportResult> {
  const log = opts.log ?? (() => {});
  const out = resolve(outDir);
  if (existsSync(out) && !opts.replace && (!statSync(out).isDirectory() || readdirSync(out).length > 0)) {
    throw new Error(`${out} already exists and is not empty (remove it, or choose another output folder)`);
  }
  const file = await openGguf(ggufPath);
  const { config, generation, architecture } = configFromGguf(file);
  const { tokenizer, tokenizerConfig } = tokenizerFromGguf(
    file.metadata,
    config.vocab_size as number,
    config.max_position_embeddings as number,
  );
  const plan = planTensors(file, config, ggufPath);
  // Loads it as the engines will, so a tokenizer they cannot use fails here, not at the first episode.
  Tokenizer.fromJSON(tokenizer, `${ggufPath} (tokenizer from its metadata)`);

  const partial = join(dirname(out), `.${basename(out)}.partial-${process.pid}-${Date.now()}`);
  mkdirSync(partial, { recursive: true });
  try {
    writeJsonAtomic(join(partial, 'config.json'), config);
    writeJsonAtomic(join(partial, 'generation_config.json'), generation);
    writeJsonAtomic(join(partial, 'tokenizer.json'), tokenizer);
    writeJsonAtomic(join(partial, 'tokenizer_config.json'), tokenizerConfig);

    const shards = shardFiles(plan, opts.maxShardBytes ?? 2 ** 31);
    const shardName = (i: number) =>
      shards.length === 1
        ? 'model.safetensors'
        : `model-${String(i + 1).padStart(5, '0')}-of-${String(shards.length).padStart(5, '0')}.safetensors`;
    const weightMap: Record<string, string> = {};
    let done = 0;
    for (const [i, shard] of shards.entries()) {
      const tensors = new Map<string, TensorToWrite>();
      for (const t of shard) {
        let values = readTensor(file, t.source);
        if (t.unpermuteHeads > 0) values = unpermuteRotaryRows(values, t.unpermuteHeads, t.source.shape[0]);
        tensors.set(t.name, { dtype: 'F32', shape: t.source.shape, data: values });
        weightMap[t.name] = shardName(i);
        done += t.source.elements;
      }
      writeSafetensors(join(partial, shardName(i)), tensors, { format: 'pt' });
      log(`  wrote ${shardName(i)} (${shard.length} tensors, ${done.toLocaleString()} parameters so far)`);
    }
    if (shards.length > 1)
      writeJsonAtomic(join(partial, 'model.safetensors.index.json'), { metadata: { total_size: done * 4 }, weight_map: weightMap });

    const types: Record<string, number> = {};
    for (const t of file.tensors) types[ggmlTypeName(t.type)] = (types[ggmlTypeName(t.type)] ?? 0) + 1;
    const source = statSync(file.path);
    writeJsonAtomic(join(partial, IMPORT_RECORD), {
      format: IMPORT_FORMAT,
      source: resolve(file.path),
      source_bytes: source.size,
      source_mtime_ms: source.mtimeMs,
      architecture,
      name: file.metadata.optionalString('general.name') ?? null,
      parameters: done,
      tensor_types: types,
    });

    if (existsSync(out)) {
      // Swap: the old folder is moved aside first, so a failure here leaves one of the two whole.
      const old = `${partial}.old`;
      renameSync(out, old);
      renameSync(partial, out);
      rmSync(old, { recursive: true, force: true });
    } else {
      renameSync(partial, out);
    }
    return { dir: out, architecture, parameters: done, types };
  } finally {
    rmSync(partial, { recursive: true, force: true });
  }
}
