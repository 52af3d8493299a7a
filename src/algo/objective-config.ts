/**
 * The clipped objective's settings (./objective.ts), apart from the objective itself: the policy's
 * types (policy/types.ts) name them, and that file's declarations reach the package's public types,
 * which must not pull in TensorFlow.js's (docs/API.md, "Types").
 */
export interface ObjectiveConfig {
  /** ε_low: lower clip range of the ratio. */
  clipLow: number;
  /** ε_high: upper clip range of the ratio. */
  clipHigh: number;
  /** c: dual-clip bound for negative advantages; null disables it. */
  dualClip: number | null;
  /** β: weight of the KL penalty to the reference policy (k3 estimator); 0 disables it. */
  klCoef: number;
  /** δ: drop tokens whose probability under πθ is below this; null disables token-level masking. */
  lowProbDelta: number | null;
}
