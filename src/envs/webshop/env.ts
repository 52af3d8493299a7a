/**
 * WebShop behind the project's environment interface. One task, "webshop"; its variations are goal
 * indices in WebShop's goal order (test = first 500, dev = the last slice, train = the rest).
 * Reward follows the interface: the score is WebShop's reward x 100, given as a step reward on
 * purchase; success is reward 1 (score 100).
 */
import type { Env, ResetResult, Split, StepResult } from '../types.ts';
import { parseRewardRevision } from './reward.ts';
import { ShopSession, type ShopOptions } from './shop.ts';
import { loadWorld, type World, type WorldOptions } from './world.ts';

export const WEBSHOP_TASK = 'webshop';
export const DEFAULT_MAX_STEPS = 15;

export interface WebShopEnvOptions extends WorldOptions, ShopOptions {
  /** Step limit of an episode (default 15). */
  maxSteps?: number;
}

export class WebShopEnv implements Env {
  readonly name = 'webshop';
  readonly world: World;
  private readonly stepLimit: number;
  private session: ShopSession | null = null;
  private steps = 0;
  private currentScore = 0;
  private finished = false;

  constructor(private readonly opts: WebShopEnvOptions = {}) {
    const limit = opts.maxSteps ?? DEFAULT_MAX_STEPS;
    if (!Number.isInteger(limit) || limit < 1) throw new Error(`webshop maxSteps must be a positive integer, got ${limit}`);
    this.stepLimit = limit;
    parseRewardRevision(opts.rewardRevision); // refuse an unknown name before loading any data
    this.world = loadWorld(opts);
  }

  tasks(): string[] {
    return [WEBSHOP_TASK];
  }

  private checkTask(task: string): void {
    if (task !== WEBSHOP_TASK) throw new Error(`webshop has one task, "${WEBSHOP_TASK}"; got "${task}"`);
  }

  variations(task: string, split: Split): number[] {
    this.checkTask(task);
    const indices = this.world.splits[split];
    if (!indices) throw new Error(`unknown split "${split}" (expected train, dev or test)`);
    return indices.slice();
  }

  maxSteps(task: string): number {
    this.checkTask(task);
    return this.stepLimit;
  }

  /** The seed is accepted for the interface; a WebShop episode has no randomness once the goal is fixed. */
  async reset(task: string, variation: number, _seed?: number): Promise<ResetResult> {
    this.checkTask(task);
    const goals = this.world.goals;
    if (!Number.isInteger(variation) || variation < 0 || variation >= goals.length) {
      throw new Error(`webshop variation must be a goal index in 0..${goals.length - 1}, got ${variation}`);
    }
    const goal = goals[variation];
    this.session = new ShopSession(this.world, goal, this.opts);
    this.steps = 0;
    this.currentScore = 0;
    this.finished = false;
    return {
      observation: this.session.observation(),
      task: goal.instruction_text,
      validActions: this.session.validActions(),
      info: { goalIndex: variation, goalAsin: goal.asin, page: this.session.kind },
    };
  }

  async step(action: string): Promise<StepResult> {
    const session = this.session;
    if (!session) throw new Error('webshop: call reset() before step()');
    if (this.finished) {
      return {
        observation: `The episode is over. ${session.observation()}`,
        reward: 0,
        done: true,
        score: this.currentScore,
        validActions: [],
        info: { page: session.kind, valid: false },
      };
    }
    this.steps += 1;
    const outcome = session.act(action);
    let reward = 0;
    const info: Record<string, unknown> = { page: session.kind, valid: outcome.valid, steps: this.steps };
    if (outcome.reward) {
      const purchase = session.lastPurchase!;
      this.currentScore = outcome.reward.reward * 100;
      reward = this.currentScore;
      Object.assign(info, {
        webshopReward: outcome.reward.reward,
        rewardParts: outcome.reward.info,
        purchasedAsin: purchase.asin,
        purchasedOptions: purchase.options,
        price: purchase.price,
        won: outcome.reward.reward === 1,
      });
    }
    let observation = session.observation();
    if (!outcome.valid) {
      info.error = outcome.error;
      observation = `Invalid action: ${outcome.error}. ${observation}`;
    }
    this.finished = outcome.done || this.steps >= this.stepLimit;
    if (this.finished && !outcome.done) info.truncated = true;
    return {
      observation,
      reward,
      done: this.finished,
      score: this.currentScore,
      validActions: this.finished ? [] : session.validActions(),
      info,
    };
  }

  validActions(): string[] {
    if (!this.session || this.finished) return [];
    return this.session.validActions();
  }

  score(): number {
    return this.currentScore;
  }

  done(): boolean {
    return this.finished;
  }

  /** The session of the current episode (for the web page and tests). */
  currentSession(): ShopSession | null {
    return this.session;
  }

  async close(): Promise<void> {
    this.session = null;
  }
}

/** Factory for the integrator's environment registry. */
export function createWebShopEnv(opts: WebShopEnvOptions = {}): WebShopEnv {
  return new WebShopEnv(opts);
}
