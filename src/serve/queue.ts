/**
 * One engine, many HTTP requests: engine calls run one at a time, and unseeded generation
 * requests that are waiting together with the same sampling settings are merged into one batched
 * `generate` call (the engine pads and samples a batch far faster than one prompt at a time).
 *
 * Seeded requests always run alone: the engine draws every row of a batch from one seeded stream,
 * so merging would make a seeded request's sample depend on which other requests came with it.
 * Alone, a request with prompts P and seed s gets exactly what `engine.generate(P, {seed: s})`
 * gives in process.
 */
import { randomInt } from 'node:crypto';
import type { GenerateOptions, Generation, PolicyEngine, ScoredSequence } from '../policy/types.ts';

interface GenerateTask {
  kind: 'generate';
  prompts: number[][];
  opts: Omit<GenerateOptions, 'seed'> & { seed: number | null };
  resolve: (g: Generation[]) => void;
  reject: (e: unknown) => void;
}

interface ScoreTask {
  kind: 'score';
  batch: ScoredSequence[];
  resolve: (lp: number[][]) => void;
  reject: (e: unknown) => void;
}

interface SwapTask {
  kind: 'swap';
  load: () => Promise<PolicyEngine>;
  resolve: (v: void) => void;
  reject: (e: unknown) => void;
}

type Task = GenerateTask | ScoreTask | SwapTask;

export interface QueueStats {
  /** engine.generate calls made. */
  generateCalls: number;
  /** Generation requests served (each may hold several prompts). */
  generateRequests: number;
}

export class EngineQueue {
  private pending: Task[] = [];
  private running = false;
  readonly stats: QueueStats = { generateCalls: 0, generateRequests: 0 };

  constructor(private engine: PolicyEngine) {}

  /**
   * Replaces the engine between calls, in request order (weights pushed by a trainer): calls
   * queued before the swap run on the old weights, later ones on the new. The old engine is
   * disposed. If loading fails, the old engine stays.
   */
  swapEngine(load: () => Promise<PolicyEngine>): Promise<void> {
    return new Promise((resolve, reject) => this.push({ kind: 'swap', load, resolve, reject }));
  }

  get current(): PolicyEngine {
    return this.engine;
  }

  /** `opts.seed` null: the server picks a random seed and the request may share a batch. */
  generate(prompts: number[][], opts: GenerateTask['opts']): Promise<Generation[]> {
    return new Promise((resolve, reject) => this.push({ kind: 'generate', prompts, opts, resolve, reject }));
  }

  score(batch: ScoredSequence[]): Promise<number[][]> {
    return new Promise((resolve, reject) => this.push({ kind: 'score', batch, resolve, reject }));
  }

  private push(task: Task): void {
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
      if (first.kind === 'score') {
        await settle(first, () => this.engine.logprobs(first.batch));
      } else if (first.kind === 'swap') {
        await settle(first, async () => {
          const next = await first.load();
          const old = this.engine;
          this.engine = next;
          old.dispose();
        });
      } else {
        const group = [first];
        if (first.opts.seed === null) {
          const key = batchKey(first);
          // Requests behind a weight swap must not be served by the old weights.
          const swapAt = this.pending.findIndex((t) => t.kind === 'swap');
          const before = swapAt < 0 ? this.pending : this.pending.slice(0, swapAt);
          const after = swapAt < 0 ? [] : this.pending.slice(swapAt);
          this.pending = before.filter((t) => {
            if (t.kind === 'generate' && t.opts.seed === null && batchKey(t) === key) {
              group.push(t);
              return false;
            }
            return true;
          }).concat(after);
        }
        await this.runGroup(group);
      }
      await new Promise<void>((r) => setImmediate(r));
    }
    this.running = false;
  }

  private async runGroup(group: GenerateTask[]): Promise<void> {
    const prompts = group.flatMap((t) => t.prompts);
    const constrained = group.some((t) => t.opts.allowedTexts?.some((a) => a));
    const allowedTexts = constrained ? group.flatMap((t) => t.opts.allowedTexts ?? t.prompts.map(() => null)) : undefined;
    const { seed, ...rest } = group[0].opts;
    this.stats.generateCalls++;
    this.stats.generateRequests += group.length;
    try {
      const gens = await this.engine.generate(prompts, { ...rest, allowedTexts, seed: seed ?? randomInt(0, 2 ** 31 - 1) });
      let at = 0;
      for (const t of group) {
        t.resolve(gens.slice(at, at + t.prompts.length));
        at += t.prompts.length;
      }
    } catch (e) {
      for (const t of group) t.reject(e);
    }
  }
}

function batchKey(t: GenerateTask): string {
  const { temperature, topP, maxTokens, stop } = t.opts;
  return JSON.stringify([temperature, topP, maxTokens, stop ?? []]);
}

async function settle<T>(task: { resolve: (v: T) => void; reject: (e: unknown) => void }, run: () => Promise<T>): Promise<void> {
  try {
    task.resolve(await run());
  } catch (e) {
    task.reject(e);
  }
}
