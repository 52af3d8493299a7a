/**
 * The environments: the built-in families registered by name (./registry.ts), each loaded lazily, so
 * their dependencies (a Java simulator, a product catalogue) cost nothing unless used. Everything
 * outside envs/ imports this module, not the registry, so the built-in families are always registered.
 */
import { envCorpus, openEnv, registerEnv, type EnvSettings } from './registry.ts';
import type { Env, Split } from './types.ts';

export { envDefinition, envNames, registerEnv, type EnvDefinition, type EnvFactory, type EnvSettings } from './registry.ts';

/** env.max_steps and env.tasks as the built-in factories take them: given only where the config sets them. */
const limits = (s: EnvSettings) => ({ ...(s.tasks ? { tasks: s.tasks } : {}), ...(s.max_steps ? { maxSteps: s.max_steps } : {}) });

registerEnv('builtin', {
  async create(s) {
    const { createBuiltinEnv } = await import('./builtin/index.ts');
    return createBuiltinEnv({ ...(s.options as object), ...limits(s) });
  },
  async corpus(s) {
    const { sampleCorpus } = await import('./builtin/index.ts');
    return sampleCorpus(600, s.tasks ?? undefined);
  },
});

registerEnv('scienceworld', {
  async create(s) {
    const { createScienceWorldEnv } = await import('./scienceworld/index.ts');
    // maxSteps replaces every per-task reference limit, so it is passed only when set.
    return createScienceWorldEnv({ ...(s.options as object), ...limits(s) });
  },
  async corpus(s) {
    const { scienceWorldCorpus } = await import('./scienceworld/corpus.ts');
    return scienceWorldCorpus(s.tasks ?? undefined);
  },
});

registerEnv('webshop', async (s) => {
  const { createWebShopEnv } = await import('./webshop/index.ts');
  return createWebShopEnv({ ...(s.options as object), ...(s.max_steps ? { maxSteps: s.max_steps } : {}) });
});

registerEnv('http', {
  async create(s) {
    const { createHttpEnv } = await import('./http/index.ts');
    return createHttpEnv(s.options, { tasks: s.tasks, maxSteps: s.max_steps });
  },
  async corpus(s) {
    const { httpEnvironmentCorpus } = await import('./http/index.ts');
    return httpEnvironmentCorpus(s.options, { tasks: s.tasks, maxSteps: s.max_steps });
  },
});

/** An instance of the environment registered as `s.name`; settings left out take the config's defaults. */
export function createEnv(s: Pick<EnvSettings, 'name'> & Partial<EnvSettings>): Promise<Env> {
  return openEnv({ name: s.name, tasks: s.tasks ?? null, max_steps: s.max_steps ?? null, options: s.options ?? {} });
}

/** Text the default tokenizer is trained on: what the environment shows and accepts (its registration's corpus). */
export const environmentCorpus: (s: EnvSettings) => Promise<string[]> = envCorpus;

/**
 * What env.eval_variations leaves out: null when every task's split holds that many variations,
 * else a line for the start of a run saying that those tasks are played whole (a split is never
 * padded) and how many episodes an evaluation then plays.
 */
export function evalVariationsNote(env: Env, tasks: readonly string[], split: Split, wanted: number): string | null {
  const counts = tasks.map((task) => ({ task, n: env.variations(task, split).length }));
  const short = counts.filter((c) => c.n < wanted);
  if (short.length === 0) return null;
  const shown = short.slice(0, 5).map((c) => `${c.task} ${c.n}`);
  if (short.length > shown.length) shown.push(`${short.length - shown.length} more`);
  const episodes = counts.reduce((sum, c) => sum + Math.min(c.n, wanted), 0);
  const all = short.length === tasks.length;
  return (
    `env.eval_variations is ${wanted.toLocaleString('en')}, more than the ${split} split holds (${shown.join(', ')}): ` +
    `${all ? 'every task is' : `${short.length} of ${tasks.length} tasks are`} evaluated on all of it, ${episodes.toLocaleString('en')} episodes per evaluation`
  );
}
