/**
 * Engine construction for training, evaluation and adaptation: the TensorFlow.js engine or the
 * PyTorch worker (./engine-choice.ts decides), from a fresh tiny model, a model directory or a
 * checkpoint, and the remote engine for rollouts through a server. The layers above build engines
 * only here (through ./index.ts), so which engine runs, and how it saves itself, stays inside policy/.
 */
import { existsSync, renameSync, rmSync } from 'node:fs';
import { totalmem } from 'node:os';
import { join } from 'node:path';
import { ConfigError } from '../config/load.ts';
import type { Config } from '../config/schema.ts';
import { requireEndTokenIds, endTokenIds } from './chat-tokens.ts';
import { resolveModelPath } from './gguf/model-path.ts';
import { tf } from './tfjs/backend.ts';
import { ADAPTER_SUBDIR, loadModelDir, loadTrainingPolicy, saveModelDir, saveTrainingPolicy } from './tfjs/checkpoint.ts';
import { TfjsEngine } from './tfjs/engine.ts';
import { countParameters, type ModelConfig } from './tfjs/qwen2.ts';
import { buildTinyPolicy } from './tfjs/tiny.ts';
import { Tokenizer } from './tokenizer.ts';
import type { TorchEngineOptions } from './torch/engine.ts';
import type { PolicyEngine } from './types.ts';
import { chooseEngine } from './engine-choice.ts';

/** The config's AdamW settings and LoRA settings, in the engines' option shapes (both engines take the same). */
const optimizerSettings = (cfg: Config) => ({
  lr: cfg.optim.lr,
  beta1: cfg.optim.beta1,
  beta2: cfg.optim.beta2,
  eps: cfg.optim.eps,
  weightDecay: cfg.optim.weight_decay,
});
const loraSettings = (cfg: Config) =>
  cfg.model.lora
    ? { r: cfg.model.lora.r, alpha: cfg.model.lora.alpha, dropout: cfg.model.lora.dropout, targetModules: cfg.model.lora.target_modules }
    : null;

/**
 * Refuses a default tiny model that cannot be held, before the corpus and tokenizer are built for
 * it: every weight needs 16 bytes while training (value, gradient, two AdamW moments), and the
 * WebAssembly backend keeps all tensors in one heap of at most 4 GiB.
 */
export function checkTinyModelFits(cfg: Config): void {
  const m = cfg.model;
  const config = {
    model_type: 'qwen2',
    vocab_size: m.vocab_size,
    hidden_size: m.hidden_size,
    intermediate_size: m.intermediate_size,
    num_hidden_layers: m.num_hidden_layers,
    num_attention_heads: m.num_attention_heads,
    num_key_value_heads: m.num_key_value_heads,
    tie_word_embeddings: m.tie_word_embeddings,
  } as ModelConfig;
  const parameters = countParameters(config);
  const wasm = tf.getBackend() === 'wasm';
  const limit = wasm ? 4 * 2 ** 30 : totalmem();
  if (parameters * 16 <= limit) return;
  const sizes = (['hidden_size', 'intermediate_size', 'num_hidden_layers', 'vocab_size'] as const)
    .map((k) => `model.${k}=${m[k]}`)
    .join(', ');
  throw new ConfigError(
    `${sizes}: the default tiny model would have ${parameters.toLocaleString('en')} parameters, ${((parameters * 16) / 2 ** 30).toFixed(1)} GiB to train ` +
      `(weights, gradients and AdamW moments), more than the ${wasm ? '4 GiB WebAssembly heap of the tfjs engine' : `${(limit / 2 ** 30).toFixed(0)} GiB of memory of this machine`}; make it smaller, or give a pretrained model.path`,
  );
}

/**
 * Where a fresh default tiny model gets its tokenizer's training text: the environment's (envs/
 * `environmentCorpus`), which the caller supplies, since the policy does not know the environments.
 * Asked only when the tiny model is built.
 */
export type TinyCorpus = () => Promise<string[]>;

/** A TensorFlow.js engine: from a checkpoint (weights and optimiser state), or fresh from model.path or the default tiny model. */
export async function createEngine(
  cfg: Config,
  from: 'fresh' | string,
  corpus?: TinyCorpus,
): Promise<{ engine: TfjsEngine; loaded?: ReturnType<typeof loadTrainingPolicy> }> {
  const engineOptions = (endTokens: number[], pad: number) => ({
    optimizer: optimizerSettings(cfg),
    maxGradNorm: cfg.optim.max_grad_norm,
    microBatchTokens: cfg.optim.micro_batch_tokens,
    endTokens,
    padToken: pad,
    lora: loraSettings(cfg) ?? undefined,
    loraSeed: cfg.seed,
  });
  if (from !== 'fresh') {
    const loaded = loadTrainingPolicy(from);
    const e = endTokenIds(loaded.tokenizer);
    const engine = new TfjsEngine(loaded.model, loaded.tokenizer, engineOptions(e, e[e.length - 1]));
    engine.optimizer.importState(loaded.optimizer.step, loaded.optimizer.tensors);
    return { engine, loaded };
  }
  if (!cfg.model.path) checkTinyModelFits(cfg);
  const { model, tokenizer } = cfg.model.path ? loadModelDir(await resolveModelPath(cfg.model.path)) : await buildTiny(cfg, corpus);
  const e = requireEndTokenIds(tokenizer, 'the tokenizer');
  return { engine: new TfjsEngine(model, tokenizer, engineOptions(e, e[e.length - 1])) };
}

async function buildTiny(cfg: Config, corpus: TinyCorpus | undefined) {
  if (!corpus) throw new Error('the default tiny model needs a corpus to build its tokenizer from (or give model.path)');
  return buildTinyPolicy(await corpus(), cfg.model, cfg.seed);
}

/** An engine for training, how it saves itself into a checkpoint, and one line describing it. */
export interface TrainingEngine {
  engine: PolicyEngine;
  /** Writes the policy and its optimiser state into a checkpoint folder (the trainer adds its own state beside them). */
  writePolicy(dir: string): Promise<void>;
  description: string;
  /**
   * Whether the engine's calls hold this process's thread (TensorFlow.js runs here; the worker in a
   * process of its own): a Ctrl-C cannot be handled in the middle of such a call.
   */
  holdsTheThread: boolean;
  /**
   * The training activation budget in MiB as the engine resolved it (model.torch.activation_mb, or on
   * CPU the worker's share of the memory free at its start); null where there is none (tfjs, a GPU).
   */
  activationMb: number | null;
  /** Starts the optimiser's moments afresh, as RL does after the tip warm-up; absent where the engine has no call for it (the worker). */
  resetOptimizer?(): void;
  close(): Promise<void>;
}

/** The engine a run trains, fresh (`from` 'fresh') or from a checkpoint folder; `corpus` is asked only for a fresh tiny model. */
export async function createTrainingEngine(cfg: Config, from: 'fresh' | string, corpus?: TinyCorpus): Promise<TrainingEngine> {
  const choice = chooseEngine(cfg, cfg.model.path && (await resolveModelPath(cfg.model.path)));
  const why = choice.reason ? ` [${choice.reason}]` : '';
  if (choice.engine === 'tfjs') {
    const { engine } = await createEngine(cfg, from, corpus);
    return {
      engine,
      writePolicy: (dir) => saveTrainingPolicy(dir, engine),
      description: `tfjs engine, ${countParameters(engine.model.config).toLocaleString()} parameters${cfg.model.lora ? ` (LoRA r=${cfg.model.lora.r})` : ''}${why}`,
      holdsTheThread: true,
      activationMb: null,
      resetOptimizer: () => engine.optimizer.importState(0, new Map()),
      close: async () => engine.dispose(),
    };
  }
  // The worker loads a directory: the default tiny model is built once and saved for it.
  let baseDir = cfg.model.path && (await resolveModelPath(cfg.model.path));
  if (!baseDir) {
    baseDir = join(cfg.run_dir, 'initial-model');
    if (!existsSync(join(baseDir, 'config.json'))) {
      checkTinyModelFits(cfg);
      const tiny = await buildTiny(cfg, corpus);
      // Written aside and renamed, so a kill in the middle never leaves a directory that looks complete.
      const tmp = `${baseDir}.tmp-${process.pid}`;
      rmSync(tmp, { recursive: true, force: true });
      await saveModelDir(tmp, tiny.model, tiny.tokenizer);
      tiny.model.dispose();
      rmSync(baseDir, { recursive: true, force: true });
      renameSync(tmp, baseDir);
    }
  }
  const lora = loraSettings(cfg);
  // A checkpoint holds the full model (or, with LoRA, the adapter) and optimizer.pt.
  const policyDir = from === 'fresh' ? null : lora ? join(from, 'adapter') : from;
  const modelDir = policyDir && !lora ? policyDir : baseDir;
  const engine = await startTorchWorker(cfg, modelDir, {
    adapterDir: lora && policyDir ? policyDir : undefined,
    optimizerState: policyDir ? join(policyDir, 'optimizer.pt') : undefined,
    gradientCheckpointing: cfg.model.torch.gradient_checkpointing,
    lora,
  });
  const info = engine.info;
  return {
    engine,
    writePolicy: (dir) => engine.save(lora ? join(dir, 'adapter') : dir, { optimizer: true }),
    description: `torch worker on ${info.device} (${info.dtype}), ${info.parameters.toLocaleString()} parameters, ${info.trainable_parameters.toLocaleString()} trainable${info.activation_mb ? `, activation budget ${info.activation_mb.toLocaleString('en')} MiB` : ''}${why}`,
    holdsTheThread: false,
    activationMb: info.activation_mb ?? null,
    close: () => engine.close(),
  };
}

/** The PyTorch worker on `modelDir` with the config's optimiser and worker settings, plus `extra`. */
async function startTorchWorker(cfg: Config, modelDir: string, extra: Partial<TorchEngineOptions>) {
  const { TorchEngine } = await import('./torch/engine.ts');
  const ends = requireEndTokenIds(Tokenizer.fromFile(join(modelDir, 'tokenizer.json')), `${modelDir}/tokenizer.json`);
  const t = cfg.model.torch;
  return TorchEngine.start({
    modelDir,
    optimizer: optimizerSettings(cfg),
    maxGradNorm: cfg.optim.max_grad_norm,
    microBatchTokens: cfg.optim.micro_batch_tokens,
    endTokens: ends,
    padToken: ends[ends.length - 1],
    device: t.device,
    dtype: t.dtype,
    autocast: t.autocast,
    baseBf16: t.base_bf16,
    seed: cfg.seed,
    threads: t.threads ?? undefined,
    launcher: t.launcher ?? undefined,
    activationMb: t.activation_mb ?? undefined,
    ...extra,
  });
}

/**
 * An engine that plays (evaluation, adaptation) the model in `dir`: a model directory, or a checkpoint,
 * which with LoRA on the PyTorch worker holds only `adapter/` and takes its base from model.path.
 */
export async function createPlayingEngine(cfg: Config, dir: string): Promise<{ engine: PolicyEngine; description: string }> {
  const hasWeights = existsSync(join(dir, 'model.safetensors'));
  const adapterDir = existsSync(join(dir, ADAPTER_SUBDIR, 'adapter_config.json')) ? join(dir, ADAPTER_SUBDIR) : null;
  let modelDir = dir;
  if (!hasWeights && adapterDir) {
    if (!cfg.model.path)
      throw new ConfigError(
        `${dir} holds a LoRA adapter without its base model: give the base as model.path (the run's config.yaml has it)`,
      );
    modelDir = await resolveModelPath(cfg.model.path);
  }
  const choice = chooseEngine(cfg, modelDir);
  const why = choice.reason ? ` [${choice.reason}]` : '';
  if (choice.engine === 'tfjs') {
    const loaded = loadModelDir(modelDir, { adapter: adapterDir ?? false });
    const e = requireEndTokenIds(loaded.tokenizer, `${modelDir}/tokenizer.json`);
    const engine = new TfjsEngine(loaded.model, loaded.tokenizer, {
      endTokens: e,
      padToken: e[e.length - 1],
      optimizer: optimizerSettings(cfg),
      maxGradNorm: cfg.optim.max_grad_norm,
      microBatchTokens: cfg.optim.micro_batch_tokens,
    });
    return {
      engine,
      description: `tfjs engine, ${countParameters(engine.model.config).toLocaleString()} parameters${adapterDir ? ' with its LoRA adapter' : ''}${why}`,
    };
  }
  const engine = await startTorchWorker(cfg, modelDir, {
    adapterDir: adapterDir ?? undefined,
    lora: adapterDir ? (loraSettings(cfg) ?? undefined) : undefined,
  });
  return {
    engine,
    description: `torch worker on ${engine.info.device}, ${engine.info.parameters.toLocaleString()} parameters${adapterDir ? ' with its LoRA adapter' : ''}${why}`,
  };
}

/** Rollouts through OpenAI-compatible servers while the update runs here (./remote/rollouts.ts). */
export async function createRemoteRollouts(cfg: Config, engine: PolicyEngine, log: (line: string) => void) {
  const { remoteRollouts } = await import('./remote/rollouts.ts');
  return remoteRollouts(cfg, engine, log);
}
