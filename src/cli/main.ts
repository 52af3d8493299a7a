/**
 * The `empo2` command line: train, eval, adapt, serve, compare and the rest, one file each in
 * ./commands/ (in the order `empo2 --help` lists them). Options come from a YAML/JSON config plus
 * `--set key.path=value` overrides (./options.ts); `empo2 train --help` lists every option with its default.
 */
import { Command } from 'commander';
import { ConfigError } from '../config/load.ts';
import * as adapt from './commands/adapt.ts';
import * as compare from './commands/compare.ts';
import * as critic from './commands/critic.ts';
import * as dashboard from './commands/dashboard.ts';
import * as evaluate from './commands/eval.ts';
import * as importGguf from './commands/import-gguf.ts';
import * as memoryShow from './commands/memory-show.ts';
import * as memoryProxy from './commands/memory-proxy.ts';
import * as play from './commands/play.ts';
import * as serve from './commands/serve.ts';
import * as train from './commands/train.ts';
import * as warmup from './commands/warmup.ts';
import * as webshop from './commands/webshop.ts';

const program = new Command();
program.name('empo2').description('Train LLM agents to explore with EMPO² (memory-augmented hybrid on/off-policy RL)').showHelpAfterError();

for (const command of [
  train,
  evaluate,
  importGguf,
  play,
  serve,
  compare,
  adapt,
  critic,
  warmup,
  memoryShow,
  memoryProxy,
  dashboard,
  webshop,
])
  command.register(program);

program.parseAsync(process.argv).catch((e: unknown) => {
  const err = e as Error;
  console.error(`empo2: ${err instanceof ConfigError ? '' : 'error: '}${err.message}`);
  if (process.env.EMPO2_DEBUG) console.error(err.stack);
  process.exit(1);
});
