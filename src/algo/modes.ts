/**
 * EMPO² mode schedule (docs/EMPO2.md §5). With probability p a batch is rolled out with tips from memory;
 * of those, with probability q it is updated off-policy (tips removed from the prompt, ρ against
 * the prompt with tips), otherwise on-policy with tips. The rest is plain on-policy without memory.
 * Reference: p = 0.25, q = 0.68 → ≈17% off-policy, 8% on-policy with tips, 75% without memory.
 */
export type Mode = 'plain' | 'tips-on-policy' | 'tips-off-policy';

export interface ModeSchedule {
  /** p: probability of a rollout with memory. */
  p: number;
  /** q: probability that a memory rollout is updated off-policy. */
  q: number;
}

/** Draws one mode from two uniform numbers in [0, 1) (the caller's seeded generator supplies them). */
export function drawMode(s: ModeSchedule, u1: number, u2: number): Mode {
  if (!(s.p >= 0 && s.p <= 1 && s.q >= 0 && s.q <= 1)) throw new Error(`mode schedule: p and q must be in [0, 1], got p=${s.p}, q=${s.q}`);
  if (u1 >= s.p) return 'plain';
  return u2 < s.q ? 'tips-off-policy' : 'tips-on-policy';
}

/**
 * p at iteration `it` of `iterations` (1-based) when it moves linearly from `p` at the first
 * iteration to `pEnd` at the last (not in the paper; null pEnd keeps p constant). Tips help most
 * early, while the policy has not yet found what the memory holds.
 */
export function scheduledP(p: number, pEnd: number | null, it: number, iterations: number): number {
  if (pEnd === null || iterations <= 1) return p;
  const frac = Math.min(1, Math.max(0, (it - 1) / (iterations - 1)));
  return p + (pEnd - p) * frac;
}

/** Long-run share of each mode under the schedule. */
export function modeShares(s: ModeSchedule): Record<Mode, number> {
  return { plain: 1 - s.p, 'tips-on-policy': s.p * (1 - s.q), 'tips-off-policy': s.p * s.q };
}

export const usesMemory = (m: Mode) => m !== 'plain';
