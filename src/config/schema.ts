/**
 * Every training option, its default and a one-line description, in one zod schema. Unknown keys
 * are refused (strict objects) so a typo never silently falls back to a default.
 */
import { z } from 'zod';

const strict = <T extends z.ZodRawShape>(shape: T) => z.object(shape).strict();
const prob = z.number().min(0).max(1);

export const EnvSchema = strict({
  name: z.enum(['builtin', 'scienceworld', 'webshop']).default('builtin').describe('environment family'),
  tasks: z.array(z.string()).nullable().default(null).describe('task names to train on (null: all tasks of the environment)'),
  train_variations: z.number().int().positive().nullable().default(null).describe('use only the first K train-split variations of each task (null: all)'),
  eval_split: z.enum(['train', 'dev', 'test']).default('test').describe('split used for held-out evaluation'),
  eval_variations: z.number().int().positive().default(10).describe('evaluate on the first K variations of each task in eval_split'),
  max_steps: z.number().int().positive().nullable().default(null).describe("episode step limit (null: the environment's per-task limit)"),
  options: z.record(z.string(), z.unknown()).default({}).describe('extra options passed to the environment factory'),
});

export const ModelSchema = strict({
  path: z.string().nullable().default(null).describe('directory with config.json, model.safetensors, tokenizer.json (null: build the default tiny model)'),
  hidden_size: z.number().int().positive().default(96).describe('default tiny model: width'),
  intermediate_size: z.number().int().positive().default(256).describe('default tiny model: MLP width'),
  num_hidden_layers: z.number().int().positive().default(2).describe('default tiny model: layers'),
  num_attention_heads: z.number().int().positive().default(4).describe('default tiny model: query heads'),
  num_key_value_heads: z.number().int().positive().default(2).describe('default tiny model: key/value heads (grouped-query attention)'),
  vocab_size: z.number().int().min(300).default(512).describe('default tiny model: byte-level BPE vocabulary size, trained on environment text'),
  tie_word_embeddings: z.boolean().default(true).describe('default tiny model: share input and output embeddings'),
});

export const PromptSchema = strict({
  history: z.number().int().min(0).default(2).describe('past (observation, action) turns kept in the prompt'),
  show_valid_actions: z.boolean().default(false).describe('list the valid actions in each user turn'),
  system: z.string().default('').describe('system message (empty: none)'),
});

export const RolloutSchema = strict({
  group_size: z.number().int().positive().default(8).describe('N: rollouts per task (the GRPO group)'),
  tasks_per_batch: z.number().int().positive().default(4).describe('(task, variation) groups per iteration'),
  temperature: z.number().min(0).default(1.0).describe('sampling temperature for training rollouts'),
  top_p: z.number().gt(0).max(1).default(1.0).describe('nucleus sampling for training rollouts'),
  eval_temperature: z.number().min(0).default(0.4).describe('sampling temperature for evaluation (0: greedy)'),
  max_tokens: z.number().int().positive().default(32).describe('maximum tokens of one action'),
  constrained: z.boolean().default(true).describe("decode only the environment's valid actions"),
});

export const AlgoSchema = strict({
  name: z.enum(['grpo']).default('grpo').describe('training algorithm'),
  clip_low: z.number().min(0).default(0.2).describe('ε_low: lower clip range of the ratio'),
  clip_high: z.number().min(0).default(0.3).describe('ε_high: upper clip range of the ratio'),
  dual_clip: z.number().gt(1).nullable().default(10).describe('c: dual-clip bound for negative advantages (null: off)'),
  kl_coef: z.number().min(0).default(0).describe('β: KL(πθ‖πref) penalty weight (0: no reference model)'),
  low_prob_delta: z.number().gt(0).lt(1).nullable().default(null).describe('δ: drop tokens whose probability under πθ is below δ (null: off)'),
  seq_min_logprob: z.number().max(0).nullable().default(null).describe('drop a response whose minimum old log-prob is below this (null: off; reference: -5)'),
  minibatches: z.number().int().positive().default(1).describe('optimiser steps per epoch over the batch'),
  epochs: z.number().int().positive().default(1).describe('passes over each batch'),
  reward_scale: z.number().positive().default(0.01).describe('multiply environment rewards by this (scores are 0-100)'),
  skip_zero_advantage: z.boolean().default(true).describe('leave out steps whose advantage is 0 (all rollouts of the group scored alike)'),
});

export const OptimSchema = strict({
  lr: z.number().positive().default(1e-3).describe('AdamW learning rate (the paper uses 1e-6 for a 7B model)'),
  weight_decay: z.number().min(0).default(0.0).describe('AdamW decoupled weight decay'),
  beta1: z.number().min(0).lt(1).default(0.9).describe('AdamW β1'),
  beta2: z.number().min(0).lt(1).default(0.99).describe('AdamW β2'),
  eps: z.number().positive().default(1e-8).describe('AdamW ε'),
  max_grad_norm: z.number().min(0).default(1.0).describe('clip the global gradient norm (0: off)'),
  micro_batch_tokens: z.number().int().positive().default(16384).describe('padded tokens per forward/backward pass (memory bound; results do not depend on it)'),
});

export const TrainSchema = strict({
  iterations: z.number().int().positive().default(25).describe('training iterations (rollout + update)'),
  eval_every: z.number().int().min(0).default(5).describe('evaluate every K iterations (0: only at the end)'),
  checkpoint_every: z.number().int().positive().default(5).describe('save a checkpoint every K iterations'),
  keep_checkpoints: z.number().int().positive().default(3).describe('how many recent checkpoints to keep'),
});

export const ConfigSchema = strict({
  seed: z.number().int().min(0).default(0).describe('seed for model init, task sampling and action sampling'),
  run_dir: z.string().default('runs/default').describe('where checkpoints, metrics.jsonl and the evaluation table go'),
  env: EnvSchema.prefault({}),
  model: ModelSchema.prefault({}),
  prompt: PromptSchema.prefault({}),
  rollout: RolloutSchema.prefault({}),
  algo: AlgoSchema.prefault({}),
  optim: OptimSchema.prefault({}),
  train: TrainSchema.prefault({}),
});

export type Config = z.infer<typeof ConfigSchema>;
