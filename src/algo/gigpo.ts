/**
 * GiGPO, Group-in-Group Policy Optimization (Feng et al., 2025, arXiv 2505.10978): GRPO's
 * episode-level advantage plus a step-level one that compares actions taken from the same state.
 *
 *   1. episode term A_E (Eq. 3): a rollout's return R = Σ_t r_t, normalised within its group (the
 *      rollouts of one task and variation), exactly as GRPO (./advantage.ts);
 *   2. anchor-state groups (Eq. 6): within one episode group, every step whose anchor state (the
 *      environment's observation the action was chosen from) is the same string joins one step
 *      group, whichever rollout and time step it came from (a rollout that loops back to a state
 *      adds a second member);
 *   3. step term A_S (Eq. 5, 7): each step's discounted return G_t = r_t + γ·G_{t+1} normalised
 *      within its step group; a step group of one gets A_S = 0 (nothing to compare with);
 *   4. A = A_E + ω·A_S (Eq. 8), per step.
 *
 * Ported from verl-agent's gigpo/core_gigpo.py (compute_gigpo_outcome_advantage, episode_norm_reward,
 * build_step_group, step_norm_reward, compute_step_discounted_returns), read at the fork
 * vanzll/verl-agent@3038c3b1c78fb75af7e113c74a32ac30d907fb50 (langfengQ/verl-agent itself is not
 * in reach here), with defaults from the authors' ALFWorld script (langfengQ/DrMAS@152a8fb1,
 * examples/gigpo_trainer/run_alfworld.sh: mode mean_std_norm, γ 0.95, step_advantage_w 1). Kept:
 *   - anchors grouped by exact string equality (verl-agent's default; its optional similarity
 *     clustering, difflib ratio ≥ 0.95, is not ported);
 *   - `mode` applies to both terms: mean_std_norm divides by the unbiased std + 1e-6, mean_norm
 *     only subtracts the mean (F_norm = 1);
 *   - an episode group of one: mean 0, std 1 (as GRPO); a step group of one: its own mean, so 0.
 * One difference: verl-agent's episode_norm_reward takes the group's mean and std over step rows
 * (compute_mean_std_cross_steps=True, so a long rollout weighs more); this takes them over rollouts,
 * as the paper's Eq. 3 and the authors' later DrMAS code do, so that ω = 0 is exactly GRPO.
 */
import { ADVANTAGE_EPS, groupNormalisedAdvantages, groupStats, rolloutReturn } from './advantage.ts';

export type GigpoMode = 'mean_std_norm' | 'mean_norm';

export interface GigpoSettings {
  /** ω: weight of the step-level advantage (verl-agent's step_advantage_w). */
  omega: number;
  /** γ: discount of the step returns compared within a step group. */
  gamma: number;
  /** F_norm of both terms: the group's std (mean_std_norm) or 1 (mean_norm). */
  mode: GigpoMode;
}

export interface GigpoRollout {
  /** Episode group: rollouts of the same task and variation. */
  group: string | number;
  /** Anchor state of each step: the environment observation the action was chosen from. */
  anchors: readonly string[];
  /** Reward of each step (whatever the return sums: scaled environment reward plus intrinsic). */
  rewards: readonly number[];
}

export interface GigpoAdvantages {
  /** A = A_E + ω·A_S, per rollout and step. */
  advantages: number[][];
  /** A_E per rollout. */
  episode: number[];
  /** A_S per rollout and step. */
  step: number[][];
  /** Size of every step group (how many steps shared an anchor state). */
  stepGroupSizes: number[];
}

/** G_t = r_t + γ·G_{t+1}, from the last step back. */
export function discountedReturns(rewards: readonly number[], gamma: number): number[] {
  const out = new Array<number>(rewards.length);
  let running = 0;
  for (let t = rewards.length - 1; t >= 0; t--) {
    running = rewards[t] + gamma * running;
    out[t] = running;
  }
  return out;
}

export function gigpoAdvantages(rollouts: readonly GigpoRollout[], s: GigpoSettings): GigpoAdvantages {
  if (!(Number.isFinite(s.omega) && s.omega >= 0)) throw new Error(`gigpo: ω (omega) must be a finite number ≥ 0, got ${s.omega}`);
  if (!(s.gamma >= 0 && s.gamma <= 1)) throw new Error(`gigpo: γ (gamma) must be in [0, 1], got ${s.gamma}`);
  if (s.mode !== 'mean_std_norm' && s.mode !== 'mean_norm')
    throw new Error(`gigpo: mode must be mean_std_norm or mean_norm, got ${String(s.mode)}`);
  rollouts.forEach((r, i) => {
    if (r.anchors.length !== r.rewards.length)
      throw new Error(`gigpo: rollout ${i} has ${r.anchors.length} anchor states but ${r.rewards.length} step rewards`);
  });
  const divideByStd = s.mode === 'mean_std_norm';

  const returns = rollouts.map((r) => rolloutReturn(r.rewards));
  const groups = rollouts.map((r) => r.group);
  const episode = divideByStd ? groupNormalisedAdvantages(returns, groups) : centred(returns, groups);

  // Step groups: keyed by episode group, then by the exact anchor text.
  const stepGroups = new Map<string | number, Map<string, [number, number][]>>();
  rollouts.forEach((r, i) => {
    let byAnchor = stepGroups.get(r.group);
    if (!byAnchor) stepGroups.set(r.group, (byAnchor = new Map()));
    r.anchors.forEach((anchor, t) => {
      const members = byAnchor!.get(anchor);
      if (members) members.push([i, t]);
      else byAnchor!.set(anchor, [[i, t]]);
    });
  });

  const stepReturns = rollouts.map((r) => discountedReturns(r.rewards, s.gamma));
  const step = rollouts.map((r) => new Array<number>(r.rewards.length).fill(0));
  const stepGroupSizes: number[] = [];
  for (const byAnchor of stepGroups.values()) {
    for (const members of byAnchor.values()) {
      stepGroupSizes.push(members.length);
      if (members.length === 1) continue; // its own mean: A_S = 0
      const values = members.map(([i, t]) => stepReturns[i][t]);
      const { mean, std } = groupStats(values);
      members.forEach(([i, t], k) => {
        step[i][t] = divideByStd ? (values[k] - mean) / (std + ADVANTAGE_EPS) : values[k] - mean;
      });
    }
  }

  const advantages = step.map((perStep, i) => perStep.map((a) => episode[i] + s.omega * a));
  return { advantages, episode, step, stepGroupSizes };
}

/** R − mean of its group (a group of one keeps R, its mean taken as 0 as in GRPO). */
function centred(returns: readonly number[], groups: readonly (string | number)[]): number[] {
  const members = new Map<string | number, number[]>();
  returns.forEach((R, i) => {
    const m = members.get(groups[i]);
    if (m) m.push(R);
    else members.set(groups[i], [R]);
  });
  const means = new Map([...members].map(([g, values]) => [g, groupStats(values).mean]));
  return returns.map((R, i) => R - means.get(groups[i])!);
}

export interface StepGroupSummary {
  /** Step groups formed. */
  count: number;
  meanSize: number;
  maxSize: number;
  /** Share of step groups with one member (no step-level comparison). */
  singletonShare: number;
}

/** verl-agent's step-group size statistics: how much the anchor states actually group. */
export function summariseStepGroups(sizes: readonly number[]): StepGroupSummary {
  if (sizes.length === 0) return { count: 0, meanSize: 0, maxSize: 0, singletonShare: 0 };
  return {
    count: sizes.length,
    meanSize: sizes.reduce((a, b) => a + b, 0) / sizes.length,
    maxSize: sizes.reduce((a, b) => Math.max(a, b), 0),
    singletonShare: sizes.filter((n) => n === 1).length / sizes.length,
  };
}
