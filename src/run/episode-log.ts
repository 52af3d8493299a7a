/**
 * What training, evaluation and adaptation write of the episodes they play (src/trajectory/format.ts):
 * a bounded sample of each training iteration, evaluations and adaptation trials (all of their
 * episodes unless trajectories.eval_per_evaluation says fewer). Recording only reads the episodes,
 * so a run trains the same with it or without it.
 */
import { join } from 'node:path';
import type { Config } from '../config/schema.ts';
import { followedTip, type EpisodeRecord, type TrajectoryMode, type TrajectorySource } from '../trajectory/format.ts';
import { TrajectoryWriter } from '../trajectory/writer.ts';
import type { Episode, RolloutJob } from './records.ts';

export const TRAJECTORIES_DIR = 'trajectories';

/** Where training writes its records in the run folder. */
export function runTrajectoryFile(runDir: string, source: 'train' | 'eval'): string {
  return join(runDir, TRAJECTORIES_DIR, `${source}.jsonl`);
}

/** Where context an episode was played in: the fields of its record that the episode does not know. */
export interface PlayedAt {
  source: TrajectorySource;
  iteration?: number | null;
  trial?: number | null;
  envSteps?: number | null;
  checkpoint?: string | null;
}

export interface EpisodeContext {
  /** Position of the episode in its batch. */
  index: number;
  mode: TrajectoryMode;
  slot: string | null;
  reflection: string | null;
  /** Reflexion: the plans in the episode's prompts. */
  plansShown?: readonly string[];
}

export function episodeRecord(e: Episode, at: PlayedAt, c: EpisodeContext): EpisodeRecord {
  return {
    type: 'episode',
    source: at.source,
    iteration: at.iteration ?? null,
    trial: at.trial ?? null,
    env_steps: at.envSteps ?? null,
    checkpoint: at.checkpoint ?? null,
    index: c.index,
    group: e.group,
    task: e.task,
    variation: e.variation,
    description: e.description,
    mode: c.mode,
    slot: c.slot,
    steps: e.steps.map((s) => {
      const tips = (s.tips ?? []).map(({ text, score, similarity, action }) => ({ text, score, similarity, action }));
      return {
        observation: s.observation,
        valid_actions: [...(s.validActions ?? [])],
        valid_action_count: s.validActionCount ?? s.validActions?.length ?? 0,
        tips,
        action: s.action,
        reward: s.reward,
        score: s.score,
        followed_tip: followedTip(s.action, tips),
        ...(s.rescored ? { rescored: s.rescored } : {}),
      };
    }),
    final_observation: e.finalObservation,
    score: e.score,
    success: e.success,
    ...(e.outcome ? { outcome: e.outcome } : {}),
    ...(e.failure !== undefined ? { failure: e.failure } : {}),
    reflection: c.reflection,
    ...(e.judge ? { judge: { ...e.judge } } : {}),
    ...(e.leftOut !== undefined ? { left_out: e.leftOut } : {}),
    ...(c.plansShown ? { plans_shown: [...c.plansShown] } : {}),
    time: new Date().toISOString(),
  };
}

/**
 * `k` of `n` batch positions spread evenly (all when k ≥ n): a batch's groups sit next to each other,
 * so the sample covers as many groups, and with them tasks and modes, as it can. Deterministic, so
 * it draws nothing from the training's random stream.
 */
export function spreadSample(n: number, k: number): number[] {
  if (k >= n) return [...Array(n).keys()];
  return [...Array(k).keys()].map((i) => Math.floor((i * n) / k));
}

/** A training run's two files (null where the config records none). */
export interface RunRecorders {
  train: TrajectoryWriter | null;
  eval: TrajectoryWriter | null;
}

/** Writers of a training run's two files, opened fresh or continued after the resumed checkpoint. */
export function openRunRecorders(cfg: Config, resumedAt: number | null, log: (line: string) => void): RunRecorders {
  const options = { maxBytes: cfg.trajectories.max_megabytes * 2 ** 20, log };
  const open = (source: 'train' | 'eval') => {
    const path = runTrajectoryFile(cfg.run_dir, source);
    return resumedAt === null ? TrajectoryWriter.fresh(path, options) : TrajectoryWriter.resume(path, resumedAt, options);
  };
  return {
    train: cfg.trajectories.train_per_iteration > 0 ? open('train') : null,
    eval: cfg.trajectories.eval_per_evaluation !== 0 ? open('eval') : null,
  };
}

/** What is recorded of each episode of a batch besides the episode itself. */
export interface RecordOptions {
  /** Episodes recorded, spread over the batch (spreadSample); null or absent: all of them. */
  count?: number | null;
  /** How the episodes used the memory: one mode for all, or one per episode. */
  mode: TrajectoryMode | readonly TrajectoryMode[];
  /** The memory the episodes' tips came from, naming each one's slot (none: no slot recorded). */
  slots?: { slotOf(job: RolloutJob): string } | null;
  /** The reflection written after each episode (null where none was). */
  reflections?: readonly (string | null)[] | null;
  /** Reflexion: the plans in each episode's prompts. */
  plansShown?: (index: number) => readonly string[];
}

/** Writes episodes of a batch played `at`; stops quietly once the writer's cap is reached. */
export function recordEpisodes(writer: TrajectoryWriter | null, episodes: readonly Episode[], at: PlayedAt, o: RecordOptions): void {
  if (!writer) return;
  const indices = o.count === null || o.count === undefined ? [...episodes.keys()] : spreadSample(episodes.length, o.count);
  for (const i of indices) {
    const context: EpisodeContext = {
      index: i,
      mode: typeof o.mode === 'string' ? o.mode : o.mode[i],
      slot: o.slots ? o.slots.slotOf(episodes[i]) : null,
      reflection: o.reflections?.[i] ?? null,
      ...(o.plansShown ? { plansShown: o.plansShown(i) } : {}),
    };
    if (!writer.append(episodeRecord(episodes[i], at, context))) return;
  }
}
