/**
 * Environment factory by family name. Families other than the built-in one load lazily, so their
 * dependencies (a Java simulator, a product catalogue) cost nothing unless used.
 */
import type { Env, Split } from './types.ts';

export interface EnvSettings {
  name: string;
  tasks: string[] | null;
  max_steps: number | null;
  options: Record<string, unknown>;
}

export async function createEnv(s: EnvSettings): Promise<Env> {
  switch (s.name) {
    case 'builtin': {
      const { createBuiltinEnv } = await import('./builtin/index.ts');
      return createBuiltinEnv({
        ...(s.options as object),
        ...(s.tasks ? { tasks: s.tasks } : {}),
        ...(s.max_steps ? { maxSteps: s.max_steps } : {}),
      });
    }
    case 'webshop': {
      const { createWebShopEnv } = await import('./webshop/index.ts');
      return createWebShopEnv({ ...(s.options as object), ...(s.max_steps ? { maxSteps: s.max_steps } : {}) });
    }
    case 'scienceworld': {
      const { createScienceWorldEnv } = await import('./scienceworld/index.ts');
      // maxSteps replaces every per-task reference limit, so it is passed only when set.
      return createScienceWorldEnv({
        ...(s.options as object),
        ...(s.tasks ? { tasks: s.tasks } : {}),
        ...(s.max_steps ? { maxSteps: s.max_steps } : {}),
      });
    }
    case 'http': {
      const { createHttpEnv } = await import('./http/index.ts');
      return createHttpEnv(s.options, { tasks: s.tasks, maxSteps: s.max_steps });
    }
    default:
      throw new Error(`environment "${s.name}" is not available (known: builtin, scienceworld, webshop, http)`);
  }
}

/** Text the default tokenizer is trained on: what the environment shows and accepts. */
export async function environmentCorpus(s: EnvSettings): Promise<string[]> {
  if (s.name === 'builtin') {
    const { sampleCorpus } = await import('./builtin/index.ts');
    return sampleCorpus(600, s.tasks ?? undefined);
  }
  if (s.name === 'scienceworld') {
    const { scienceWorldCorpus } = await import('./scienceworld/corpus.ts');
    return scienceWorldCorpus(s.tasks ?? undefined);
  }
  if (s.name === 'http') {
    const { httpEnvironmentCorpus } = await import('./http/index.ts');
    return httpEnvironmentCorpus(s.options, { tasks: s.tasks, maxSteps: s.max_steps });
  }
  throw new Error(`no text corpus for environment "${s.name}": give model.path with a tokenizer.json`);
}

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
