/**
 * What `empo2 serve <path>` serves: a model directory (config.json, model.safetensors,
 * tokenizer.json), a .gguf file (imported once, see policy/gguf/model-path.ts) or a run
 * directory, whose latest checkpoint is a model directory.
 */
import { existsSync } from 'node:fs';
import { basename, join, resolve } from 'node:path';
import { initBackend } from '../policy/tfjs/backend.ts';
import { loadModelDir } from '../policy/tfjs/checkpoint.ts';
import { resolveModelPath } from '../policy/gguf/model-path.ts';
import { TfjsEngine } from '../policy/tfjs/engine.ts';
import { readLoraAdapter } from '../policy/tfjs/lora.ts';
import { ChatTemplate } from '../policy/chat-template.ts';
import { templateRendersTools } from '../openai/render.ts';
import type { LoadedAdapter } from './lora.ts';
import type { ServedEngine } from './queue.ts';
import { latestCheckpoint } from '../run/checkpoint.ts';
import { END_OF_TEXT, IM_END, endTokenIds } from '../policy/chat-tokens.ts';

export function resolveModelDir(path: string): string {
  if (!existsSync(path)) throw new Error(`${path} does not exist (give a run directory or a model directory)`);
  if (existsSync(join(path, 'checkpoints'))) {
    const latest = latestCheckpoint(path);
    if (!latest) throw new Error(`${path} is a run directory without a checkpoint yet`);
    return latest;
  }
  if (!existsSync(join(path, 'config.json')))
    throw new Error(`${path} is neither a run directory (no checkpoints/) nor a model directory (no config.json)`);
  return path;
}

/** A default served name: the run's or model's folder name, not "iter-000025". */
export function defaultModelName(path: string): string {
  return basename(resolve(path)) || 'empo2';
}

export interface ServedModel {
  engine: TfjsEngine;
  modelDir: string;
  vocabSize: number;
  maxModelLen: number;
  /** The model's chat template where it renders tools itself (Qwen2.5's), for tool conversations; else null. */
  toolTemplate: ChatTemplate | null;
}

/** The chat template of a model directory, where it has one that renders tools itself. */
export function toolTemplateOf(modelDir: string): ChatTemplate | null {
  let template: ChatTemplate;
  try {
    template = ChatTemplate.fromDir(modelDir);
  } catch {
    return null; // no template (the tiny model): tool conversations get the ChatML + Hermes default
  }
  return templateRendersTools(template) ? template : null;
}

export async function loadServedModel(path: string): Promise<ServedModel> {
  await initBackend();
  const modelDir = resolveModelDir(await resolveModelPath(path));
  const { model, tokenizer } = loadModelDir(modelDir);
  // Same end tokens as the trainer's engine, so served samples end where training samples did.
  const ends = endTokenIds(tokenizer);
  const eos = model.config.eos_token_id;
  for (const id of eos == null ? [] : Array.isArray(eos) ? eos : [eos]) if (!ends.includes(id)) ends.push(id);
  if (ends.length === 0)
    throw new Error(
      `${modelDir}: the tokenizer has neither ${IM_END} nor ${END_OF_TEXT} and config.json has no eos_token_id: cannot tell where a response ends`,
    );
  const engine = new TfjsEngine(model, tokenizer, {
    // Serving never steps the optimiser; the engine still wants a configuration.
    optimizer: { lr: 0, beta1: 0.9, beta2: 0.99, eps: 1e-8, weightDecay: 0 },
    maxGradNorm: 0,
    microBatchTokens: 16384,
    endTokens: ends,
    padToken: ends[ends.length - 1],
  });
  return {
    engine,
    modelDir,
    vocabSize: model.config.vocab_size,
    maxModelLen: model.config.max_position_embeddings,
    toolTemplate: toolTemplateOf(modelDir),
  };
}

/**
 * A PEFT LoRA adapter for the served TensorFlow.js model (`empo2 serve --allow-weight-updates`,
 * POST /v1/load_lora_adapter), attached for the requests that name it.
 */
export function readServedAdapter(dir: string, served: ServedEngine): LoadedAdapter {
  if (!(served.engine instanceof TfjsEngine)) throw new Error("this server's engine cannot take LoRA adapters");
  const model = served.engine.model;
  if (model.lora)
    throw new Error('the served model carries LoRA adapters of its own (its adapter/ folder); serve a plain base model to load others');
  const adapters = readLoraAdapter(dir, model);
  return {
    attach: (s) => void (s.engine as TfjsEngine).model.swapLora(adapters),
    detach: (s) => void (s.engine as TfjsEngine).model.swapLora(null),
    dispose: () => adapters.dispose(),
  };
}
