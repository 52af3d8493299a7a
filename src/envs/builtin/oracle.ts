/**
 * The scripted oracle (it reads the hidden state) and the uniformly random baseline policy.
 */
import type { BuiltinEnv } from './env.ts';
import { Game, generateWorld } from './game.ts';
import type { Rng } from './rng.ts';

/** The oracle's next action in the env's running episode; null when the episode is over. */
export function oracleAct(env: BuiltinEnv): string | null {
  return env.oracleAction();
}

/**
 * The oracle's whole action sequence for (task, variation); it reaches score 100.
 * `seed` changes nothing (as in `reset`); it is accepted for symmetry.
 */
export function oracleActions(task: string, variation: number, _seed?: number): string[] {
  const g = new Game(generateWorld(task, variation));
  const actions: string[] = [];
  for (let a = g.oracleAction(); a !== null; a = g.oracleAction()) {
    actions.push(a);
    g.step(a);
  }
  return actions;
}

/** A uniformly random choice among the valid actions. */
export function randomAct(validActions: readonly string[], rng: Rng): string {
  return validActions.length ? rng.pick(validActions) : 'look around';
}
