/**
 * Multi-step GRPO advantage (EMPO², docs/EMPO2.md §7): every rollout's return is normalised within the group
 * of rollouts of the same task, A = (R − mean) / (std + 1e-6) with the unbiased std; a group of
 * one gets mean 0 and std 1. Every action token of every step of the rollout gets that A.
 */
export const ADVANTAGE_EPS = 1e-6;

export function groupNormalisedAdvantages(returns: readonly number[], groupOf: readonly (string | number)[]): number[] {
  if (returns.length !== groupOf.length) throw new Error(`advantages: ${returns.length} returns but ${groupOf.length} group ids`);
  const groups = new Map<string | number, number[]>();
  returns.forEach((_, i) => {
    const g = groups.get(groupOf[i]);
    if (g) g.push(i);
    else groups.set(groupOf[i], [i]);
  });
  const advantages = new Array<number>(returns.length);
  for (const members of groups.values()) {
    const { mean, std } = groupStats(members.map((i) => returns[i]));
    for (const i of members) advantages[i] = (returns[i] - mean) / (std + ADVANTAGE_EPS);
  }
  return advantages;
}

export function groupStats(values: readonly number[]): { mean: number; std: number } {
  if (values.length === 1) return { mean: 0, std: 1 };
  const mean = values.reduce((a, b) => a + b, 0) / values.length;
  const variance = values.reduce((a, v) => a + (v - mean) ** 2, 0) / (values.length - 1);
  return { mean, std: Math.sqrt(variance) };
}

/** Return of a rollout: sum of its step rewards (environment plus intrinsic, when enabled). */
export function rolloutReturn(stepRewards: readonly number[]): number {
  return stepRewards.reduce((a, b) => a + b, 0);
}
