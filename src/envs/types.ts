/**
 * The environment interface, in the Gymnasium spirit: small, text in / text out,
 * deterministic given (task, variation, seed). Every environment (built-in, ScienceWorld,
 * WebShop, HTTP) implements it; the trainer sees nothing else.
 *
 * Methods are async because several environments live in another process or machine.
 */

export type Split = 'train' | 'dev' | 'test';

export interface ResetResult {
  /** What the agent sees first (the room, the page...). */
  observation: string;
  /** The task description u, in natural language. */
  task: string;
  /** Actions the environment accepts now; free text outside this list is still allowed. */
  validActions: string[];
  info?: Record<string, unknown>;
}

export interface StepResult {
  observation: string;
  /** Reward of this step: the change in score (0-100 scale) unless the environment says otherwise. */
  reward: number;
  done: boolean;
  /** Progress so far, 0-100 (ScienceWorld may report -100 on a failed terminal action). */
  score: number;
  validActions: string[];
  info?: Record<string, unknown>;
}

export interface Env {
  /** Environment family, e.g. "builtin", "scienceworld", "webshop". */
  readonly name: string;
  /** Task names this environment offers. */
  tasks(): string[];
  /** Variation indices of a task in a named split; splits are disjoint. */
  variations(task: string, split: Split): number[];
  /** Step limit of an episode of this task. */
  maxSteps(task: string): number;
  /** Start an episode. Same (task, variation, seed) gives the same episode. */
  reset(task: string, variation: number, seed?: number): Promise<ResetResult>;
  /** Apply an action. Unknown or impossible actions give an explanatory observation, never an exception. */
  step(action: string): Promise<StepResult>;
  validActions(): string[];
  /** Current score, 0-100. */
  score(): number;
  done(): boolean;
  /**
   * Optional, for diagnostics: the next action of a scripted solver that reads the hidden state
   * (null once the episode is over). `experimental.tip_source: oracle` shows it to memory rollouts as their
   * only tip, to measure what EMPO²'s update makes of perfect tips.
   */
  oracleAction?(): string | null;
  /** Release processes, sockets, files. Safe to call twice. */
  close(): Promise<void>;
}

/** Success is a full score. */
export const SUCCESS_SCORE = 100;

/**
 * How an environment says that it failed (a simulator that died or hung, a server that did not answer
 * or answered nonsense), rather than the agent: the reset or step carries info.outcome =
 * 'simulator_error' and info.simulatorError naming what failed, and the episode is over. The trainer
 * leaves such an episode out of updates and scores and counts it as failed.
 */
export const ENV_FAILURE = 'simulator_error';

/** What failed, when `info` reports an environment failure (ENV_FAILURE); null otherwise. */
export function envFailure(info: Record<string, unknown> | undefined): string | null {
  if (info?.outcome !== ENV_FAILURE) return null;
  const what = info.simulatorError;
  return typeof what === 'string' && what.length > 0 ? what : 'the environment reported a failure';
}
