/**
 * A policy on disk in the Hugging Face layout: `config.json`, `model.safetensors` (or shards with
 * `model.safetensors.index.json`) and `tokenizer.json`, as `transformers` saves Qwen2/Qwen2.5 and
 * Llama models; F32, F16 and BF16 weights are converted to fp32. Loading checks that every
 * parameter the config implies is present with the right shape and a float dtype, and names the
 * file and tensor at fault when it is not. LoRA adapters live in an `adapter/` subdirectory in
 * PEFT's layout, so a saved LoRA policy reloads as it was.
 */
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { tf } from './backend.ts';
import { Qwen2Model, parameterEntries, parameterShapes, type ModelConfig } from './qwen2.ts';
import { parseHfConfig } from '../hf/config.ts';
import {
  modelWeightFiles,
  readSafetensors,
  readSafetensorsHeader,
  toFloat32,
  writeSafetensors,
  type TensorToWrite,
} from '../safetensors.ts';
import { Tokenizer } from '../tokenizer.ts';
import type { TextTokenizer } from '../types.ts';
import { ADAPTER_CONFIG_FILE, loadLoraAdapter, saveLoraAdapter, type LoraConfig } from './lora.ts';
import { writeJsonAtomic } from '../../util/atomic-write.ts';

/** Where saveModelDir puts a LoRA model's adapters, relative to the model directory. */
export const ADAPTER_SUBDIR = 'adapter';
const SINGLE_FILE = 'model.safetensors';
const INDEX_FILE = 'model.safetensors.index.json';
const FLOAT_DTYPES = new Set(['F32', 'F16', 'BF16']);

export async function saveModelDir(dir: string, model: Qwen2Model, tokenizer: TextTokenizer): Promise<void> {
  mkdirSync(dir, { recursive: true });
  const tensors = new Map<string, TensorToWrite>();
  for (const [name, v] of model.params) tensors.set(name, { dtype: 'F32', shape: v.shape, data: (await v.data()) as Float32Array });
  writeSafetensors(join(dir, SINGLE_FILE), tensors, { format: 'pt' });
  writeJsonAtomic(join(dir, 'config.json'), {
    architectures: [model.config.model_type === 'qwen2' ? 'Qwen2ForCausalLM' : 'LlamaForCausalLM'],
    torch_dtype: 'float32',
    ...model.config,
  });
  if (tokenizer instanceof Tokenizer) tokenizer.save(join(dir, 'tokenizer.json'));
  else throw new Error('saveModelDir: only tokenizer.json-backed tokenizers can be saved');
  if (model.lora) await saveLoraAdapter(join(dir, ADAPTER_SUBDIR), model, { baseModelNameOrPath: null });
}

export interface LoadedPolicy {
  model: Qwen2Model;
  tokenizer: Tokenizer;
}

export interface LoadOptions {
  /**
   * A PEFT adapter directory to attach, or false for none. Left out: `<dir>/adapter` when it holds
   * an adapter (what saveModelDir writes for a LoRA model).
   */
  adapter?: string | false;
  /** Fresh adapters to attach when no saved adapter is loaded. */
  lora?: LoraConfig;
  /** Seeds fresh adapters and LoRA dropout. */
  loraSeed?: number;
}

/**
 * The parameters `config` implies, read one weight file at a time (so at most one shard's raw
 * bytes are in memory next to the fp32 variables).
 */
function loadWeights(dir: string, config: ModelConfig): Map<string, tf.Variable> {
  const files = modelWeightFiles(dir);
  checkNamesFirst(dir, config, files);
  const wanted = parameterShapes(config);
  const params = new Map<string, tf.Variable>();
  const foundIn = new Map<string, string>();
  try {
    for (const [file, listed] of files) {
      const listedSet = new Set(listed);
      const { tensors } = readSafetensors(file, { filter: (name) => wanted.has(name) });
      // In the config's parameter order, so the first error reported does not depend on file layout.
      for (const [name, shape] of wanted) {
        const t = tensors.get(name);
        if (!t) continue;
        if (listed.length > 0 && !listedSet.has(name))
          throw new Error(`${file}: holds tensor "${name}" but ${INDEX_FILE} puts it in another shard`);
        if (foundIn.has(name)) throw new Error(`${dir}: tensor "${name}" is in both ${foundIn.get(name)} and ${file}`);
        foundIn.set(name, file);
        if (!FLOAT_DTYPES.has(t.dtype)) throw new Error(`${file}: tensor "${name}" has dtype ${t.dtype}; weights must be F32, F16 or BF16`);
        if (t.shape.join(',') !== shape.join(','))
          throw new Error(`${file}: tensor "${name}" has shape [${t.shape}] but config.json implies [${shape}]`);
        const initial = tf.tensor(toFloat32(t), shape);
        params.set(name, tf.variable(initial, true)); // unnamed: see Qwen2Model.random
        // The variable shares the buffer; without this a second copy of the weights stays alive after the first update.
        initial.dispose();
      }
    }
    for (const name of wanted.keys()) {
      if (!params.has(name)) {
        throw new Error(`${missingWhere(dir, files)}: no tensor "${name}" (needed by config.json)`);
      }
    }
  } catch (e) {
    for (const v of params.values()) v.dispose();
    throw e;
  }
  return params;
}

/**
 * Before any weight is read: every tensor config.json implies is named in the weight files'
 * headers. The config's names are checked in order and the first missing one is named at once,
 * so a config claiming a billion layers is refused without listing them (that took 39 s, then
 * "Map maximum size exceeded").
 */
function checkNamesFirst(dir: string, c: ModelConfig, files: Map<string, string[]>): void {
  const held = new Set<string>();
  for (const file of files.keys()) for (const entry of readSafetensorsHeader(file).entries) held.add(entry.name);
  for (const [name] of parameterEntries(c)) {
    if (held.has(name)) continue;
    let layers = 0;
    for (const h of held) {
      const m = /^model\.layers\.(\d+)\./.exec(h);
      if (m) layers = Math.max(layers, Number(m[1]) + 1);
    }
    const why =
      layers < c.num_hidden_layers ? `; config.json says num_hidden_layers ${c.num_hidden_layers} but the weight files hold ${layers}` : '';
    throw new Error(`${missingWhere(dir, files)}: no tensor "${name}" (needed by config.json)${why}`);
  }
}

/** Where a missing tensor should have been: the one weight file, or the index of the shards. */
function missingWhere(dir: string, files: Map<string, string[]>): string {
  return files.size === 1 ? [...files.keys()][0] : join(dir, INDEX_FILE);
}

export function loadModelDir(dir: string, opts: LoadOptions = {}): LoadedPolicy {
  if (!existsSync(dir)) throw new Error(`model directory not found: ${dir}`);
  const configPath = join(dir, 'config.json');
  if (!existsSync(configPath))
    throw new Error(`${configPath} is missing (a model directory needs config.json, model.safetensors and tokenizer.json)`);
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(configPath, 'utf8'));
  } catch (e) {
    throw new Error(`${configPath} is not valid JSON: ${(e as Error).message}`);
  }
  const config = parseHfConfig(raw, configPath);
  const tokenizerPath = join(dir, 'tokenizer.json');
  if (!existsSync(tokenizerPath)) throw new Error(`${tokenizerPath} is missing`);
  const tokenizer = Tokenizer.fromFile(tokenizerPath);
  if (tokenizer.vocabSize > config.vocab_size)
    throw new Error(`${dir}: tokenizer has ${tokenizer.vocabSize} tokens but config.json says vocab_size ${config.vocab_size}`);
  const model = new Qwen2Model(config, loadWeights(dir, config));
  try {
    const adapterDir =
      opts.adapter === undefined
        ? existsSync(join(dir, ADAPTER_SUBDIR, ADAPTER_CONFIG_FILE))
          ? join(dir, ADAPTER_SUBDIR)
          : null
        : opts.adapter || null;
    if (adapterDir) loadLoraAdapter(adapterDir, model, opts.loraSeed ?? 0);
    else if (opts.lora) model.attachLora(opts.lora, opts.loraSeed ?? 0);
  } catch (e) {
    model.dispose();
    throw e;
  }
  return { model, tokenizer };
}

/** The AdamW moments of a training checkpoint, beside the policy (PyTorch's `optimizer.pt` is the worker's). */
const OPTIMIZER_FILE = 'optimizer.safetensors';

/** What a training checkpoint holds for the tfjs engine: the policy in the Hugging Face layout and the optimiser's state. */
export async function saveTrainingPolicy(dir: string, engine: TrainablePolicy): Promise<void> {
  await saveModelDir(dir, engine.model, engine.tokenizer);
  const opt = engine.optimizer.exportState();
  writeSafetensors(
    join(dir, OPTIMIZER_FILE),
    new Map([...opt.tensors].map(([k, t]) => [k, { dtype: 'F32' as const, shape: t.shape, data: t.data }])),
    { step: String(opt.step) },
  );
}

/** The engine's parts a training checkpoint saves (TfjsEngine has them). */
export interface TrainablePolicy {
  model: Qwen2Model;
  tokenizer: TextTokenizer;
  optimizer: { exportState(): { step: number; tensors: Map<string, { shape: number[]; data: Float32Array }> } };
}

export interface LoadedTrainingPolicy extends LoadedPolicy {
  optimizer: { step: number; tensors: Map<string, { shape: number[]; data: Float32Array }> };
}

/** A training checkpoint saveTrainingPolicy wrote (its trainer state is read by ../../run/trainer-state.ts). */
export function loadTrainingPolicy(dir: string): LoadedTrainingPolicy {
  const optPath = join(dir, OPTIMIZER_FILE);
  if (!existsSync(optPath)) throw new Error(`checkpoint ${dir} is incomplete: ${optPath} is missing`);
  let policy: LoadedPolicy;
  try {
    policy = loadModelDir(dir);
  } catch (e) {
    throw new Error(`checkpoint ${dir} cannot be loaded: ${(e as Error).message}`);
  }
  const opt = readSafetensors(optPath);
  const tensors = new Map<string, { shape: number[]; data: Float32Array }>();
  for (const [k, t] of opt.tensors) tensors.set(k, { shape: t.shape, data: toFloat32(t) });
  return { ...policy, optimizer: { step: Number(opt.metadata.step ?? 0), tensors } };
}
