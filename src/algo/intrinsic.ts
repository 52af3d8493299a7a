/**
 * Intrinsic novelty reward (docs/EMPO2.md §6), as pure functions of counts; the counting itself (novelty
 * list, tip retrieval) lives in src/memory.
 *  - novelty-list variant (paper): r_int = 1/n, n = visits to this state so far (1 for a new state);
 *  - retrieval variant (reference): r_int = 1/(k+1), k = tips retrieved for the state (1 when none).
 */
export type IntrinsicKind = 'novelty' | 'retrieval';

export function noveltyReward(visits: number): number {
  if (!Number.isInteger(visits) || visits < 1) throw new Error(`noveltyReward: visit count must be an integer >= 1, got ${visits}`);
  return 1 / visits;
}

export function retrievalReward(retrieved: number): number {
  if (!Number.isInteger(retrieved) || retrieved < 0)
    throw new Error(`retrievalReward: retrieved count must be an integer >= 0, got ${retrieved}`);
  return 1 / (retrieved + 1);
}
