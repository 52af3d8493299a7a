/** `empo2 compare`: configs × seeds trained as child processes, then one report (../../compare/). */
import type { Command } from 'commander';
import { checkOutputDir } from '../output-paths.ts';
import { collect } from '../options.ts';

export function register(program: Command): void {
  program
    .command('compare')
    .description(
      'train configs x seeds (each run a child process) into <out>/<label>/seed<k>, then write results.md/.csv and learning_curve.png/.svg',
    )
    .option('-c, --config <file>', 'config to compare (repeatable)', collect, [])
    .option('--label <name>', 'name of each config in the table, in --config order; the file name when left out', collect, [])
    .option('--seeds <list>', 'seeds, e.g. 0,1,2 or 0-4', '0,1,2')
    .option('--out <dir>', 'folder for the runs and the report')
    .option('--jobs <n>', 'runs trained at the same time', '1')
    .option('-s, --set <key=value>', 'override one config option in every config (repeatable)', collect, [])
    .option('--resume', 'continue runs that stopped midway from their latest checkpoint')
    .option('--report-only', 'only re-aggregate the runs already in --out')
    .option('--at-steps <list>', 'env-step counts for the equal-steps score columns (default: the largest every run reached)')
    .option('--include-unfinished', 'count runs that stopped early, using their last evaluation')
    .option(
      '--final-eval <n>',
      "after training, evaluate each run's last checkpoint once more on n variations per task (less noisy than the evaluations during training); finished runs without it get it too",
    )
    .option(
      '--equal-steps-eval <n>',
      'after training, evaluate on n variations per task the kept checkpoints just before and after each equal-steps point, and report the score interpolated between them',
    )
    .action(async (opts) => {
      if (opts.out && !opts.reportOnly) checkOutputDir(opts.out, '--out');
      const { compareCommand } = await import('../../compare/command.ts');
      process.exitCode = await compareCommand(opts);
    });
}
