/**
 * Held-out evaluation: one episode per (task, variation) of the evaluation split, at the
 * evaluation temperature, without memory. Returns per-task and overall mean score and success.
 */
import type { Config } from '../config/schema.ts';
import type { Env } from '../envs/types.ts';
import type { PolicyEngine } from '../policy/types.ts';
import { EpisodeProgress } from '../run/progress.ts';
import type { EvalResult, Episode, RolloutJob, TaskResult } from '../run/records.ts';
import { rolloutSettings, runEpisodesInChunks, type TipSource } from './rollout.ts';

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
  const perTask: TaskResult[] = [];
  const scores = new Map<string, number[]>();
  const successes = new Map<string, number>();
  // Seeded apart from training so evaluation never replays a training draw.
  const withTips = memory ? { tips: memory.tipSource(), uses: () => true } : undefined;
  // A status line every 2 minutes off a terminal too: a real model's evaluation of 102 episodes takes
  // half an hour on CPU, and its log would otherwise say nothing until a whole task has ended.
  const progress = progressLabel ? new EpisodeProgress(jobs, { label: progressLabel, logIntervalMs: 120_000 }) : undefined;
  const { episodes, stats } = await runEpisodesInChunks(envs, engine, jobs, {
    settingsFor: (start) => rolloutSettings(cfg, true, 777_777 + cfg.seed + start),
    memory: withTips,
    progress,
  });
  progress?.finish();
  played?.(episodes);
  const envSteps = stats.envSteps;
  for (const e of episodes) {
    scores.set(e.task, [...(scores.get(e.task) ?? []), e.score]);
    successes.set(e.task, (successes.get(e.task) ?? 0) + (e.success ? 1 : 0));
  }
  for (const task of tasks) {
    const s = scores.get(task) ?? [];
    perTask.push({ task, episodes: s.length, mean_score: mean(s), success_rate: s.length ? (successes.get(task) ?? 0) / s.length : 0 });
  }
  const all = [...scores.values()].flat();
  const won = [...successes.values()].reduce((a, b) => a + b, 0);
  const seconds = (performance.now() - t0) / 1000;
  return {
    iteration,
    perTask,
    summary: { episodes: all.length, mean_score: mean(all), success_rate: all.length ? won / all.length : 0, env_steps: envSteps, seconds },
  };
}

/** Episodes of one held-out evaluation: env.eval_variations caps each task's split, it does not pad it. */
export function evaluationEpisodes(env: Env, tasks: readonly string[], cfg: Config): number {
  return tasks.reduce((n, t) => n + Math.min(cfg.env.eval_variations, env.variations(t, cfg.env.eval_split).length), 0);
}

function mean(xs: number[]): number {
  return xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : 0;
}

export function formatEvalTable(final: EvalResult, initial: EvalResult | null): string {
  const head = initial
    ? `| task | episodes | score (iter ${initial.iteration}) | score (iter ${final.iteration}) | success (iter ${initial.iteration}) | success (iter ${final.iteration}) |\n|---|---|---|---|---|---|`
    : `| task | episodes | score (iter ${final.iteration}) | success (iter ${final.iteration}) |\n|---|---|---|---|`;
  const rows = final.perTask.map((t) => {
    const i = initial?.perTask.find((x) => x.task === t.task);
    return initial && i
      ? `| ${t.task} | ${t.episodes} | ${i.mean_score.toFixed(1)} | ${t.mean_score.toFixed(1)} | ${pct(i.success_rate)} | ${pct(t.success_rate)} |`
      : `| ${t.task} | ${t.episodes} | ${t.mean_score.toFixed(1)} | ${pct(t.success_rate)} |`;
  });
  const f = final.summary;
  const i = initial?.summary;
  rows.push(
    initial && i
      ? `| **all** | ${f.episodes} | ${i.mean_score.toFixed(1)} | ${f.mean_score.toFixed(1)} | ${pct(i.success_rate)} | ${pct(f.success_rate)} |`
      : `| **all** | ${f.episodes} | ${f.mean_score.toFixed(1)} | ${pct(f.success_rate)} |`,
  );
  return `Held-out evaluation (${final.perTask.length} tasks)\n\n${head}\n${rows.join('\n')}`;
}

function pct(x: number): string {
  return `${(x * 100).toFixed(1)}%`;
}
