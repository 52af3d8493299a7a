/**
 * Per-task episode step limits (agent actions per episode).
 *
 * Source: the EMPO² reference code (microsoft/agent-lightning, examples/simulation,
 * task_data/scienceworld/split_sets/max_steps.json). That table covers 24 of the 30 tasks;
 * the reference falls back to 100 for the rest, which is also the Python API's default
 * envStepLimit. Both the table and the fallback can be overridden through the env options.
 */
export const REFERENCE_STEP_LIMITS: Readonly<Record<string, number>> = Object.freeze({
  boil: 100,
  'change-the-state-of-matter-of': 80,
  freeze: 80,
  melt: 80,
  'measure-melting-point-known-substance': 120,
  'use-thermometer': 30,
  'power-component': 30,
  'power-component-renewable-vs-nonrenewable-energy': 30,
  'test-conductivity': 30,
  'test-conductivity-of-unknown-substances': 30,
  'find-animal': 30,
  'find-living-thing': 30,
  'find-non-living-thing': 30,
  'find-plant': 30,
  'grow-fruit': 60,
  'grow-plant': 30,
  'chemistry-mix': 60,
  'chemistry-mix-paint-secondary-color': 30,
  'chemistry-mix-paint-tertiary-color': 30,
  'lifespan-longest-lived': 30,
  'lifespan-longest-lived-then-shortest-lived': 30,
  'lifespan-shortest-lived': 30,
  'identify-life-stages-1': 30,
  'identify-life-stages-2': 30,
});

/** Used for tasks the reference table leaves out (inclined-plane-*, mendelian-genetics-*, measure-melting-point-unknown-substance). */
export const REFERENCE_DEFAULT_STEP_LIMIT = 100;

/**
 * The Python API ends an episode once the simulator's move counter passes envStepLimit.
 * Moves are simulator ticks, not agent actions ('wait' is 10 moves), so this is a second,
 * independent limit; the reference constructs every ScienceWorldEnv with envStepLimit=100.
 */
export const REFERENCE_MOVE_LIMIT = 100;

export function resolveStepLimit(
  task: string,
  overrides: Readonly<Record<string, number>> = {},
  fallback: number = REFERENCE_DEFAULT_STEP_LIMIT,
): number {
  return overrides[task] ?? REFERENCE_STEP_LIMITS[task] ?? fallback;
}

export function validateStepLimit(value: number, where: string): void {
  if (!Number.isInteger(value) || value < 1) {
    throw new Error(`${where} must be a positive integer number of steps, got ${String(value)}`);
  }
}
