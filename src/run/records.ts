/**
 * What a run records of what it played and learned: episodes with their steps and the tips each step
 * was shown, a rollout's and an update's counters, an evaluation's result. The trainer makes them
 * (../trainer/rollout.ts, update.ts, evaluate.ts); they are declared here, below it, so that the run's
 * files (episode and metrics logs, part-way saves) keep them without depending on how they are made.
 */
import type { StepGroupSummary } from '../algo/gigpo.ts';
import type { PastReflection } from '../memory/reflexion.ts';
import type { TrainStats } from '../policy/types.ts';
import type { RescoredStep, TrajectoryOutcome } from '../trajectory/format.ts';

export interface RolloutJob {
  task: string;
  variation: number;
  /** Episodes of the same group share (task, variation) and are normalised together. */
  group: number;
  /** Reflexion: plans from this variation's earlier failed trials, shown in every prompt of the episode. */
  reflections?: readonly PastReflection[];
}

/** A tip as one step was shown it: the memory's score and cosine similarity, and the action a per-step tip names. */
export interface ShownTip {
  text: string;
  /** The entry's score (an oracle tip's claimed points); null where the source has none. */
  score: number | null;
  /** Cosine similarity of the entry's state to the current one; null for tips not retrieved by similarity (oracle). */
  similarity: number | null;
  /** The action a per-step tip is about (null for per-episode tips). */
  action: string | null;
}

export interface StepRecord {
  /** Observation the action was chosen from (the state text the memory keys on). */
  observation: string;
  /**
   * What the step was shown besides the observation, for trajectory records: its tips in prompt order
   * and the first `RolloutSettings.keptValidActions` valid actions with their count. Rollouts fill
   * these; steps built by hand for an update may leave them out.
   */
  tips?: readonly ShownTip[];
  validActions?: readonly string[];
  validActionCount?: number;
  /** Prompt ids as sampled (with tips when the episode used memory). */
  prompt: number[];
  /** Where the tip block sits in `prompt`, if tips were shown. */
  tipSpan: [number, number] | null;
  response: number[];
  /** log πold of each response token, from the sampler. */
  logprobs: number[];
  action: string;
  reward: number;
  score: number;
  /** How an ActingEngine chose the action among candidates, when it did (Retrospex). */
  rescored?: RescoredStep;
  /** A training gateway call's facts (absent for the built-in rollout's steps). */
  call?: CallFacts;
}

/** What the gateway knows of a call besides its tokens. */
export interface CallFacts {
  /** Every earlier answer in the prompt is the ids sampled for it (false: the agent sent back a turn that matched none, re-encoded). */
  tokenExact: boolean;
  /** Why the answer's tool call did not parse (it went back to the agent as text); absent when none was malformed. */
  malformedToolCall?: string;
}

/**
 * How an episode ended: at a full score, done below it, cut at its step limit, or by a failure of the
 * environment or the engine (../envs/types.ts ENV_FAILURE, an observation over env.max_observation_bytes,
 * a prompt longer than the model's context). A failed episode is left out of updates and scores and
 * counted apart.
 */
export type EpisodeOutcome = TrajectoryOutcome;

export interface Episode extends RolloutJob {
  /** Task description as the environment stated it. */
  description: string;
  steps: StepRecord[];
  /** Observation after the last action. */
  finalObservation: string;
  score: number;
  success: boolean;
  /** Why the engine stopped sampling this episode before it ended (a rollout server died); absent when it did not. */
  engineError?: string;
  /** How it ended (rollouts set it; an episode made otherwise without it counts as not failed). */
  outcome?: EpisodeOutcome;
  /** What failed, for an episode whose outcome is 'failed'. */
  failure?: string;
  /** The id its agent was given (AgentInput.episode.id, EMPO2_EPISODE_ID), for an episode a user's agent played through the gateway. */
  episodeId?: string;
  /** env.reward: judge: the judge's score (0-1, relative to the episode's group) and its reason; absent when not judged. */
  judge?: { score: number; reason: string };
  /** Why the episode is left out of the update though it did not fail (the judge could not score its group). */
  leftOut?: string;
}

/** Whether an environment or engine failure ended the episode. */
export function isFailed(e: Pick<Episode, 'outcome'>): boolean {
  return e.outcome === 'failed';
}

/** What the judge did in one iteration: groups judged and left out, and asks repeated after bad answers. */
export interface JudgeTally {
  groups: number;
  judged: number;
  left_out: number;
  left_out_episodes: number;
  /** Requests asked again because the answer was not the JSON asked for. */
  reasked: number;
}

export interface RolloutStats {
  envSteps: number;
  generatedTokens: number;
  promptTokens: number;
  policySeconds: number;
  envSeconds: number;
  /** Time spent embedding states and retrieving tips during the rollout. */
  memorySeconds: number;
  /** Prompt tokens the engine actually ran (the rest came from kept KV caches); 0 when it does not say. */
  prefilledTokens: number;
}

export interface UpdateStats extends TrainStats {
  sequences: number;
  optimizerSteps: number;
  meanReturn: number;
  droppedLowProb: number;
  /** Samples scored on a tip-free prompt (off-policy mode). */
  offPolicySequences: number;
  /** Decoupled off-policy ratio: mean importance weight w over off-policy tokens (null otherwise). */
  offPolicyMeanWeight: number | null;
  /** Tokens the optimiser steps ran through the model (prompts and responses of every sequence, every epoch). */
  sequenceTokens: number;
  /** Steps trained (before packing), and how many of them went into a packed sequence with another step. */
  steps: number;
  packedSteps: number;
  /** GiGPO only: how the anchor states grouped, and the share of rollouts of 2+ steps whose steps got different advantages. */
  stepGroups: (StepGroupSummary & { variedRollouts: number }) | null;
}

/** One task's held-out result: scores over the episodes that did not fail, of `episodes` played. */
export interface TaskResult {
  task: string;
  episodes: number;
  mean_score: number;
  success_rate: number;
  /** Episodes an environment or engine failure ended (absent in results logged before they were counted). */
  failed?: number;
}

export interface EvalResult {
  iteration: number;
  perTask: TaskResult[];
  summary: { episodes: number; mean_score: number; success_rate: number; env_steps: number; seconds: number; failed?: number };
  /** Why the evaluation gives no score (more of its episodes failed than train.eval_max_failed_share allows); absent when it does. */
  invalid?: string;
}

/**
 * A phase of the loop as it enters it, for a caller that shows it (the gateway's /health). The policy
 * version is the iteration whose weights sample now: during iteration i's rollouts and update, i - 1.
 */
export interface TrainPhase {
  phase: 'rollout' | 'update' | 'evaluation' | 'checkpoint';
  iteration: number;
  policyVersion: number;
}
