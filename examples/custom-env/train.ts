/**
 * Trains the tiny default model on the doors environment (./doors-env.ts) with EMPO², then prints the
 * held-out evaluation. Ctrl-C stops it after the current iteration with a checkpoint saved; run it
 * again with --resume to go on.
 *   node train.js [--iterations 10] [--run-dir runs/doors] [--resume]
 */
import { parseArgs } from 'node:util';
import { registerEnv, train } from 'empo2';
import { doors } from './doors-env.js';

const { values } = parseArgs({
  options: {
    iterations: { type: 'string', default: '10' },
    'run-dir': { type: 'string', default: 'runs/doors' },
    resume: { type: 'boolean', default: false },
  },
});

registerEnv('doors', doors);

// Ctrl-C is the program's to handle: here it asks the run to stop as `empo2 train` does.
const stop = new AbortController();
process.once('SIGINT', () => stop.abort());

const result = await train({
  config: {
    run_dir: values['run-dir'],
    seed: 1,
    env: { name: 'doors', max_steps: 6, eval_variations: 2 },
    // The smallest model, so that this runs in seconds on a CPU; drop these for the default tiny model.
    model: { hidden_size: 32, intermediate_size: 64, num_hidden_layers: 1, vocab_size: 300 },
    rollout: { tasks_per_batch: 2, group_size: 4 },
    algo: { name: 'empo2' }, // the paper's method; without it the default, GiGPO (docs/CONFIG.md)
    train: { iterations: Number(values.iterations), eval_every: 0 },
  },
  resume: values.resume,
  signal: stop.signal,
  log: () => {}, // the lines below say enough
  onIteration: (line) =>
    console.log(
      `iteration ${line.iteration}: mean score ${line.mean_score?.toFixed(1) ?? 'none (every episode failed)'}, loss ${line.loss.toFixed(4)}, ${line.env_steps} env steps`,
    ),
});

if (result.interrupted) console.log(`stopped at iteration ${result.iterations}; run again with --resume to go on`);
if (result.evalTable) console.log(`\n${result.evalTable}`);
console.log(`\nrun folder: ${result.runDir} (final mean score ${result.finalEval?.summary.mean_score.toFixed(1) ?? 'none'})`);
