/**
 * `env.reward: judge` in the loop: after an iteration's rollouts and before its update, each group's
 * episodes are scored together by the judge model (../external/judge.ts), and the scores become the
 * rewards the group's advantages are computed from. The judge's 0-1 score is put on the episode's last
 * step on the environments' 0-100 scale (so algo.reward_scale treats it as it treats a score), either
 * instead of the environment's step rewards (mode: replace) or on top of them (mode: add). The episode's
 * own `score` stays the environment's, so evaluations and success rates mean what they always meant.
 *
 * A group the judge could not score (the server down, answers that were never the JSON asked for) is
 * left out of the update whole, since half its rewards would be missing, and counted in metrics.jsonl.
 */
import type { JudgeSettings } from '../config/schema.ts';
import { ExternalModel } from '../external/client.ts';
import { judgeGroup, type JudgedGroup } from '../external/judge.ts';
import type { ExternalUsage } from '../external/usage.ts';
import { isFailed, type Episode, type JudgeTally } from '../run/records.ts';

export type { JudgeTally };

export class JudgeReward {
  private readonly model: ExternalModel;

  constructor(
    private readonly s: JudgeSettings,
    o: { cacheDir: string | null; log: (line: string) => void },
  ) {
    this.model = new ExternalModel(s, { role: 'judge', defaultCacheDir: o.cacheDir, log: o.log });
  }

  get description(): string {
    return `judge ${this.s.model} at ${this.s.base_url} (${this.s.mode})`;
  }

  /** Scores every group of `episodes` in place (rewards, `judge`, or `leftOut`); the iteration's tally. */
  async apply(episodes: Episode[], log: (line: string) => void, it: number): Promise<JudgeTally> {
    const tally: JudgeTally = { groups: 0, judged: 0, left_out: 0, left_out_episodes: 0, reasked: 0 };
    const groups = groupsOf(episodes);
    await Promise.all(
      [...groups].map(async ([g, members]) => {
        tally.groups++;
        const r = await judgeGroup((req) => this.model.chat(req), judgedGroup(members), {
          rubric: this.s.rubric,
          maxTokens: this.s.max_tokens,
          maxTrajectoryChars: this.s.max_trajectory_chars,
          maxAttempts: this.s.max_attempts,
        });
        tally.reasked += r.attempts - 1;
        if (!r.ok) {
          tally.left_out++;
          tally.left_out_episodes += members.length;
          for (const e of members) e.leftOut = `the judge could not score its group: ${r.error}`;
          log(`iter ${it}: group ${g} (task ${members[0].task} #${members[0].variation}) left out of the update: the judge ${r.error}`);
          return;
        }
        tally.judged++;
        members.forEach((e, i) => judged(e, r.verdicts[i], this.s.mode));
      }),
    );
    return tally;
  }

  takeUsage(): ExternalUsage {
    return this.model.takeUsage();
  }

  close(): void {
    this.model.close();
  }
}

/** The episodes the update would learn from, by group (a failed one has no reward to give). */
function groupsOf(episodes: readonly Episode[]): Map<number, Episode[]> {
  const groups = new Map<number, Episode[]>();
  for (const e of episodes) {
    if (isFailed(e) || e.engineError || e.steps.length === 0) continue;
    groups.set(e.group, [...(groups.get(e.group) ?? []), e]);
  }
  return groups;
}

function judgedGroup(members: readonly Episode[]): JudgedGroup {
  return {
    task: members[0].description,
    trajectories: members.map((e) => ({ steps: e.steps, finalObservation: e.finalObservation })),
  };
}

/** The verdict as the episode's reward, on the 0-100 scale of scores, on its last step. */
function judged(e: Episode, v: { score: number; reason: string }, mode: JudgeSettings['mode']): void {
  e.judge = { score: v.score, reason: v.reason };
  const last = e.steps.length - 1;
  e.steps = e.steps.map((st, t) => {
    const base = mode === 'replace' ? 0 : st.reward;
    return { ...st, reward: t === last ? base + 100 * v.score : base };
  });
}

/** The iteration's external-model cost by role, for metrics.jsonl (null: the run calls none). */
export function externalUsage(reflector: ExternalUsage | null, judge: JudgeReward | null): Record<string, ExternalUsage> | null {
  if (!reflector && !judge) return null;
  return { ...(reflector ? { reflector } : {}), ...(judge ? { judge: judge.takeUsage() } : {}) };
}
