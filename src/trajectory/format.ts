/**
 * Trajectory records: one JSON line per episode played in training, evaluation or adaptation, so a
 * person can read what the agent saw, which tips it was shown and whether it acted on them. The
 * schema here is what readers check; writers build the same shape from the trainer's episodes
 * (src/run/episode-log.ts).
 */
import { z } from 'zod';

/** Where an episode was played. */
export const TRAJECTORY_SOURCES = ['train', 'eval', 'adapt'] as const;
export type TrajectorySource = (typeof TRAJECTORY_SOURCES)[number];

/**
 * How the episode used the memory: EMPO²'s three training modes, `tips` for an episode shown
 * tips outside training (evaluation with memory, adaptation), where no update mode applies, or
 * `reflexion` for a Reflexion trial (its earlier plans open the prompt: `plans_shown`).
 */
export const TRAJECTORY_MODES = ['plain', 'tips-on-policy', 'tips-off-policy', 'tips', 'reflexion'] as const;
export type TrajectoryMode = (typeof TRAJECTORY_MODES)[number];

/**
 * How the episode ended: at a full score, done below it, cut at its step limit, or by a failure of the
 * environment or the engine (not the agent's doing: such an episode is not trained on nor scored).
 */
export const TRAJECTORY_OUTCOMES = ['success', 'ended', 'step_limit', 'failed'] as const;
export type TrajectoryOutcome = (typeof TRAJECTORY_OUTCOMES)[number];

const ShownTipSchema = z.looseObject({
  text: z.string(),
  score: z.number().nullable(),
  similarity: z.number().nullable(),
  action: z.string().nullable(),
});

/** One candidate of a step whose action was chosen by rescoring (Retrospex, docs/BASELINES.md). */
const RescoredCandidateSchema = z.looseObject({
  action: z.string(),
  /** exp(mean token log-prob) of the action under the frozen LLM. */
  likelihood: z.number(),
  /** The critic's Q(s, a). */
  q: z.number(),
  /** λ·p̂ + (1 − λ)·q̂, the min-max normalised mix the action was chosen by. */
  score: z.number(),
});

const RescoredSchema = z.looseObject({
  /** λ: the weight of the likelihood at this step. */
  weight: z.number(),
  /** In the order they were proposed; the action taken is the first with the highest score. */
  candidates: z.array(RescoredCandidateSchema),
});

const StepSchema = z.looseObject({
  observation: z.string(),
  /** The first `trajectories.max_valid_actions` of them. */
  valid_actions: z.array(z.string()),
  valid_action_count: z.number().int().min(0),
  /** In the order the prompt showed them. */
  tips: z.array(ShownTipSchema),
  action: z.string(),
  reward: z.number(),
  score: z.number(),
  /** Whether the action was one a shown tip named; null when no shown tip named an action. */
  followed_tip: z.boolean().nullable(),
  /** How the action was chosen among the LLM's candidates, where a critic rescored them (Retrospex); absent otherwise. */
  rescored: RescoredSchema.optional(),
});

export const EpisodeRecordSchema = z.looseObject({
  type: z.literal('episode'),
  source: z.enum(TRAJECTORY_SOURCES),
  /** Training iteration (train), the iteration evaluated after (eval during training), or null. */
  iteration: z.number().int().min(0).nullable(),
  /** Adaptation trial, 1-based; null outside adaptation. */
  trial: z.number().int().min(1).nullable(),
  /** Training environment steps when the episode was played (null outside training). */
  env_steps: z.number().min(0).nullable(),
  /** The checkpoint played (eval and adapt commands), else null. */
  checkpoint: z.string().nullable(),
  /** Position of the episode in its batch, and its GRPO group there. */
  index: z.number().int().min(0),
  group: z.number().int().min(0),
  task: z.string(),
  variation: z.number().int(),
  description: z.string(),
  mode: z.enum(TRAJECTORY_MODES),
  /** The memory slot tips came from and were written to (null without a memory). */
  slot: z.string().nullable(),
  steps: z.array(StepSchema),
  final_observation: z.string(),
  score: z.number(),
  success: z.boolean(),
  /** How it ended; absent in records written before outcomes were kept. */
  outcome: z.enum(TRAJECTORY_OUTCOMES).optional(),
  /** What failed, for an episode whose outcome is `failed`. */
  failure: z.string().optional(),
  /** The tip the reflector wrote after the episode (Reflexion: the plan); null where none was written. */
  reflection: z.string().nullable(),
  /** env.reward: judge: the judge's score (0-1, relative to its group) and reason; absent when the episode was not judged. */
  judge: z.object({ score: z.number(), reason: z.string() }).optional(),
  /** Why the episode was left out of the update though it did not fail (its group could not be judged). */
  left_out: z.string().optional(),
  /** Reflexion only: the variation's earlier plans that opened every prompt of this episode, oldest first. */
  plans_shown: z.array(z.string()).optional(),
  /** When the line was written, ISO 8601. */
  time: z.string(),
});

export type ShownTipRecord = z.infer<typeof ShownTipSchema>;
export type StepRecordLine = z.infer<typeof StepSchema>;
export type RescoredStep = z.infer<typeof RescoredSchema>;
export type EpisodeRecord = z.infer<typeof EpisodeRecordSchema>;

/** The last line of a file whose size cap was reached: nothing follows it. */
export const CapLineSchema = z.looseObject({
  type: z.literal('cap_reached'),
  bytes: z.number(),
  max_bytes: z.number(),
  time: z.string(),
});
export type CapLine = z.infer<typeof CapLineSchema>;

/** Whether `action` is one the shown tips named (null when none named an action: no tips, or per-episode tips). */
export function followedTip(action: string, tips: readonly { action: string | null }[]): boolean | null {
  const named = tips.map((t) => t.action).filter((a): a is string => a !== null);
  return named.length === 0 ? null : named.includes(action);
}

/** `problems` lines name the field: "steps.3.action: expected string". */
export function describeIssues(error: z.ZodError): string {
  return error.issues.map((i) => `${i.path.join('.') || '(line)'}: ${i.message}`).join('; ');
}
