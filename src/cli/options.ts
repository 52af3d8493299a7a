/** What the commands in ./commands/ share: the config options, counts, ports and model arguments as the command line gives them. */
import type { Command } from 'commander';
import { ConfigError, describeOptions, loadConfig } from '../config/load.ts';
import { envDefinition } from '../envs/index.ts';
import { isPort } from '../util/port.ts';

/** Collects a repeatable option's values. */
export const collect = (value: string, previous: string[]) => [...previous, value];

const optionsHelp = () => '\nConfig options (file keys, or --set key=value):\n' + describeOptions().join('\n') + '\n';

/** What every config-driven command shares: a config file, `--set` overrides, and the option list in --help. */
export function withConfig(cmd: Command, configHelp: string): Command {
  return cmd
    .option('-c, --config <file>', configHelp)
    .option('-s, --set <key=value>', 'override one config option (repeatable), e.g. memory.top_k=3', collect, [])
    .addHelpText('after', optionsHelp);
}

/** The config of a command: its --config (or `base`), its --set overrides and the shortcuts that stand for some of them. */
export function configFrom(
  opts: { config?: string; set: string[]; runDir?: string; seed?: string; iterations?: string },
  base?: string,
): ReturnType<typeof loadConfig> {
  const overrides = [...opts.set];
  if (opts.runDir) overrides.push(`run_dir=${opts.runDir}`);
  if (opts.seed !== undefined) overrides.push(`seed=${opts.seed}`);
  if (opts.iterations !== undefined) overrides.push(`train.iterations=${opts.iterations}`);
  const cfg = loadConfig(opts.config ?? base ?? null, overrides);
  envDefinition(cfg.env.name); // an unknown environment is named now, before a model loads
  return cfg;
}

/** An optional count option: undefined when not given, else a positive integer or an error naming the option. */
export function positiveInteger(raw: string | undefined, flag: string): number | undefined {
  if (raw === undefined) return undefined;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 1) throw new ConfigError(`${flag} must be a positive integer, got "${raw}"`);
  return n;
}

/** A --port option as a number, or an error naming what was given. */
export function portOption(raw: string): number {
  const port = Number(raw);
  if (!isPort(port)) throw new ConfigError(`--port must be an integer from 0 to 65535, got "${raw}"`);
  return port;
}

/** A model argument as a directory: a .gguf file becomes its cached import (made on first use). */
export async function modelArgument(path: string): Promise<string> {
  const { resolveModelPath } = await import('../policy/gguf/model-path.ts');
  return resolveModelPath(path);
}
