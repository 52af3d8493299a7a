/**
 * The policy engine on PyTorch: a Python worker process (workers/torch/worker.py) that holds the
 * model, spoken to with JSON lines over its stdin/stdout (workers/torch/PROTOCOL.md). Tokenising
 * stays here, with the same tokenizer.json as the TypeScript engine, so both engines see the same
 * token ids; the worker only ever receives ids.
 *
 * One request at a time is in flight in practice (the trainer awaits each call), but responses
 * are matched by id so pipelining would also be correct. A call that times out stops the worker:
 * its state (half an optimiser step?) is unknown, so continuing would be worse than failing.
 */
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { join } from 'node:path';
import type { ObjectiveConfig } from '../../algo/objective-config.ts';
import type { AdamWConfig } from '../tfjs/adamw.ts';
import type { LoraConfig } from '../tfjs/lora.ts';
import { Tokenizer } from '../tokenizer.ts';
import { rowConstraints } from '../constrained.ts';
import type {
  Generation,
  GenerateOptions,
  PolicyEngine,
  ProgressListener,
  ScoredSequence,
  StepResumeOptions,
  TrainSequence,
  TrainStats,
} from '../types.ts';
import { PYTHON_SETUP_ADVICE, TORCH_WORKER_SCRIPT, projectPython, pythonProblem } from './python.ts';

/** The TypeScript engine's LoRA settings, so one config object serves both engines. */
export type LoraSettings = LoraConfig;

/** PEFT's spelling: a list of names, the string 'all-linear', or a regular expression string. */
function peftTargetModules(lora: LoraSettings): string[] | string {
  if (lora.targetRegex !== undefined) return lora.targetRegex;
  if (lora.targetModules.length === 1 && lora.targetModules[0] === 'all-linear') return 'all-linear';
  return lora.targetModules;
}

export interface TorchEngineOptions {
  /** Hugging Face layout: config.json, safetensors weights, tokenizer.json. */
  modelDir: string;
  optimizer: AdamWConfig;
  /** Clip the global gradient norm to this (0 disables). */
  maxGradNorm: number;
  /** Upper bound on padded tokens per forward pass; bounds memory, not the result. */
  microBatchTokens: number;
  /** Token ids that end a response. */
  endTokens: number[];
  padToken: number;
  /** 'cpu' (default), 'cuda', or 'auto' (cuda when torch sees a GPU). */
  device?: 'cpu' | 'cuda' | 'auto';
  /** Storage type of the weights (default float32). */
  dtype?: 'float32' | 'bfloat16' | 'float16';
  /** Mixed precision on GPU: weights stay in `dtype`, matrix products run in this type. */
  autocast?: 'bfloat16' | 'float16' | null;
  /**
   * CPU: LoRA's frozen base layers multiply in bf16 and everything else stays fp32 (needs AVX512-BF16 or
   * AMX, dtype float32, no autocast, LoRA; refused otherwise). Default false: it moves log-probs by up to
   * 0.15 against fp32 (results/smollm2-speed/bf16-parity-2026-12-02.md).
   */
  baseBf16?: boolean;
  gradientCheckpointing?: boolean | null;
  attnImplementation?: 'sdpa' | 'eager' | 'flash_attention_2';
  /** Train LoRA adapters only (new adapters with these settings). */
  lora?: LoraSettings | null;
  /** Continue training an existing PEFT adapter directory. */
  adapterDir?: string;
  /** optimizer.pt written by save({ optimizer: true }), to resume exactly (rng_state.pt beside it restores dropout's generator). */
  optimizerState?: string;
  /** Seeds LoRA initialisation and dropout. */
  seed?: number;
  /** torch intra-op threads (CPU). */
  threads?: number;
  /**
   * Memory for the KV caches kept between generate calls (GenerateOptions.cacheKeys), in MiB
   * (default 4096; 0 keeps none). Least recently used keys are dropped beyond it; the worker's
   * `info.kv_cache.bytes_per_token` says how many tokens that holds.
   */
  kvCacheMb?: number;
  /**
   * Bound on one training micro-batch's activations, in MiB (default on CPU: a third of the memory
   * available when the worker starts, in whole MiB, reported as `info.activation_mb`; on GPUs none).
   * Long packed episodes are split under it, and a sequence that alone exceeds it is refused, naming
   * gradient checkpointing.
   */
  activationMb?: number;
  /** Interpreter; default projectPython(). */
  python?: string;
  /**
   * Command that starts the worker script instead of `python`, e.g.
   * ['torchrun', '--nproc_per_node=8'] for FSDP over 8 GPUs (the script path is appended).
   */
  launcher?: string[];
  /** Time allowed for Python to start and load the model (default 10 minutes). */
  startTimeoutMs?: number;
  /**
   * Time a call may go without an answer or a progress report (default 30 minutes). `train_step` and
   * `logprobs` report after every micro-batch, so an update of any size runs to its end while a
   * worker that hangs is still stopped.
   */
  callTimeoutMs?: number;
  /** Receives the worker's progress reports: micro-batches done of the request's total (also setProgressListener). */
  onProgress?: ProgressListener;
  /** Receives the worker's stderr lines (logs, warnings); by default only the tail is kept for errors. */
  onLog?: (line: string) => void;
}

export interface WorkerInfo {
  model_type: string;
  vocab_size: number;
  parameters: number;
  trainable_parameters: number;
  device: string;
  dtype: string;
  autocast: string | null;
  /** Whether the frozen base multiplies in bf16 (baseBf16, resolved). */
  base_bf16: boolean;
  lora: boolean;
  gradient_checkpointing: boolean | null;
  world_size: number;
  /** Whether the worker takes trunk-plus-branches sequences (SDPA attention, one process, no sliding-window layers). */
  branches?: boolean;
  threads: number;
  /** The training activation budget in MiB (activationMb, or on CPU what the worker took from free memory); null: none. */
  activation_mb: number | null;
  kv_cache: { keys: number; bytes: number; max_bytes: number; bytes_per_token: number; prefix_reuse: boolean };
}

/** Prompt tokens the worker ran through the model and those it took from kept caches, since start. */
export interface PrefillCounts {
  prefilledTokens: number;
  reusedTokens: number;
}

export interface SaveResult {
  dir: string;
  files: string[];
  format: 'model' | 'peft-adapter';
}

interface Pending {
  op: string;
  resolve: (value: unknown) => void;
  reject: (error: Error) => void;
  timer: NodeJS.Timeout;
  /** Starts the silence timer again (on a progress report). */
  rearm: () => void;
}

interface WireGeneration {
  tokens: number[];
  logprobs: number[];
  finish: 'stop' | 'length';
}

const STDERR_TAIL_LINES = 40;
/** workers/torch/PROTOCOL.md's version; 2 added progress events. */
const WORKER_PROTOCOL = 2;

/**
 * Workers run in their own process group, so a Ctrl-C in the terminal reaches only the trainer,
 * which decides what to do (finish the iteration, or exit); when this process exits they are ended
 * here rather than left to finish their current call.
 */
const liveWorkers = new Set<ChildProcessWithoutNullStreams>();
let exitHookInstalled = false;
function endWorkersOnExit(child: ChildProcessWithoutNullStreams): void {
  liveWorkers.add(child);
  child.once('exit', () => liveWorkers.delete(child));
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  process.on('exit', () => {
    for (const c of liveWorkers) c.kill('SIGTERM');
  });
}

/** A worker process and its request/response plumbing. */
class WorkerConnection {
  private readonly pending = new Map<number, Pending>();
  private nextId = 1;
  private readonly stderrTail: string[] = [];
  private failure: Error | null = null;
  private readonly exitPromise: Promise<void>;
  private resolveExit: () => void = () => {};
  private ready: { resolve: (v: Record<string, unknown>) => void; reject: (e: Error) => void } | null = null;
  exited = false;

  constructor(
    private readonly child: ChildProcessWithoutNullStreams,
    private readonly describe: string,
    onLog?: (line: string) => void,
    public onProgress?: ProgressListener,
  ) {
    createInterface({ input: child.stdout }).on('line', (line) => this.onLine(line));
    createInterface({ input: child.stderr }).on('line', (line) => {
      this.stderrTail.push(line);
      if (this.stderrTail.length > STDERR_TAIL_LINES) this.stderrTail.shift();
      onLog?.(line);
    });
    this.exitPromise = new Promise((resolve) => (this.resolveExit = resolve));
    child.on('exit', (code, signal) => {
      this.exited = true;
      this.fail(new Error(`torch worker (${describe}) exited (${signal ? `signal ${signal}` : `code ${code}`})${this.tail()}`));
      this.resolveExit();
    });
    child.on('error', (err: NodeJS.ErrnoException) => {
      const reason =
        err.code === 'ENOENT'
          ? `cannot start ${describe}: not found. ${PYTHON_SETUP_ADVICE}`
          : `torch worker (${describe}): ${err.message}`;
      this.exited = true;
      this.fail(new Error(reason));
      this.resolveExit(); // a process that never started emits no 'exit'
    });
    // A write to a worker that just died raises EPIPE here; the exit handler reports the cause.
    child.stdin.on('error', () => {});
  }

  waitReady(timeoutMs: number): Promise<Record<string, unknown>> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.kill();
        reject(new Error(`torch worker (${this.describe}) did not start within ${timeoutMs / 1000}s${this.tail()}`));
      }, timeoutMs);
      this.ready = {
        resolve: (v) => (clearTimeout(timer), resolve(v)),
        reject: (e) => (clearTimeout(timer), reject(e)),
      };
      if (this.failure) this.ready.reject(this.failure);
    });
  }

  call<T>(op: string, payload: Record<string, unknown>, timeoutMs: number): Promise<T> {
    if (this.failure) return Promise.reject(new Error(`torch worker is not running: ${this.failure.message}`));
    const id = this.nextId++;
    return new Promise<T>((resolve, reject) => {
      const silent = () =>
        setTimeout(() => {
          this.pending.delete(id);
          this.fail(
            new Error(
              `torch worker: '${op}' did not answer or report progress within ${timeoutMs / 1000}s; the worker was stopped because its state is unknown`,
            ),
          );
          this.kill();
          reject(this.failure!);
        }, timeoutMs);
      const pending: Pending = {
        op,
        resolve: resolve as (v: unknown) => void,
        reject,
        timer: silent(),
        rearm: () => {
          clearTimeout(pending.timer);
          pending.timer = silent();
        },
      };
      this.pending.set(id, pending);
      this.child.stdin.write(JSON.stringify({ id, op, ...payload }) + '\n');
    });
  }

  private onLine(line: string): void {
    let msg: Record<string, unknown>;
    try {
      msg = JSON.parse(line) as Record<string, unknown>;
    } catch {
      this.fail(new Error(`torch worker wrote a line that is not JSON: ${line.slice(0, 200)}`));
      this.kill();
      return;
    }
    if (msg.event === 'ready') {
      this.ready?.resolve(msg);
      this.ready = null;
      return;
    }
    if (msg.event === 'fatal') {
      this.fail(new Error(`torch worker (${this.describe}) could not start: ${String(msg.message)}`));
      return;
    }
    if (msg.event === 'progress') {
      const p = this.pending.get(msg.id as number);
      if (p) {
        p.rearm();
        this.onProgress?.(p.op, Number(msg.done), Number(msg.total), msg.resumed === true);
      }
      return;
    }
    const id = msg.id as number;
    const p = this.pending.get(id);
    if (!p) return; // the answer to a call that already timed out
    this.pending.delete(id);
    clearTimeout(p.timer);
    if (msg.ok) p.resolve(msg.result);
    else {
      const err = msg.error as { kind: string; message: string };
      p.reject(
        new Error(
          `torch worker: ${err.kind === 'bad_request' ? '' : `${err.kind} error in '${p.op}': `}${err.message}${err.kind === 'internal' ? this.tail() : ''}`,
        ),
      );
    }
  }

  private tail(): string {
    const lines = this.stderrTail.filter((l) => !/^\s*(Loading weights|Writing model shards)/.test(l)).slice(-15);
    return lines.length > 0 ? `\n--- worker stderr (last lines) ---\n${lines.join('\n')}` : '';
  }

  private fail(error: Error): void {
    if (!this.failure) this.failure = error;
    this.ready?.reject(this.failure);
    this.ready = null;
    for (const [id, p] of this.pending) {
      clearTimeout(p.timer);
      p.reject(this.failure);
      this.pending.delete(id);
    }
  }

  kill(): void {
    if (this.exited) return;
    this.child.kill('SIGTERM');
    const hard = setTimeout(() => {
      if (!this.exited) this.child.kill('SIGKILL');
    }, 5000);
    hard.unref();
  }

  /** Asks the worker to leave, closes its stdin, and kills it if it has not left after `graceMs`. */
  shutdown(graceMs: number): Promise<void> {
    if (!this.exited) {
      if (!this.failure) this.child.stdin.write(JSON.stringify({ id: 0, op: 'shutdown' }) + '\n');
      this.child.stdin.end();
      const timer = setTimeout(() => this.kill(), graceMs);
      timer.unref();
      this.exitPromise.then(() => clearTimeout(timer));
    }
    this.fail(new Error('the engine was disposed'));
    return this.exitPromise;
  }
}

export class TorchEngine implements PolicyEngine {
  readonly prefill: PrefillCounts = { prefilledTokens: 0, reusedTokens: 0 };
  private context: number | undefined | null = null;

  private constructor(
    readonly tokenizer: Tokenizer,
    readonly options: TorchEngineOptions,
    readonly info: WorkerInfo,
    readonly versions: Record<string, string>,
    private readonly worker: WorkerConnection,
    /** The process started: the worker's (the launcher's under `launcher`, e.g. torchrun). */
    readonly pid: number,
  ) {}

  /** The model's max_position_embeddings, from its config.json (undefined where that has none). */
  /**
   * Trunk-plus-branches sequences (ScoredSequence.branches), scored with the trunk's keys and values
   * shared by its branches: where the worker says it takes them (SDPA attention, one process: not under
   * torchrun / FSDP, a model without sliding-window layers).
   */
  get supportsBranches(): boolean {
    return this.info.branches === true;
  }

  get contextLength(): number | undefined {
    if (this.context === null) this.context = contextLengthOf(this.options.modelDir);
    return this.context;
  }

  /** Starts the worker, loads the model and returns an engine ready for use. */
  static async start(options: TorchEngineOptions): Promise<TorchEngine> {
    if (options.endTokens.length === 0) throw new Error('TorchEngine: at least one end token id is needed');
    const tokenizer = Tokenizer.fromFile(join(options.modelDir, 'tokenizer.json'));
    const python = options.python ?? projectPython();
    const [command, ...args] =
      options.launcher && options.launcher.length > 0 ? [...options.launcher, TORCH_WORKER_SCRIPT] : [python, TORCH_WORKER_SCRIPT];
    if (!options.launcher) {
      const problem = pythonProblem(python);
      if (problem) throw new Error(`TorchEngine: ${problem}`);
    }
    const child = spawn(command, args, {
      stdio: ['pipe', 'pipe', 'pipe'],
      detached: true,
      env: {
        ...process.env,
        PYTHONUNBUFFERED: '1',
        // Local directories only: nothing is ever fetched from the Hub.
        HF_HUB_OFFLINE: '1',
        HF_HUB_DISABLE_PROGRESS_BARS: '1',
        TRANSFORMERS_VERBOSITY: process.env.TRANSFORMERS_VERBOSITY ?? 'error',
        TOKENIZERS_PARALLELISM: 'false',
      },
    });
    endWorkersOnExit(child);
    const worker = new WorkerConnection(child, [command, ...args].join(' '), options.onLog, options.onProgress);
    try {
      const ready = await worker.waitReady(options.startTimeoutMs ?? 600_000);
      if (ready.protocol !== WORKER_PROTOCOL)
        throw new Error(
          `torch worker (${TORCH_WORKER_SCRIPT}) speaks protocol ${String(ready.protocol)}, this engine ${WORKER_PROTOCOL}: the worker and the TypeScript side come from different versions of empo2`,
        );
      const info = await worker.call<WorkerInfo>(
        'init',
        {
          model_dir: options.modelDir,
          device: options.device ?? 'cpu',
          dtype: options.dtype ?? 'float32',
          autocast: options.autocast ?? null,
          base_bf16: options.baseBf16 ?? false,
          gradient_checkpointing: options.gradientCheckpointing ?? null,
          attn_implementation: options.attnImplementation ?? 'sdpa',
          lora: options.lora
            ? {
                r: options.lora.r,
                alpha: options.lora.alpha,
                dropout: options.lora.dropout,
                target_modules: peftTargetModules(options.lora),
                use_rslora: options.lora.useRslora ?? false,
              }
            : null,
          adapter_dir: options.adapterDir ?? null,
          optimizer: {
            lr: options.optimizer.lr,
            beta1: options.optimizer.beta1,
            beta2: options.optimizer.beta2,
            eps: options.optimizer.eps,
            weight_decay: options.optimizer.weightDecay,
          },
          optimizer_state: options.optimizerState ?? null,
          max_grad_norm: options.maxGradNorm,
          micro_batch_tokens: options.microBatchTokens,
          pad_token: options.padToken,
          seed: options.seed ?? 0,
          threads: options.threads ?? null,
          kv_cache_mb: options.kvCacheMb ?? null,
          activation_mb: options.activationMb ?? null,
        },
        options.startTimeoutMs ?? 600_000,
      );
      if (tokenizer.vocabSize > info.vocab_size)
        throw new Error(
          `${options.modelDir}: tokenizer has ${tokenizer.vocabSize} tokens but the model's vocabulary is ${info.vocab_size}`,
        );
      return new TorchEngine(tokenizer, options, info, (ready.versions ?? {}) as Record<string, string>, worker, child.pid!);
    } catch (e) {
      await worker.shutdown(2000);
      throw e;
    }
  }

  setProgressListener(listener: ProgressListener | null): void {
    this.worker.onProgress = listener ?? undefined;
  }

  private call<T>(op: string, payload: Record<string, unknown>): Promise<T> {
    return this.worker.call<T>(op, payload, this.options.callTimeoutMs ?? 1_800_000);
  }

  async generate(prompts: number[][], opts: GenerateOptions): Promise<Generation[]> {
    if (prompts.length === 0) return [];
    prompts.forEach((p, i) => {
      if (p.length === 0) throw new Error(`generate: prompt ${i} is empty`);
    });
    const endToken = this.options.endTokens[0];
    // A constraint with few texts (enums only) goes to the worker as those texts; one with free values cannot.
    const rows = rowConstraints(opts, prompts.length);
    const free = rows.grammars.findIndex((g) => g !== null);
    if (free >= 0)
      throw new Error(
        `generate: constraints[${free}] allows free values (strings, numbers, open arrays), and the PyTorch worker constrains decoding only to a list of texts; decode it with the in-process TensorFlow.js engine, or give the schema enums/consts/booleans only so that it has finite texts`,
      );
    // The worker constrains over token ids; tokenising the allowed texts here keeps one tokenizer.
    const allowed =
      opts.allowedTexts || opts.constraints
        ? rows.texts.map((texts) => (texts && texts.length > 0 ? texts.map((t) => [...this.tokenizer.encode(t), endToken]) : null))
        : null;
    if (opts.cacheKeys && opts.cacheKeys.length !== prompts.length)
      throw new Error(`generate: ${opts.cacheKeys.length} cache keys for ${prompts.length} prompts`);
    const { generations, prefill_tokens, reused_tokens } = await this.call<{
      generations: WireGeneration[];
      prefill_tokens: number;
      reused_tokens: number;
    }>('generate', {
      prompts,
      max_tokens: opts.maxTokens,
      temperature: opts.temperature,
      top_p: opts.topP,
      seed: opts.seed,
      end_tokens: this.options.endTokens,
      stop: opts.stop ?? [],
      allowed,
      cache_keys: opts.cacheKeys ?? null,
    });
    this.prefill.prefilledTokens += prefill_tokens;
    this.prefill.reusedTokens += reused_tokens;
    return generations.map((g) => ({ tokens: g.tokens, logprobs: g.logprobs, text: this.decodeResponse(g.tokens), finish: g.finish }));
  }

  private decodeResponse(tokens: number[]): string {
    const body = tokens.length > 0 && this.options.endTokens.includes(tokens[tokens.length - 1]) ? tokens.slice(0, -1) : tokens;
    return this.tokenizer.decode(body);
  }

  async logprobs(batch: ScoredSequence[], temperature = 1): Promise<number[][]> {
    if (batch.length === 0) return [];
    const { logprobs } = await this.call<{ logprobs: number[][] }>('logprobs', {
      batch: batch.map((s) => ({ prompt: s.prompt, response: s.response, policy_tokens: s.policyTokens ?? null, ...wireBranches(s) })),
      temperature,
    });
    return logprobs;
  }

  async trainStep(
    batch: TrainSequence[],
    objective: ObjectiveConfig,
    temperature = 1,
    lr?: number,
    resume?: StepResumeOptions,
  ): Promise<TrainStats> {
    const r = await this.call<{
      loss: number;
      tokens: number;
      clip_fraction: number;
      mean_ratio: number;
      kl: number;
      grad_norm: number;
      resumed_micro_batches?: number;
    }>('train_step', {
      batch: batch.map((s) => ({
        prompt: s.prompt,
        response: s.response,
        policy_tokens: s.policyTokens ?? null,
        ...wireBranches(s),
        advantages: s.advantages,
        old_logprobs: s.oldLogprobs,
        mask: s.mask,
        ref_logprobs: s.refLogprobs ?? null,
        low_prob_mask: s.lowProbMask ?? true,
      })),
      objective: {
        clip_low: objective.clipLow,
        clip_high: objective.clipHigh,
        dual_clip: objective.dualClip,
        kl_coef: objective.klCoef,
        low_prob_delta: objective.lowProbDelta,
      },
      temperature,
      lr: lr ?? null,
      resume: resume ? { file: resume.file, every_seconds: resume.everySeconds } : null,
    });
    const stats: TrainStats = {
      loss: r.loss,
      tokens: r.tokens,
      clipFraction: r.clip_fraction,
      meanRatio: r.mean_ratio,
      kl: r.kl,
      gradNorm: r.grad_norm,
    };
    if (r.resumed_micro_batches) stats.resumedMicroBatches = r.resumed_micro_batches;
    return stats;
  }

  /**
   * Drops the worker's KV caches for these keys (their episodes ended). Requests are answered in
   * order, so the next call already sees them gone; a failure here (the worker died) surfaces on
   * that next call.
   */
  releaseCache(keys: readonly string[]): void {
    if (keys.length === 0) return;
    this.call('release_cache', { keys: [...keys] }).catch(() => {});
  }

  /** What the worker holds in KV caches now (keys, bytes, the limit). */
  prefillCounts(): { prefilledTokens: number; reusedTokens: number } {
    return { ...this.prefill };
  }

  async cacheInfo(): Promise<WorkerInfo['kv_cache']> {
    return (await this.call<WorkerInfo>('info', {})).kv_cache;
  }

  /**
   * Writes the policy. Full models are a Hugging Face directory the TypeScript engine loads; with
   * LoRA the default is the PEFT adapter layout (`merged: true` writes the merged full model).
   * `optimizer: true` adds optimizer.pt and rng_state.pt (torch's generators, which dropout draws from)
   * for an exact resume (TorchEngineOptions.optimizerState).
   */
  async save(dir: string, opts: { merged?: boolean; optimizer?: boolean } = {}): Promise<void> {
    await this.saveWithResult(dir, opts);
  }

  saveWithResult(dir: string, opts: { merged?: boolean; optimizer?: boolean } = {}): Promise<SaveResult> {
    return this.call<SaveResult>('save', { dir, merged: opts.merged ?? false, optimizer: opts.optimizer ?? false });
  }

  /** Clean shutdown, awaited: the worker finishes the current call, then leaves (killed after 10 s). */
  close(): Promise<void> {
    return this.worker.shutdown(10_000);
  }

  dispose(): void {
    void this.worker.shutdown(10_000);
  }
}

/** max_position_embeddings in a model directory's config.json, or undefined where it cannot be read. */
/** A sequence's branches as the worker reads them (absent when it has none: the request is as before). */
function wireBranches(s: ScoredSequence): { branches?: { prefix: number; ids: number[]; policy_tokens: number[] }[] } {
  return s.branches?.length ? { branches: s.branches.map((b) => ({ prefix: b.prefix, ids: b.ids, policy_tokens: b.policyTokens })) } : {};
}

function contextLengthOf(modelDir: string): number | undefined {
  try {
    const value = (JSON.parse(readFileSync(join(modelDir, 'config.json'), 'utf8')) as { max_position_embeddings?: unknown })
      .max_position_embeddings;
    return typeof value === 'number' && Number.isInteger(value) && value > 0 ? value : undefined;
  } catch {
    return undefined;
  }
}
