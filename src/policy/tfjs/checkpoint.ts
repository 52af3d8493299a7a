/**
 * A policy on disk in the Hugging Face layout: `config.json`, `model.safetensors` (or shards with
 * an index) and `tokenizer.json`. Loading checks that every parameter the config implies is
 * present with the right shape, and says which file is at fault when it is not.
 */
import { existsSync, mkdirSync, readFileSync, writeFileSync, renameSync } from 'node:fs';
import { join } from 'node:path';
import { tf } from './backend.ts';
import { Qwen2Model, parameterShapes, validateConfig, type ModelConfig } from './qwen2.ts';
import { readSafetensorsDir, toFloat32, writeSafetensors, type TensorToWrite } from '../safetensors.ts';
import { Tokenizer } from '../tokenizer.ts';
import type { TextTokenizer } from '../types.ts';

export function writeJsonAtomic(path: string, value: unknown): void {
  const tmp = `${path}.tmp-${process.pid}`;
  writeFileSync(tmp, JSON.stringify(value, null, 2) + '\n');
  renameSync(tmp, path);
}

export async function saveModelDir(dir: string, model: Qwen2Model, tokenizer: TextTokenizer): Promise<void> {
  mkdirSync(dir, { recursive: true });
  const tensors = new Map<string, TensorToWrite>();
  for (const [name, v] of model.params) tensors.set(name, { dtype: 'F32', shape: v.shape, data: (await v.data()) as Float32Array });
  writeSafetensors(join(dir, 'model.safetensors'), tensors, { format: 'pt' });
  writeJsonAtomic(join(dir, 'config.json'), { architectures: [model.config.model_type === 'qwen2' ? 'Qwen2ForCausalLM' : 'LlamaForCausalLM'], torch_dtype: 'float32', ...model.config });
  if (tokenizer instanceof Tokenizer) tokenizer.save(join(dir, 'tokenizer.json'));
  else throw new Error('saveModelDir: only tokenizer.json-backed tokenizers can be saved');
}

export interface LoadedPolicy {
  model: Qwen2Model;
  tokenizer: Tokenizer;
}

export function loadModelDir(dir: string): LoadedPolicy {
  if (!existsSync(dir)) throw new Error(`model directory not found: ${dir}`);
  const configPath = join(dir, 'config.json');
  if (!existsSync(configPath)) throw new Error(`${configPath} is missing (a model directory needs config.json, model.safetensors and tokenizer.json)`);
  let config: ModelConfig;
  try {
    config = JSON.parse(readFileSync(configPath, 'utf8')) as ModelConfig;
  } catch (e) {
    throw new Error(`${configPath} is not valid JSON: ${(e as Error).message}`);
  }
  // Hugging Face's defaults for keys a config.json may leave out.
  config.tie_word_embeddings ??= false;
  config.max_position_embeddings ??= 32768;
  validateConfig(config, configPath);
  const tokenizerPath = join(dir, 'tokenizer.json');
  if (!existsSync(tokenizerPath)) throw new Error(`${tokenizerPath} is missing`);
  const tokenizer = Tokenizer.fromFile(tokenizerPath);
  const contents = readSafetensorsDir(dir);
  const params = new Map<string, tf.Variable>();
  try {
    for (const [name, shape] of parameterShapes(config)) {
      const t = contents.tensors.get(name);
      if (!t) throw new Error(`${dir}: weights have no tensor "${name}" (needed by config.json)`);
      if (t.shape.join(',') !== shape.join(',')) throw new Error(`${dir}: tensor "${name}" has shape [${t.shape}] but config.json implies [${shape}]`);
      params.set(name, tf.variable(tf.tensor(toFloat32(t), shape), true)); // unnamed: see Qwen2Model.random
    }
  } catch (e) {
    for (const v of params.values()) v.dispose();
    throw e;
  }
  if (tokenizer.vocabSize > config.vocab_size) throw new Error(`${dir}: tokenizer has ${tokenizer.vocabSize} tokens but config.json says vocab_size ${config.vocab_size}`);
  return { model: new Qwen2Model(config, params), tokenizer };
}
