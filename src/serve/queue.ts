/**
 * One engine, many HTTP requests: engine calls run one at a time, and unseeded generation
 * requests that are waiting together with the same sampling settings are merged into one batched
 * `generate` call (the engine pads and samples a batch far faster than one prompt at a time).
 *
 * Seeded requests always run alone: the engine draws row b of a batch from the seed's stream forked
 * by b, so merging would make a seeded request's sample depend on where it landed in the batch.
 * Alone, a request with prompts P and seed s gets exactly what `engine.generate(P, {seed: s})`
 * gives in process.
 *
 * A request whose client has gone (its signal aborted) is dropped before its turn, and an engine
 * call stops between tokens once every request in it has gone. The engine lets the event loop turn
 * between tokens, so requests keep arriving (and clients keep hanging up) during a long call.
 */
import { randomInt } from 'node:crypto';
import type { GenerateOptions, Generation, PolicyEngine, ScoredSequence } from '../policy/types.ts';
import { batchedOrApart } from '../util/apart.ts';

/** An engine and the limits requests to it are checked against; a weight swap replaces all three. */
export interface ServedEngine {
  engine: PolicyEngine;
  /** Token ids must be below this (the model's vocab_size). */
  vocabSize: number;
  /** Prompt plus generated tokens may not exceed this (the model's max_position_embeddings). */
  maxModelLen: number;
}

/** What a request brings besides its work. */
export interface TaskControl {
  /** The LoRA adapter to run with (a name the server loaded; null or absent: the base model). */
  adapter?: string | null;
  /** Aborted when the client has gone. */
  signal?: AbortSignal;
  /**
   * Run just before the task, against the engine that will run it (a weight swap queued ahead may
   * have changed the limits since the request was checked); throwing refuses the task.
   */
  check?: (served: ServedEngine) => void;
}

export interface QueueOptions {
  /** A merged batch grows only while rows × (longest prompt + max_tokens) stays within this. */
  maxBatchTokens?: number;
  /** Requests waiting beyond this are refused with QueueFullError. */
  maxPending?: number;
  /**
   * Puts the named adapter (null: none) on the engine before a call that asks for it; throws when
   * there is no such adapter (unloaded since the request was checked), which refuses the request.
   */
  useAdapter?: (name: string | null, served: ServedEngine) => void;
}

export class QueueFullError extends Error {
  constructor(readonly limit: number) {
    super(`${limit} requests are already waiting for the engine; try again later`);
  }
}

interface GenerateTask extends TaskControl {
  kind: 'generate';
  prompts: number[][];
  opts: Omit<GenerateOptions, 'seed' | 'signal'> & { seed: number | null };
  resolve: (g: Generation[]) => void;
  reject: (e: unknown) => void;
}

interface ScoreTask extends TaskControl {
  kind: 'score';
  batch: ScoredSequence[];
  resolve: (lp: number[][]) => void;
  reject: (e: unknown) => void;
}

/** Work that runs between engine calls, in request order (a weight swap, loading or unloading an adapter). */
interface ExclusiveTask {
  kind: 'exclusive';
  run: () => Promise<unknown>;
  resolve: (v: unknown) => void;
  reject: (e: unknown) => void;
}

type Task = GenerateTask | ScoreTask | ExclusiveTask;

export interface QueueStats {
  /** engine.generate calls made. */
  generateCalls: number;
  /** Generation requests served (each may hold several prompts). */
  generateRequests: number;
  /** engine.generate calls stopped because every request in them had gone. */
  cancelledCalls: number;
  /** Requests dropped before their turn because their client had gone. */
  droppedRequests: number;
}

export class EngineQueue {
  private pending: Task[] = [];
  private running = false;
  private idleWaiters: (() => void)[] = [];
  readonly stats: QueueStats = { generateCalls: 0, generateRequests: 0, cancelledCalls: 0, droppedRequests: 0 };

  constructor(
    private served: ServedEngine,
    private readonly options: QueueOptions = {},
  ) {}

  /**
   * Replaces the engine between calls, in request order (weights pushed by a trainer): calls
   * queued before the swap run on the old weights, later ones on the new. The old engine is
   * disposed. If loading fails, the old engine stays.
   */
  swapEngine(load: () => Promise<ServedEngine>): Promise<void> {
    return this.exclusive(async () => {
      const next = await load();
      const old = this.served;
      this.served = next;
      old.engine.dispose();
    });
  }

  /** Runs `run` between engine calls, after the calls queued before it and before those queued after. */
  exclusive<T>(run: (served: ServedEngine) => Promise<T>): Promise<T> {
    return new Promise<T>((resolve, reject) =>
      this.push({ kind: 'exclusive', run: () => run(this.served), resolve: resolve as (v: unknown) => void, reject }),
    );
  }

  get current(): ServedEngine {
    return this.served;
  }

  /** Tasks waiting for their turn (not the one running). */
  get pendingCount(): number {
    return this.pending.length;
  }

  /** Resolves once no task is waiting or running. */
  idle(): Promise<void> {
    return this.running ? new Promise((resolve) => this.idleWaiters.push(resolve)) : Promise.resolve();
  }

  /** `opts.seed` null: the server picks a random seed and the request may share a batch. */
  generate(prompts: number[][], opts: GenerateTask['opts'], control: TaskControl = {}): Promise<Generation[]> {
    return new Promise((resolve, reject) => this.push({ kind: 'generate', prompts, opts, resolve, reject, ...control }));
  }

  score(batch: ScoredSequence[], control: TaskControl = {}): Promise<number[][]> {
    return new Promise((resolve, reject) => this.push({ kind: 'score', batch, resolve, reject, ...control }));
  }

  private push(task: Task): void {
    const limit = this.options.maxPending;
    if (task.kind !== 'exclusive' && limit !== undefined && this.pending.filter((t) => t.kind !== 'exclusive').length >= limit)
      throw new QueueFullError(limit);
    this.pending.push(task);
    if (!this.running) {
      this.running = true;
      // Wait one turn of the event loop so that requests parsed in the same turn join this batch.
      setImmediate(() => void this.drain());
    }
  }

  private async drain(): Promise<void> {
    while (this.pending.length > 0) {
      const first = this.pending.shift()!;
      if (first.kind === 'exclusive') {
        await settle(first, first.run);
      } else if (this.refused(first)) {
        // Dropped or refused: nothing ran.
      } else if (first.kind === 'score') {
        await settle(first, async () => {
          this.options.useAdapter?.(first.adapter ?? null, this.served);
          return this.served.engine.logprobs(first.batch);
        });
      } else {
        await this.runGroup(this.gatherGroup(first));
      }
      await new Promise<void>((r) => setImmediate(r));
    }
    this.running = false;
    for (const wake of this.idleWaiters.splice(0)) wake();
  }

  /** Rejects a task whose client has gone or that fails its check; true if it did. */
  private refused(task: GenerateTask | ScoreTask): boolean {
    if (task.signal?.aborted) {
      this.stats.droppedRequests++;
      task.reject(task.signal.reason);
      return true;
    }
    try {
      task.check?.(this.served);
    } catch (e) {
      task.reject(e);
      return true;
    }
    return false;
  }

  /** `first` and the waiting requests it can share an engine call with. */
  private gatherGroup(first: GenerateTask): GenerateTask[] {
    const group = [first];
    if (first.opts.seed !== null) return group;
    const key = batchKey(first);
    const budget = this.options.maxBatchTokens ?? Number.POSITIVE_INFINITY;
    let rows = first.prompts.length;
    let longest = longestPrompt(first);
    // Requests behind a weight swap (or an adapter load) must not be served by the old weights.
    const swapAt = this.pending.findIndex((t) => t.kind === 'exclusive');
    const before = swapAt < 0 ? this.pending : this.pending.slice(0, swapAt);
    const after = swapAt < 0 ? [] : this.pending.slice(swapAt);
    const kept: Task[] = [];
    for (const t of before) {
      if (t.kind !== 'generate' || t.opts.seed !== null || batchKey(t) !== key) {
        kept.push(t);
        continue;
      }
      const nextRows = rows + t.prompts.length;
      const nextLongest = Math.max(longest, longestPrompt(t));
      if (nextRows * (nextLongest + first.opts.maxTokens) > budget) {
        kept.push(t);
        continue;
      }
      if (this.refused(t)) continue; // answered: its client has gone or it failed its check
      group.push(t);
      rows = nextRows;
      longest = nextLongest;
    }
    this.pending = kept.concat(after);
    return group;
  }

  /**
   * The merged requests in one engine call. Each request's prompts were checked against the context
   * and vocabulary before (./limits.ts), so a throw is rare; when one comes, the requests are run again
   * one at a time, so that only the request the engine cannot take fails.
   */
  private async runGroup(group: GenerateTask[]): Promise<void> {
    this.stats.generateRequests += group.length;
    await batchedOrApart(group, {
      run: (tasks) => this.generateFor(tasks),
      settle: (t, o) => (o.ok ? t.resolve(o.value) : t.reject(o.error)),
      // A call stopped because every client has gone is not worth running again.
      retryApart: () => group.some((t) => !t.signal?.aborted),
    });
  }

  /** One engine call over `tasks`, each task's generations in its own list. */
  private async generateFor(tasks: readonly GenerateTask[]): Promise<Generation[][]> {
    const live = tasks.filter((t) => !t.signal?.aborted);
    if (live.length === 0) throw tasks[0].signal!.reason;
    const prompts = tasks.flatMap((t) => t.prompts);
    const constrained = tasks.some((t) => t.opts.allowedTexts?.some((a) => a));
    const allowedTexts = constrained ? tasks.flatMap((t) => t.opts.allowedTexts ?? t.prompts.map(() => null)) : undefined;
    const withConstraints = tasks.some((t) => t.opts.constraints?.some((c) => c));
    const constraints = withConstraints ? tasks.flatMap((t) => t.opts.constraints ?? t.prompts.map(() => null)) : undefined;
    // One prompt cache key per row (a request without one: none); a key twice in one call fails it, and the
    // requests are then run one at a time (runGroup).
    const keyed = tasks.some((t) => t.opts.cacheKeys?.some((k) => k));
    const cacheKeys = keyed ? tasks.flatMap((t) => t.opts.cacheKeys ?? t.prompts.map(() => null)) : undefined;
    // Per-row options are merged above; the rest are the group's (its batch key).
    const { seed, allowedTexts: _texts, constraints: _constraints, cacheKeys: _keys, ...rest } = tasks[0].opts;
    this.stats.generateCalls++;
    // The call stops once every request in it has gone; a request that goes alone is answered at once.
    const stop = new AbortController();
    let left = live.length;
    const gone = new Map<GenerateTask, () => void>();
    for (const t of live) {
      if (!t.signal) continue;
      const onAbort = () => {
        t.reject(t.signal!.reason);
        if (--left === 0) stop.abort(t.signal!.reason);
      };
      gone.set(t, onAbort);
      t.signal.addEventListener('abort', onAbort, { once: true });
    }
    try {
      this.options.useAdapter?.(tasks[0].adapter ?? null, this.served);
      const gens = await this.served.engine.generate(prompts, {
        ...rest,
        allowedTexts,
        constraints,
        cacheKeys,
        seed: seed ?? randomInt(0, 2 ** 31 - 1),
        signal: stop.signal,
      });
      let at = 0;
      return tasks.map((t) => gens.slice(at, (at += t.prompts.length)));
    } catch (e) {
      if (stop.signal.aborted) this.stats.cancelledCalls++;
      throw e;
    } finally {
      for (const [t, onAbort] of gone) t.signal!.removeEventListener('abort', onAbort);
    }
  }
}

function longestPrompt(t: GenerateTask): number {
  return t.prompts.reduce((m, p) => Math.max(m, p.length), 0);
}

function batchKey(t: GenerateTask): string {
  const { temperature, topP, maxTokens, stop } = t.opts;
  return JSON.stringify([temperature, topP, maxTokens, stop ?? [], t.adapter ?? null]);
}

async function settle<T>(task: { resolve: (v: T) => void; reject: (e: unknown) => void }, run: () => Promise<T>): Promise<void> {
  try {
    task.resolve(await run());
  } catch (e) {
    task.reject(e);
  }
}
