/** `empo2 train`: a run in run_dir, fresh or resumed from its latest checkpoint; Ctrl-C stops it with a checkpoint saved. */
import type { Command } from 'commander';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { configFrom, withConfig } from '../options.ts';

export function register(program: Command): void {
  withConfig(
    program.command('train').description('train a policy (default: the tiny built-in model on the built-in environment)'),
    'YAML or JSON config file',
  )
    .option('--run-dir <dir>', 'shortcut for --set run_dir=<dir>')
    .option('--seed <n>', 'shortcut for --set seed=<n>')
    .option('--iterations <n>', 'shortcut for --set train.iterations=<n>')
    .option('--resume', 'continue the run in run_dir from its latest checkpoint (uses the saved config.yaml unless --config is given)')
    .action(async (opts) => {
      let cfg = configFrom(opts);
      if (opts.resume && !opts.config) {
        const saved = join(cfg.run_dir, 'config.yaml');
        if (existsSync(saved)) cfg = configFrom(opts, saved);
      }
      const { train } = await import('../../trainer/trainer.ts');
      const result = await train(cfg, { resume: !!opts.resume, handleSignals: true, progress: true });
      if (result.interrupted) {
        console.log(
          result.iterations === 0
            ? `stopped before iteration 1, with no checkpoint; start again with: empo2 train --run-dir ${cfg.run_dir}`
            : `stopped at iteration ${result.iterations}; continue with: empo2 train --run-dir ${cfg.run_dir} --resume`,
        );
        process.exitCode = 130;
        return;
      }
      // The run said what failed (its last lines); its result is not one to rely on.
      if (result.failedIterations.length > 0 || result.finalEval?.invalid) {
        console.error(
          `empo2: the run finished, but ${result.failedIterations.length > 0 ? `every episode of iteration ${result.failedIterations.join(', ')} failed` : 'its final evaluation is invalid'} (see above); exiting with status 1`,
        );
        process.exitCode = 1;
      }
    });
}
