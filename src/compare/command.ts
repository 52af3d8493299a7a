/** The `empo2 compare` command's options, as commander hands them over, turned into a run or a report. */
import { ConfigError } from '../config/load.ts';
import { parseSeeds, parseSteps, reportCompare, runCompare } from './runner.ts';

export interface CompareCliOptions {
  config: string[];
  label: string[];
  seeds: string;
  out?: string;
  jobs: string;
  set: string[];
  resume?: boolean;
  reportOnly?: boolean;
  atSteps?: string;
  includeUnfinished?: boolean;
  finalEval?: string;
  equalStepsEval?: string;
}

/** Returns the process exit code: 0 when every planned run finished and the report was written. */
export async function compareCommand(opts: CompareCliOptions): Promise<number> {
  if (!opts.out) throw new ConfigError('compare: --out <dir> is required (where the runs and the report go)');
  const atSteps = opts.atSteps !== undefined ? parseSteps(opts.atSteps) : undefined;
  if (opts.reportOnly) {
    if (opts.config.length > 0 || opts.set.length > 0 || opts.resume || opts.finalEval !== undefined || opts.equalStepsEval !== undefined) {
      throw new ConfigError(
        'compare --report-only only reads existing runs; drop --config, --set, --resume, --final-eval and --equal-steps-eval',
      );
    }
    await reportCompare({ out: opts.out, atSteps, includeUnfinished: opts.includeUnfinished });
    return 0;
  }
  const jobs = Number(opts.jobs);
  if (!/^\d+$/.test(opts.jobs) || jobs < 1) throw new ConfigError(`compare: --jobs must be a positive integer, got "${opts.jobs}"`);
  const variations = (flag: string, text: string | undefined) => {
    if (text === undefined) return undefined;
    if (!/^[1-9]\d*$/.test(text)) throw new ConfigError(`compare: ${flag} must be a positive integer (variations per task), got "${text}"`);
    return Number(text);
  };
  const outcome = await runCompare({
    configs: opts.config,
    labels: opts.label,
    seeds: parseSeeds(opts.seeds),
    out: opts.out,
    jobs,
    set: opts.set,
    resume: !!opts.resume,
    atSteps,
    includeUnfinished: opts.includeUnfinished,
    finalEval: variations('--final-eval', opts.finalEval),
    equalStepsEval: variations('--equal-steps-eval', opts.equalStepsEval),
    handleSignals: true,
  });
  return outcome.failed.length > 0 ? 1 : 0;
}
