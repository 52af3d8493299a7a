/** `empo2 play`: an environment played by hand in the terminal (../play.ts). */
import { Option, type Command } from 'commander';
import { ConfigError } from '../../config/load.ts';

export function register(program: Command): void {
  program
    .command('play')
    .description('play an environment yourself in the terminal')
    .addOption(new Option('--env <name>', 'environment family: builtin, scienceworld or webshop').default('builtin'))
    .option('--task <name>', 'task name (default: the first task)')
    .option('--variation <n>', 'variation index (default: the first test variation)')
    .action(async (opts) => {
      const { createEnv } = await import('../../envs/index.ts');
      const { play } = await import('../play.ts');
      const env = await createEnv({ name: opts.env, tasks: null, max_steps: null, options: {} });
      const task = opts.task ?? env.tasks()[0];
      if (!env.tasks().includes(task)) {
        await env.close();
        throw new ConfigError(`unknown task "${task}" (tasks: ${env.tasks().join(', ')})`);
      }
      const variation = opts.variation !== undefined ? Number(opts.variation) : env.variations(task, 'test')[0];
      if (!Number.isInteger(variation) || variation < 0) {
        await env.close();
        throw new ConfigError(`--variation must be a non-negative integer, got "${opts.variation}"`);
      }
      try {
        await play({ env, task, variation });
      } finally {
        // ScienceWorld runs a simulator process per env; it must not outlive an error.
        await env.close();
      }
    });
}
