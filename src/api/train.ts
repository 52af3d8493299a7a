/**
 * `train()` for programs: one options object in, the run's result out. It is `empo2 train` without the
 * command line: the same loop (../trainer/trainer.ts), the same run folder, with the run's log lines,
 * its metrics lines and its stopping handed to the caller instead of stdout and Ctrl-C.
 */
import type { Config } from '../config/schema.ts';
import { envDefinition } from '../envs/index.ts';
import type { TrainLine } from '../run/metrics-log.ts';
import type { EvalResult } from '../run/records.ts';
import { loadConfig, type ConfigSource } from './config.ts';

export interface TrainOptions {
  /** A config file's path, or the options as an object (docs/CONFIG.md); default: every option at its default. */
  config?: ConfigSource;
  /** `key.path=value` overrides over `config`, as `empo2 train --set` gives them. */
  set?: readonly string[];
  /** Continue the run in run_dir from its latest checkpoint (`empo2 train --resume`); default false. */
  resume?: boolean;
  /** Each iteration's metrics line (metrics.jsonl's `train` line), once it is written. */
  onIteration?: (line: TrainLine) => void;
  /**
   * Aborting stops the run as Ctrl-C stops `empo2 train`: the current iteration finishes and is
   * checkpointed (an evaluation before the first or after the last iteration stops at once), and
   * train() then returns with `interrupted: true`; `resume: true` goes on from there.
   */
  signal?: AbortSignal;
  /** Where the run's log lines go (default: console.log); `() => {}` keeps it quiet. */
  log?: (line: string) => void;
}

export interface TrainResult {
  /** The run folder: config.yaml, metrics.jsonl, eval.md, checkpoints/, trajectories/. */
  runDir: string;
  /** Iterations done (the latest checkpoint's). */
  iterations: number;
  /** The evaluation before training (iteration 0); null when the run was stopped during it. */
  initialEval: EvalResult | null;
  /** The final evaluation (else the last one made); null when the run was stopped before any finished. */
  finalEval: EvalResult | null;
  /** The final evaluation against the first as the Markdown table eval.md holds; null without a final evaluation. */
  evalTable: string | null;
  /** Stopped by the signal (or a Ctrl-C the program passed on) before the run's end. */
  interrupted: boolean;
  /**
   * Iterations of this call in which every episode failed: nothing was learned in them. Three in a row
   * stop the run: train() and trainAgent() then reject with an AllEpisodesFailedError instead.
   */
  failedIterations: number[];
  /** The config the run used, as validated (and saved in the run folder's config.yaml). */
  config: Config;
}

/**
 * Trains a policy: opens the run in config.run_dir (fresh, or resumed), evaluates, runs the iterations
 * and the final evaluation, and returns how it went. The config and env.name are checked before any
 * work: an invalid option or an unregistered environment throws a ConfigError naming it.
 */
export async function train(options: TrainOptions = {}): Promise<TrainResult> {
  const config = loadConfig(options.config, { set: options.set });
  envDefinition(config.env.name);
  // Loaded here, so that importing the library (to register an environment, read a config) loads no engine.
  const [{ train: runTraining }, { formatEvalTable }] = await Promise.all([
    import('../trainer/trainer.ts'),
    import('../trainer/evaluate.ts'),
  ]);
  const result = await runTraining(config, {
    resume: options.resume ?? false,
    log: options.log,
    signal: options.signal,
    onIteration: options.onIteration,
  });
  // Only a finished run's table is in eval.md; one stopped early has none there.
  const evalTable = result.finalEval && !result.interrupted ? formatEvalTable(result.finalEval, result.initialEval) : null;
  return { ...result, evalTable, config };
}
