/**
 * Held-out evaluation: one episode per (task, variation) of the evaluation split, at the
 * evaluation temperature, without memory. Returns per-task and overall mean score and success.
 */
import type { Config } from '../config/schema.ts';
import type { Env } from '../envs/types.ts';
import type { PolicyEngine } from '../policy/types.ts';
import { EpisodeProgress } from './progress.ts';
import { rolloutSettings, runEpisodesInChunks, type Episode, type RolloutJob, type TipSource } from './rollout.ts';

export interface TaskResult {
  task: string;
  episodes: number;
  mean_score: number;
  success_rate: number;
}

export interface EvalResult {
  iteration: number;
  perTask: TaskResult[];
  summary: { episodes: number; mean_score: number; success_rate: number; env_steps: number; seconds: number };
}

/** `memory`: show tips during evaluation (off by default: the paper evaluates without memory). */
export async function evaluate(
  engine: PolicyEngine,
  envs: Env[],
  tasks: string[],
  cfg: Config,
  iteration: number,
  memory?: { tipSource(): TipSource },
  /** Show progress under this label (episodes, steps, elapsed, ETA). */
  progressLabel?: string,
  /** Given the episodes played, in job order (trajectory records). */
  played?: (episodes: readonly Episode[]) => void,
): Promise<EvalResult> {
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
  const progress = progressLabel ? new EpisodeProgress(jobs, { label: progressLabel }) : undefined;
  const { episodes, stats } = await runEpisodesInChunks(
    envs,
    engine,
    jobs,
    (start) => rolloutSettings(cfg, true, 777_777 + cfg.seed + start),
    withTips,
    progress,
  );
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

/** Wall time of an evaluation, per episode and per step: what a real model costs on this machine. */
export function timing(s: EvalResult['summary']): string {
  return `${s.episodes} episodes, ${s.env_steps} steps in ${s.seconds.toFixed(1)} s: ${(s.seconds / Math.max(1, s.episodes)).toFixed(2)} s per episode, ${(s.seconds / Math.max(1, s.env_steps)).toFixed(3)} s per step`;
}
