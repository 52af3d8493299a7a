/**
 * `npx tsx bench/gateway-tools.ts [--set key.path=value ...] [--out DIR]`: the wall time of the built-in
 * environment's episodes played through the gateway as tool calls (examples/agent-tools: `@openai/agents`
 * on the Responses API, one forced `act` call per step, the valid actions as the enum) against the same
 * episodes played in process (the constrained rollout), in one run on this machine. Both arms open the
 * same config (the default run unless --set changes it) with one training iteration, and the bench
 * compares the evaluation before training (the same initial weights, the same held-out episodes) and the
 * training iteration's rollout: seconds per environment step in each, and their ratio (goal, issue #87:
 * at most 1.2×); beside them the update's seconds per step and the prompt and trained tokens per step. The prompts differ by what tool calling adds (the tools block in the system turn, the
 * call's wrapper around each action), which the ratio includes.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { createEnv, environmentCorpus, loadConfig, train, trainAgent } from '../src/index.ts';
import { toolAgent, type EnvTask } from '../examples/agent-tools/agent.ts';

const { values } = parseArgs({
  options: { set: { type: 'string', multiple: true, default: [] }, out: { type: 'string' }, 'batch-wait-ms': { type: 'string' } },
});
const out = values.out ?? mkdtempSync(join(tmpdir(), 'empo2-bench-gateway-tools-'));
// One iteration, evaluated before it (and at the end).
const set = ['train.iterations=1', 'train.eval_every=0', ...values.set];

interface Timing {
  evalSeconds: number;
  evalSteps: number;
  rolloutSeconds: number;
  rolloutSteps: number;
  updateSeconds: number;
  promptTokens: number;
  trainedTokens: number;
}

function timing(runDir: string): Timing {
  const lines = readFileSync(join(runDir, 'metrics.jsonl'), 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as { type: string; iteration: number; [k: string]: any });
  const ev = lines.find((l) => l.type === 'eval' && l.iteration === 0);
  const tr = lines.find((l) => l.type === 'train');
  if (!ev || !tr) throw new Error(`${runDir}/metrics.jsonl: no evaluation at iteration 0 or no train line`);
  return {
    evalSeconds: ev.seconds,
    evalSteps: ev.env_steps,
    rolloutSeconds: tr.rollout_seconds,
    rolloutSteps: tr.env_steps,
    updateSeconds: tr.update_seconds,
    promptTokens: tr.mean_prompt_tokens,
    trainedTokens: tr.trained_tokens,
  };
}

const quiet = () => {};
console.log(`bench/gateway-tools: in process, then through the gateway (${set.join(' ')})`);
await train({ set: [...set, `run_dir=${join(out, 'in-process')}`], log: quiet });
const inProcess = timing(join(out, 'in-process'));

const cfg = loadConfig(null, { set });
const settings = { ...cfg.env, name: 'builtin' };
const env = await createEnv(settings);
const tasksOf = (split: 'train' | 'dev' | 'test'): EnvTask[] =>
  env.tasks().flatMap((family) => env.variations(family, split).map((variation) => ({ family, variation })));
const maxSteps = cfg.env.max_steps ?? Math.max(...env.tasks().map((family) => env.maxSteps(family)));
const tasks = tasksOf('train');
const evalTasks = tasksOf(cfg.env.eval_split);
await env.close();
await trainAgent({
  agent: toolAgent({ openEnv: () => createEnv(settings), maxSteps }),
  tasks,
  evalTasks,
  taskName: (t) => t.family,
  // The in-process run's tokenizer (examples/agent-tools/train.ts passes the same).
  corpus: await environmentCorpus(settings),
  ...(values['batch-wait-ms'] ? { batchWaitMs: Number(values['batch-wait-ms']) } : {}),
  set: [...set, `rollout.max_tokens=${Math.max(cfg.rollout.max_tokens, 128)}`, `run_dir=${join(out, 'gateway')}`],
  log: quiet,
});
const gateway = timing(join(out, 'gateway'));

const perStep = (s: number, n: number) => (1000 * s) / Math.max(n, 1);
const row = (what: string, a: number, an: number, b: number, bn: number) =>
  console.log(
    `| ${what} | ${an} steps, ${perStep(a, an).toFixed(1)} ms/step | ${bn} steps, ${perStep(b, bn).toFixed(1)} ms/step | ${(perStep(b, bn) / perStep(a, an)).toFixed(2)}× |`,
  );
console.log('| phase | in process | gateway (tools, forced calls) | gateway / in process |');
console.log('|---|---|---|---|');
row('evaluation before training', inProcess.evalSeconds, inProcess.evalSteps, gateway.evalSeconds, gateway.evalSteps);
row('training rollout', inProcess.rolloutSeconds, inProcess.rolloutSteps, gateway.rolloutSeconds, gateway.rolloutSteps);
row('update (per step rolled out)', inProcess.updateSeconds, inProcess.rolloutSteps, gateway.updateSeconds, gateway.rolloutSteps);
console.log(
  `| prompt tokens per step (mean) | ${inProcess.promptTokens.toFixed(0)} | ${gateway.promptTokens.toFixed(0)} | ${(gateway.promptTokens / inProcess.promptTokens).toFixed(2)}× |`,
);
console.log(
  `| trained tokens per step | ${(inProcess.trainedTokens / inProcess.rolloutSteps).toFixed(1)} | ${(gateway.trainedTokens / gateway.rolloutSteps).toFixed(1)} | ${(gateway.trainedTokens / gateway.rolloutSteps / (inProcess.trainedTokens / inProcess.rolloutSteps)).toFixed(2)}× |`,
);
if (!values.out) rmSync(out, { recursive: true, force: true });
