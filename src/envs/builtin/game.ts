/**
 * One episode of the built-in environment, synchronous and fast: world generation per
 * (task, variation), scoring by latched milestones, step limit, and the oracle.
 */
import { act, validActions } from './engine.ts';
import { family, type Family } from './families.ts';
import { Rng } from './rng.ts';
import { describeRoom, type World } from './world.ts';

/** Worlds whose oracle needs more steps than this are redrawn (from the same PRNG stream). */
export const ORACLE_STEP_CAP = 15;
const MAX_DRAWS = 200;

export interface StepOutcome {
  observation: string;
  reward: number;
  done: boolean;
  score: number;
  success: boolean;
}

export class Game {
  readonly family: Family;
  readonly maxSteps: number;
  steps = 0;
  private points = 0;
  private readonly latched: boolean[];
  private finished = false;

  /** The world is owned by the game and changes as it plays; read it (hidden state) but don't write it. */
  constructor(
    readonly world: World,
    maxSteps?: number,
  ) {
    this.family = family(world.task);
    this.maxSteps = maxSteps ?? this.family.maxSteps;
    this.latched = this.family.milestones.map(() => false);
    this.updateScore();
  }

  get score(): number {
    return this.points;
  }

  get done(): boolean {
    return this.finished;
  }

  get success(): boolean {
    return this.latched[this.latched.length - 1];
  }

  get failed(): boolean {
    return !!this.world.flags.failed;
  }

  get task(): string {
    return this.world.description;
  }

  observe(): string {
    return describeRoom(this.world);
  }

  validActions(): string[] {
    return this.finished ? [] : validActions(this.world);
  }

  step(action: unknown): StepOutcome {
    if (this.finished) {
      return { observation: 'The episode is over.', reward: 0, done: true, score: this.points, success: this.success };
    }
    this.steps++;
    let observation = act(this.world, action);
    const before = this.points;
    this.updateScore();
    if (this.success) observation += ' Task complete.';
    this.finished = this.success || this.failed || this.steps >= this.maxSteps;
    return { observation, reward: this.points - before, done: this.finished, score: this.points, success: this.success };
  }

  /** The oracle's next action from the current hidden state (null when done or stuck). */
  oracleAction(): string | null {
    return this.finished ? null : this.family.next(this.world);
  }

  private updateScore(): void {
    const ms = this.family.milestones;
    for (let i = 0; i < ms.length; i++) if (!this.latched[i] && ms[i].test(this.world)) this.latched[i] = true;
    let p = 0;
    for (let i = 0; i < ms.length - 1; i++) if (this.latched[i]) p += ms[i].points;
    // Monotone by construction: latched milestones never unlatch.
    this.points = this.success ? 100 : Math.min(p, 99);
  }
}

/** Play the oracle on a copy of `world`; its actions, or null if it does not reach 100 within `cap` steps. */
export function solve(world: World, cap = Infinity): string[] | null {
  const g = new Game(world.clone(), Number.isFinite(cap) ? cap : undefined);
  const actions: string[] = [];
  while (!g.done) {
    const a = g.oracleAction();
    if (a === null) break;
    actions.push(a);
    g.step(a);
  }
  return g.success ? actions : null;
}

const cache = new Map<string, World>();
const CACHE_LIMIT = 10_000;

/**
 * The initial world of (task, variation): drawn from a PRNG seeded by both, redrawn until
 * the oracle solves it within ORACLE_STEP_CAP steps. Returns a fresh copy each call.
 */
export function generateWorld(task: string, variation: number): World {
  if (!Number.isInteger(variation) || variation < 0) throw new Error(`variation must be a non-negative integer, got ${variation}`);
  const key = `${task}:${variation}`;
  let w = cache.get(key);
  if (!w) {
    const f = family(task);
    const rng = new Rng(`builtin:${key}`);
    for (let i = 0; i < MAX_DRAWS && !w; i++) {
      const cand = f.generate(rng);
      if (solve(cand, ORACLE_STEP_CAP)) w = cand;
    }
    if (!w) throw new Error(`no solvable world for ${key} in ${MAX_DRAWS} draws`);
    if (cache.size >= CACHE_LIMIT) cache.clear();
    cache.set(key, w);
  }
  return w.clone();
}
