/**
 * Environments by name, in the spirit of Gymnasium's `register`/`make`: `env.name` in a config is a
 * key of this registry, so a program that uses empo2 as a library trains on its own environment by
 * registering it (`registerEnv`), with no fork. The built-in families register themselves through the
 * same call in ./index.ts, which is the module the rest of the program imports (so they are always in).
 */
import { ConfigError } from '../config/load.ts';
import type { Env } from './types.ts';

/** What a config says about the environment (its `env` section), as a factory receives it. */
export interface EnvSettings {
  name: string;
  /** The tasks the run trains on (null: all of the environment's). */
  tasks: string[] | null;
  /** The episode step limit the config sets (null: the environment's own). */
  max_steps: number | null;
  /** `env.options`, passed as given: the factory checks them. */
  options: Record<string, unknown>;
}

/** Opens one instance of an environment; a run opens several (one per episode played at once). */
export type EnvFactory = (settings: EnvSettings) => Env | Promise<Env>;

export interface EnvDefinition {
  create: EnvFactory;
  /**
   * Text the default tiny model's tokenizer is trained on: what the environment shows and accepts
   * (observations, task descriptions, actions). Needed only when model.path is null; an environment
   * without it trains a model given by model.path.
   */
  corpus?: (settings: EnvSettings) => string[] | Promise<string[]>;
}

const registry = new Map<string, EnvDefinition>();

/** Names a YAML `env.name` can hold without quoting and a run folder can show: letters, digits, `.`, `_`, `-`. */
const NAME = /^[A-Za-z0-9][A-Za-z0-9._-]*$/;

/**
 * Makes an environment available as `env.name: <name>`, for every run of this process. `definition` is
 * a factory, or a factory with the tokenizer corpus. A name already taken is refused: two
 * environments under one name would make a config mean different things depending on import order.
 */
export function registerEnv(name: string, definition: EnvFactory | EnvDefinition): void {
  if (typeof name !== 'string' || !NAME.test(name))
    throw new ConfigError(
      `registerEnv: the name must be letters, digits, ".", "_" or "-" (starting with a letter or digit), got ${JSON.stringify(name)}`,
    );
  if (registry.has(name)) throw new ConfigError(`registerEnv: an environment named "${name}" is registered already`);
  registry.set(name, checkDefinition(name, definition));
}

function checkDefinition(name: string, definition: EnvFactory | EnvDefinition): EnvDefinition {
  if (typeof definition === 'function') return { create: definition };
  if (typeof definition !== 'object' || definition === null || typeof definition.create !== 'function')
    throw new ConfigError(`registerEnv("${name}"): give a factory function, or an object with a create(settings) function`);
  if (definition.corpus !== undefined && typeof definition.corpus !== 'function')
    throw new ConfigError(`registerEnv("${name}"): corpus must be a function of the settings returning strings`);
  return { create: definition.create, corpus: definition.corpus };
}

/** The names `env.name` may take in this process, built-in ones first, then in the order they were registered. */
export function envNames(): string[] {
  return [...registry.keys()];
}

/** The registered environment `name`; an unknown name is a config error that lists the known ones. */
export function envDefinition(name: string): EnvDefinition {
  const definition = registry.get(name);
  if (!definition) throw new ConfigError(`env.name: no environment is registered as "${name}" (known: ${envNames().join(', ')})`);
  return definition;
}

/** The methods the trainer calls on every environment (types.ts); `oracleAction` is optional. */
const ENV_METHODS = ['tasks', 'variations', 'maxSteps', 'reset', 'step', 'validActions', 'score', 'done', 'close'] as const;

/**
 * Opens an instance of the registered environment `settings.name`. What a factory throws comes back
 * with the environment's name in front (the original as `cause`), and what it returns is checked for
 * the Env methods, so a mistake in a user's factory is named where it happens, not steps later.
 */
export async function openEnv(settings: EnvSettings): Promise<Env> {
  const { name } = settings;
  const definition = envDefinition(name);
  let env: Env;
  try {
    env = await definition.create(settings);
  } catch (e) {
    throw new Error(`environment "${name}": ${e instanceof Error ? e.message : String(e)}`, { cause: e });
  }
  const missing = ENV_METHODS.filter((m) => typeof (env as unknown as Record<string, unknown> | null)?.[m] !== 'function');
  if (missing.length > 0)
    throw new Error(
      `environment "${name}": its factory returned ${env === null || typeof env !== 'object' ? String(env) : 'an object'} without ${missing.map((m) => `${m}()`).join(', ')} (an Env has ${ENV_METHODS.join(', ')})`,
    );
  return env;
}

/** Text for the tiny model's tokenizer from the registered environment `settings.name`. */
export async function envCorpus(settings: EnvSettings): Promise<string[]> {
  const { name } = settings;
  const corpus = envDefinition(name).corpus;
  if (!corpus)
    throw new Error(
      `no text corpus for environment "${name}": give model.path with a tokenizer.json, or register the environment with a corpus (docs/API.md)`,
    );
  const text = await corpus(settings);
  if (!Array.isArray(text) || text.length === 0 || text.some((t) => typeof t !== 'string'))
    throw new Error(`environment "${name}": its corpus must be a non-empty array of strings`);
  return text;
}
