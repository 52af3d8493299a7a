/**
 * Held-out evaluation: one episode per (task, variation) of the evaluation split, at the
 * evaluation temperature, without memory. Returns per-task and overall mean score and success.
 */
import type { Config } from '../config/schema.ts';
import type { Env } from '../envs/types.ts';
import type { PolicyEngine } from '../policy/types.ts';
import { EpisodeProgress } from '../run/progress.ts';
import { isFailed, type EvalResult, type Episode, type RolloutJob, type RolloutStats, type TaskResult } from '../run/records.ts';
import type { ProgressSink } from '../run/progress.ts';
import {
  addStats,
  emptyStats,
  environmentPlayer,
  rolloutSettings,
  runEpisodesInChunks,
  type PlayedChunk,
  type RolloutPlayer,
  type TipSource,
} from './rollout.ts';

export interface EvaluateOptions {
  tasks: readonly string[];
  /** The training iteration evaluated after (recorded in the result). */
  iteration: number;
  /** Show tips during evaluation (off by default: the paper evaluates without memory). */
  memory?: { tipSource(): TipSource };
  /** Show progress under this label (episodes, steps, elapsed, ETA). */
  progressLabel?: string;
  /** Given the episodes played, in job order (trajectory records). */
  played?: (episodes: readonly Episode[]) => void;
  /** Who plays the episodes (default: the built-in rollout over `envs`); failed episodes are counted apart, not scored. */
  player?: RolloutPlayer;
  /** Aborted when the run is asked to stop: a player that stops at once then throws EvaluationInterrupted (../run/interrupt.ts). */
  signal?: AbortSignal;
  /** A resumable evaluation (built-in player only): the chunks played already, and who keeps each new one. */
  chunks?: EvaluationChunks;
}

/** What a resumable evaluation has played: whole lockstep chunks of envs.length jobs, from the first job on. */
export interface EvaluationChunks {
  /** Chunks played before, in order from job 0 (a resumed evaluation); their episodes are not played again. */
  done: readonly PlayedChunk[];
  /** Told each chunk as soon as it has been played. */
  played: (chunk: PlayedChunk) => void;
}

/** One episode per (task, variation) of the evaluation split, capped at env.eval_variations per task. */
export async function evaluate(engine: PolicyEngine, envs: Env[], cfg: Config, o: EvaluateOptions): Promise<EvalResult> {
  const { tasks, iteration, memory, progressLabel, played } = o;
  const t0 = performance.now();
  const jobs: RolloutJob[] = [];
  for (const task of tasks) {
    for (const variation of envs[0].variations(task, cfg.env.eval_split).slice(0, cfg.env.eval_variations))
      jobs.push({ task, variation, group: jobs.length });
  }
  // Seeded apart from training so evaluation never replays a training draw.
  const withTips = memory ? { tips: memory.tipSource(), uses: () => true } : undefined;
  // A status line every 2 minutes off a terminal too: a real model's evaluation of 102 episodes takes
  // half an hour on CPU, and its log would otherwise say nothing until a whole task has ended.
  const toPlay = jobs.slice(o.chunks?.done.reduce((n, c) => n + c.episodes.length, 0) ?? 0);
  const progress = progressLabel ? new EpisodeProgress(toPlay, { label: progressLabel, logIntervalMs: 120_000 }) : undefined;
  const settingsFor = (start: number) => rolloutSettings(cfg, true, 777_777 + cfg.seed + start);
  const { episodes, stats } = o.chunks
    ? await resumedPlay(engine, envs, jobs, { settingsFor, memory: withTips, progress, chunks: o.chunks, player: o.player })
    : await (o.player ?? environmentPlayer(envs))(engine, jobs, {
        settingsFor,
        memory: withTips,
        progress,
        evaluation: true,
        signal: o.signal,
      });
  progress?.finish();
  played?.(episodes);
  const perTask: TaskResult[] = tasks.map((task) => ({ task, ...scoresOf(episodes.filter((e) => e.task === task)) }));
  const all = scoresOf(episodes);
  const seconds = (performance.now() - t0) / 1000;
  const invalid = invalidity(episodes, all, cfg.train.eval_max_failed_share);
  return {
    iteration,
    perTask,
    summary: {
      episodes: all.episodes,
      mean_score: all.mean_score,
      success_rate: all.success_rate,
      env_steps: stats.envSteps,
      seconds,
      failed: all.failed,
    },
    ...(invalid ? { invalid } : {}),
  };
}

/**
 * The chunks of `o.chunks.done`, then the rest played from the first job after them. Progress counts
 * only the episodes played now, so its rate and ETA are this session's.
 */
async function resumedPlay(
  engine: PolicyEngine,
  envs: Env[],
  jobs: RolloutJob[],
  o: Omit<Parameters<RolloutPlayer>[2], 'evaluation'> & { chunks: EvaluationChunks; player?: RolloutPlayer },
): Promise<{ episodes: Episode[]; stats: RolloutStats }> {
  if (o.player) throw new Error('evaluate: a resumable evaluation plays with the built-in environments, not another player');
  const episodes = o.chunks.done.flatMap((c) => c.episodes);
  const moved = episodes.findIndex((e, i) => e.task !== jobs[i]?.task || e.variation !== jobs[i]?.variation);
  if (moved >= 0)
    throw new Error(
      `the recorded episode ${moved + 1} played ${episodes[moved].task} variation ${episodes[moved].variation}, but this evaluation's episode ${moved + 1} is ${jobs[moved] ? `${jobs[moved].task} variation ${jobs[moved].variation}` : 'past its end'}`,
    );
  const stats = emptyStats();
  for (const c of o.chunks.done) addStats(stats, c.stats);
  const from = episodes.length;
  const p = o.progress;
  const progress: ProgressSink | undefined = p && {
    started: (episode, limit) => p.started(episode - from, limit),
    stepped: (played) => p.stepped(played.map((e) => e - from)),
    ended: (episode, score) => p.ended(episode - from, score),
  };
  const rest = await runEpisodesInChunks(envs, engine, jobs, { ...o, progress, from, chunkPlayed: o.chunks.played });
  addStats(stats, rest.stats);
  return { episodes: [...episodes, ...rest.episodes], stats };
}

/** Episodes played, mean score and success rate of those no failure ended, and how many failed. */
function scoresOf(played: readonly Episode[]): Omit<Required<TaskResult>, 'task'> {
  const scored = played.filter((e) => !isFailed(e));
  return {
    episodes: played.length,
    mean_score: mean(scored.map((e) => e.score)),
    success_rate: scored.length ? scored.filter((e) => e.success).length / scored.length : 0,
    failed: played.length - scored.length,
  };
}

/** Why the evaluation gives no score: more failed episodes than `maxShare` allows, or none scored; null when it gives one. */
function invalidity(episodes: readonly Episode[], s: { episodes: number; failed: number }, maxShare: number): string | null {
  if (s.failed === 0 || (s.failed <= maxShare * s.episodes && s.failed < s.episodes)) return null;
  const first = episodes.find(isFailed)?.failure ?? '';
  return (
    `${s.failed} of ${s.episodes} episodes failed, more than train.eval_max_failed_share (${(maxShare * 100).toFixed(0)}%) allows` +
    ` (first: ${first.length > 300 ? `${first.slice(0, 300)}…` : first})`
  );
}

/** Episodes of one held-out evaluation: env.eval_variations caps each task's split, it does not pad it. */
export function evaluationEpisodes(env: Env, tasks: readonly string[], cfg: Config): number {
  return tasks.reduce((n, t) => n + Math.min(cfg.env.eval_variations, env.variations(t, cfg.env.eval_split).length), 0);
}

function mean(xs: number[]): number {
  return xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : 0;
}

/**
 * The before/after table of eval.md (or one evaluation's): per task and overall. Under it, the episodes
 * that failed; an invalid evaluation shows "invalid" where its scores would be, and why.
 */
export function formatEvalTable(final: EvalResult, initial: EvalResult | null): string {
  const head = initial
    ? `| task | episodes | score (iter ${initial.iteration}) | score (iter ${final.iteration}) | success (iter ${initial.iteration}) | success (iter ${final.iteration}) |\n|---|---|---|---|---|---|`
    : `| task | episodes | score (iter ${final.iteration}) | success (iter ${final.iteration}) |\n|---|---|---|---|`;
  const score = (r: EvalResult, t: { mean_score: number }) => (r.invalid ? 'invalid' : t.mean_score.toFixed(1));
  const success = (r: EvalResult, t: { success_rate: number }) => (r.invalid ? 'invalid' : pct(t.success_rate));
  const rows = final.perTask.map((t) => {
    const i = initial?.perTask.find((x) => x.task === t.task);
    return initial && i
      ? `| ${t.task} | ${t.episodes} | ${score(initial, i)} | ${score(final, t)} | ${success(initial, i)} | ${success(final, t)} |`
      : `| ${t.task} | ${t.episodes} | ${score(final, t)} | ${success(final, t)} |`;
  });
  const f = final.summary;
  const i = initial?.summary;
  rows.push(
    initial && i
      ? `| **all** | ${f.episodes} | ${score(initial, i)} | ${score(final, f)} | ${success(initial, i)} | ${success(final, f)} |`
      : `| **all** | ${f.episodes} | ${score(final, f)} | ${success(final, f)} |`,
  );
  const evaluations = initial ? [initial, final] : [final];
  const failed = evaluations.map((r) => `${r.summary.failed ?? 0} of ${r.summary.episodes} at iter ${r.iteration}`).join(', ');
  const notes = [`failed: ${failed} (episodes an environment or engine failure ended: not scored)`];
  for (const r of evaluations) if (r.invalid) notes.push(`iter ${r.iteration}: invalid evaluation, no score: ${r.invalid}`);
  return `Held-out evaluation (${final.perTask.length} tasks)\n\n${head}\n${rows.join('\n')}\n\n${notes.join('\n')}`;
}

function pct(x: number): string {
  return `${(x * 100).toFixed(1)}%`;
}
