/**
 * Trains the model behind ./agent.ts with EMPO² through the gateway. In this repository, with tsx (the
 * file imports 'empo2', which tsconfig.json maps to src/):
 *
 *   npx tsx examples/agent-openai/train.ts [model directory] [run directory] [--set key.path=value ...]
 *
 * With a model directory (SmolLM2-135M-Instruct after `npm run setup`: models/smollm2-135m-instruct)
 * the agent talks to that model; without one, to the tiny built-in model (fast, and it learns little).
 * Each `--set` overrides one setting of the config below, as `empo2 train --set` does (docs/CONFIG.md),
 * e.g. memory rollouts in every iteration, on- and off-policy within each:
 *
 *   npx tsx examples/agent-openai/train.ts models/smollm2-135m-instruct runs/agent-openai-memory \
 *     --set algo.p=1 --set algo.q=0.5 --set experimental.mode_draw_per_rollout=true
 */
import { trainAgent } from 'empo2';
import { wordAgent, type WordTask } from './agent.ts';

const args = process.argv.slice(2);
const set: string[] = [];
const positional: string[] = [];
for (let i = 0; i < args.length; i++) {
  if (args[i] !== '--set') positional.push(args[i]);
  else if (i + 1 < args.length && args[i + 1].includes('=')) set.push(args[++i]);
  else throw new Error(`examples/agent-openai/train.ts: --set needs key.path=value (got ${args[i + 1] ?? 'nothing'})`);
}
const [modelPath, runDir = 'runs/agent-openai'] = positional;
const words = ['apple', 'river', 'stone', 'light', 'green', 'house', 'bread', 'chair'];
const tasks: WordTask[] = words.slice(0, 6).map((word) => ({ word }));
const evalTasks: WordTask[] = words.slice(6).map((word) => ({ word }));

const result = await trainAgent({
  agent: wordAgent(),
  tasks,
  evalTasks,
  config: {
    run_dir: runDir,
    model: { path: modelPath ?? null },
    algo: { name: 'empo2' },
    // A real model's full fine-tune: the default 1e-3 is the tiny model's (SmolLM2 collapsed to '" " "' after one update with it).
    optim: { lr: modelPath ? 1e-5 : 1e-3 },
    rollout: { tasks_per_batch: 2, group_size: 4, max_tokens: 8 },
    train: { iterations: 2 },
    env: { eval_variations: 2 },
  },
  set,
  timeoutSeconds: 600,
});
// The log above ends with the held-out table (also in eval.md); the episodes, tips included: empo2 dashboard <run directory>.
console.log(`run: ${result.runDir}`);
