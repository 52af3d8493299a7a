/**
 * A config as a program gives it: a file's path (YAML or JSON, with its `extends:` chain) or the options
 * as an object, each with `key.path=value` overrides on top, as `empo2 train --config … --set …` reads them.
 * Either way the result is validated by the schema, with errors that name the key and what is wrong.
 */
import type { z } from 'zod';
import { applyOverride, ConfigError, loadConfig as loadConfigFile, validateConfig, type Notice } from '../config/load.ts';
import type { Config, ConfigSchema } from '../config/schema.ts';

/** Options as an object: any subset of the config's sections and keys (docs/CONFIG.md), the rest at their defaults. */
export type ConfigInput = z.input<typeof ConfigSchema>;

/** A config file's path, or options as an object (a Config, as loadConfig returns it, is one too). */
export type ConfigSource = string | ConfigInput;

export interface LoadConfigOptions {
  /** `key.path=value` overrides applied over the source, in order, as `--set` gives them (e.g. 'train.iterations=2'). */
  set?: readonly string[];
  /** Where lines about keys read at a new path go (default: stderr, each once). */
  onNotice?: (line: string) => void;
}

/**
 * The validated config of `source` (default: every option at its default) with `options.set` applied.
 * Throws a ConfigError naming the file or the object, the key and the problem.
 */
export function loadConfig(source?: ConfigSource | null, options: LoadConfigOptions = {}): Config {
  const set = [...(options.set ?? [])];
  const notice: Notice | undefined = options.onNotice;
  if (source === undefined || source === null || typeof source === 'string') return loadConfigFile(source ?? null, set, notice);
  if (typeof source !== 'object' || Array.isArray(source))
    throw new ConfigError(
      `config: give a config file's path or the options as an object, got ${Array.isArray(source) ? 'an array' : typeof source}`,
    );
  // A copy: overrides must not write into the caller's object.
  let raw: Record<string, unknown>;
  try {
    raw = structuredClone(source) as Record<string, unknown>;
  } catch (e) {
    throw new ConfigError(`config: the options object must hold plain data (numbers, strings, lists, objects): ${(e as Error).message}`);
  }
  for (const assignment of set) applyOverride(raw, assignment, notice);
  return validateConfig(raw, set.length > 0 ? 'the options object + set overrides' : 'the options object');
}
