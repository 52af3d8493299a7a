/**
 * The environments a run, an evaluation or an adaptation plays at once: the first one is opened alone
 * and asked how many are wanted (its tasks and variations decide it), then the others up to that
 * number, capped at env.max_instances (a ScienceWorld environment is a JVM of its own).
 */
import type { Config } from '../config/schema.ts';
import { createEnv, type EnvSettings } from '../envs/index.ts';
import type { Env } from '../envs/types.ts';

/** How many environment instances to keep open for batches of `wanted` episodes (env.max_instances caps it). */
export function environmentCount(cfg: Pick<Config, 'env'>, wanted: number): number {
  return Math.max(1, Math.min(wanted, cfg.env.max_instances ?? wanted));
}

/**
 * Opens environments of `settings` (default: cfg.env): the first, then as many more as `wanted(first)`
 * asks for, within env.max_instances. `wanted` may refuse the environment by throwing; whatever fails,
 * the environments opened so far are closed before the error goes on.
 */
export async function openEnvPool(
  cfg: Pick<Config, 'env'>,
  wanted: (first: Env) => number,
  settings: EnvSettings = cfg.env,
): Promise<Env[]> {
  const envs = [await createEnv(settings)];
  try {
    const count = environmentCount(cfg, wanted(envs[0]));
    while (envs.length < count) envs.push(await createEnv(settings));
    return envs;
  } catch (e) {
    await Promise.all(envs.map((env) => env.close()));
    throw e;
  }
}
