/**
 * The built-in text environment behind the common `Env` interface. Needs nothing installed;
 * the episode logic is synchronous (game.ts), the async methods only wrap it.
 */
import type { Env, ResetResult, Split, StepResult } from '../types.ts';
import { FAMILIES, family } from './families.ts';
import { Game, generateWorld } from './game.ts';

/** Variations per task and their splits: train 0-199, dev 200-249, test 250-299. */
export const VARIATIONS_PER_TASK = 300;
export const SPLIT_RANGES: Readonly<Record<Split, readonly [number, number]>> = {
  train: [0, 200],
  dev: [200, 250],
  test: [250, 300],
};

export const BUILTIN_TASKS: readonly string[] = FAMILIES.map((f) => f.id);

export interface BuiltinEnvOptions {
  /** Offer only these tasks (default: all). */
  tasks?: string[];
  /** Override the step limit, for all tasks or per task. */
  maxSteps?: number | Partial<Record<string, number>>;
}

export class BuiltinEnv implements Env {
  readonly name = 'builtin';
  private readonly taskIds: string[];
  private current: Game | null = null;

  constructor(private readonly options: BuiltinEnvOptions = {}) {
    this.taskIds = options.tasks ? [...options.tasks] : [...BUILTIN_TASKS];
    for (const t of this.taskIds) family(t); // throws on an unknown task
  }

  tasks(): string[] {
    return [...this.taskIds];
  }

  variations(task: string, split: Split): number[] {
    this.check(task);
    const range = SPLIT_RANGES[split];
    if (!range) throw new Error(`unknown split "${split}"`);
    const [lo, hi] = range;
    return Array.from({ length: hi - lo }, (_, i) => lo + i);
  }

  maxSteps(task: string): number {
    const f = this.check(task);
    const m = this.options.maxSteps;
    if (typeof m === 'number') return m;
    return m?.[task] ?? f.maxSteps;
  }

  /** `seed` is accepted for the interface and changes nothing: (task, variation) fixes the episode. */
  async reset(task: string, variation: number, _seed?: number): Promise<ResetResult> {
    this.current = new Game(generateWorld(this.check(task).id, variation), this.maxSteps(task));
    const g = this.current;
    return {
      observation: g.observe(),
      task: g.task,
      validActions: g.validActions(),
      info: { task, variation, maxSteps: g.maxSteps },
    };
  }

  async step(action: string): Promise<StepResult> {
    const g = this.game();
    const r = g.step(action);
    return {
      observation: r.observation,
      reward: r.reward,
      done: r.done,
      score: r.score,
      validActions: g.validActions(),
      info: { steps: g.steps, success: r.success, failed: g.failed },
    };
  }

  validActions(): string[] {
    return this.current ? this.current.validActions() : [];
  }

  score(): number {
    return this.current ? this.current.score : 0;
  }

  done(): boolean {
    return this.current ? this.current.done : false;
  }

  async close(): Promise<void> {
    this.current = null;
  }

  oracleAction(): string | null {
    return this.game().oracleAction();
  }

  /** The running episode with its hidden state (for the oracle, tests and tools); throws before reset. */
  game(): Game {
    if (!this.current) throw new Error('builtin env: call reset() before step()');
    return this.current;
  }

  private check(task: string) {
    if (!this.taskIds.includes(task)) throw new Error(`unknown builtin task "${task}" (known: ${this.taskIds.join(', ')})`);
    return family(task);
  }
}

export function createBuiltinEnv(options?: BuiltinEnvOptions): BuiltinEnv {
  return new BuiltinEnv(options);
}
