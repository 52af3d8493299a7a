/**
 * Trains the model behind ./agent.ts (an `@openai/agents` agent whose actions are tool calls) with the
 * default run's algorithm (GiGPO) on the built-in environment, through the gateway. In this repository,
 * with tsx (the file imports 'empo2', which tsconfig.json maps to src/):
 *
 *   npx tsx examples/agent-tools/train.ts [run directory] [--set key.path=value ...] [--resume]
 *
 * The tiny default model (model.path null) unless `--set model.path=models/smollm2-135m-instruct`. The
 * tasks are the environment's own: its training variations to train on, its test variations held out,
 * one family per task name, so the evaluation table has a row per family as `empo2 train` has.
 */
import { createEnv, environmentCorpus, loadConfig, trainAgent } from 'empo2';
import { toolAgent, type EnvTask } from './agent.ts';

const args = process.argv.slice(2);
const set: string[] = [];
const positional: string[] = [];
let resume = false;
for (let i = 0; i < args.length; i++) {
  if (args[i] === '--resume') resume = true;
  else if (args[i] !== '--set') positional.push(args[i]);
  else if (i + 1 < args.length && args[i + 1].includes('=')) set.push(args[++i]);
  else throw new Error(`examples/agent-tools/train.ts: --set needs key.path=value (got ${args[i + 1] ?? 'nothing'})`);
}
const [runDir = 'runs/agent-tools'] = positional;

// The built-in environment as the run's settings give it (env.* defaults and --set). The tasks are listed in
// variation order: the run keeps the first env.train_variations of each family to train on, and evaluates
// the first env.eval_variations of each family's env.eval_split, as `empo2 train` does.
const cfg = loadConfig(null, { set });
const settings = { ...cfg.env, name: 'builtin' };
const env = await createEnv(settings);
const tasksOf = (split: 'train' | 'dev' | 'test'): EnvTask[] =>
  env.tasks().flatMap((family) => env.variations(family, split).map((variation) => ({ family, variation })));
const tasks = tasksOf('train');
const evalTasks = tasksOf(cfg.env.eval_split);
const maxSteps = cfg.env.max_steps ?? Math.max(...env.tasks().map((family) => env.maxSteps(family)));
await env.close();

const result = await trainAgent({
  agent: toolAgent({ openEnv: () => createEnv(settings), maxSteps }),
  tasks,
  evalTasks,
  taskName: (t) => t.family,
  // timeoutSeconds: the default, 300 s of each agent's own time. An episode waits for its whole lockstep batch at
  // every step (the 60 held-out episodes of an evaluation on two shared cores took over 300 s each), but that wait
  // is not counted: the timeout measures the agent's own time (docs/AGENTS.md, Faults).
  // The tiny default model's tokenizer learnt from the environment's text, as `empo2 train` learns it (without
  // it, from the tasks' JSON: an observation then took 4× the tokens and a step's prompt 1.4×).
  corpus: await environmentCorpus(settings),
  // A call is the action wrapped in the tool call's text (`<tool_call>\n{"name": "act", ...}\n</tool_call>`):
  // room for it where the in-process rollout's action alone needs rollout.max_tokens (32).
  config: { run_dir: runDir, rollout: { max_tokens: 128 } },
  set,
  resume,
});
// The log above ends with the held-out table (also in eval.md); the episodes: empo2 dashboard <run directory>.
console.log(`run: ${result.runDir}`);
