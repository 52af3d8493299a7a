/**
 * `npx tsx bench/gateway-tools.ts [--set key.path=value ...] [--out DIR]`: the wall time of the built-in
 * environment's episodes played through the gateway as tool calls (examples/agent-tools: `@openai/agents`
 * on the Responses API, one forced `act` call per step, the valid actions as the enum) against the same
 * episodes played in process (the constrained rollout), in one run on this machine. All arms open the
 * same config (the default run unless --set changes it) with one training iteration, and the bench
 * compares the evaluation before training (the same initial weights, the same held-out episodes) and the
 * training iteration's rollout: seconds per environment step in each, and their ratio (goal, issue #87:
 * at most 1.2×); beside them the update's seconds per step and the prompt and trained tokens per step.
 * The tool prompts differ by what tool calling adds (the tools block in the system turn, the call's
 * wrapper around each action), which the ratio includes. A third arm separates the two costs: the same
 * episodes through the gateway by a plain chat agent (the `openai` client) that sends the in-process
 * prompt's own messages with the valid actions as `allowed_texts` (the messages src/gateway/equivalence.test.ts
 * shows give the in-process prompt ids), so its ratio is what the gateway path itself costs.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import OpenAI from 'openai';
import { createEnv, environmentCorpus, loadConfig, train, trainAgent, type AgentInput } from '../src/index.ts';
import { promptSettings } from '../src/internals.ts';
import { toolAgent, type EnvTask, type ToolEnv } from '../examples/agent-tools/agent.ts';

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

/**
 * The in-process plain prompt as chat messages (src/trainer/prompt.ts renderPromptParts; the PLAIN style of
 * src/gateway/equivalence.test.ts): the task with the first observation, the last `history` turns with the
 * actions as the assistant's, and the action constrained to the valid ones.
 */
function plainAgent(o: { openEnv: () => Promise<ToolEnv>; maxSteps: number; prompt: ReturnType<typeof promptSettings> }) {
  return async ({ baseURL, apiKey, model, task, signal }: AgentInput<EnvTask>) => {
    const client = new OpenAI({ baseURL, apiKey, maxRetries: 0 });
    const env = await o.openEnv();
    try {
      const start = await env.reset(task.family, task.variation);
      const turns: { observation: string; valid: string[]; action?: string }[] = [
        { observation: start.observation, valid: start.validActions },
      ];
      const steps: { reward: number; score: number }[] = [];
      let score = 0;
      for (let t = 0; t < o.maxSteps && turns.at(-1)!.valid.length > 0; t++) {
        const h = o.prompt.history;
        const shown = h === null ? turns : turns.slice(Math.max(0, turns.length - 1 - h));
        const messages: OpenAI.Chat.ChatCompletionMessageParam[] = o.prompt.system ? [{ role: 'system', content: o.prompt.system }] : [];
        shown.forEach((turn, i) => {
          let user = i === 0 ? `Task: ${start.task}\n${turn.observation}` : turn.observation;
          const current = i === shown.length - 1;
          if (current && o.prompt.showValidActions) user += `\nValid actions: ${turn.valid.join(', ')}`;
          messages.push({ role: 'user', content: user });
          if (!current) messages.push({ role: 'assistant', content: turn.action ?? '' });
        });
        const turn = turns.at(-1)!;
        // empo2's extensions to the request (docs/AGENTS.md): the state, and the valid actions as the allowed texts.
        const body = { model, messages, empo2_state: turn.observation, allowed_texts: turn.valid };
        const r = await client.chat.completions.create(body as OpenAI.Chat.ChatCompletionCreateParamsNonStreaming, { signal });
        turn.action = (r.choices[0].message.content ?? '').trim();
        const next = await env.step(turn.action);
        steps.push({ reward: next.reward, score: next.score });
        score = next.score;
        turns.push({ observation: next.observation, valid: next.validActions });
        if (next.done) break;
      }
      return { score, steps };
    } finally {
      await env.close();
    }
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
const corpus = await environmentCorpus(settings);
await trainAgent({
  agent: plainAgent({ openEnv: () => createEnv(settings), maxSteps, prompt: promptSettings(cfg) }),
  tasks,
  evalTasks,
  taskName: (t) => t.family,
  corpus,
  ...(values['batch-wait-ms'] ? { batchWaitMs: Number(values['batch-wait-ms']) } : {}),
  set: [...set, `run_dir=${join(out, 'gateway-plain')}`],
  log: quiet,
});
const plain = timing(join(out, 'gateway-plain'));
await trainAgent({
  agent: toolAgent({ openEnv: () => createEnv(settings), maxSteps }),
  tasks,
  evalTasks,
  taskName: (t) => t.family,
  // The in-process run's tokenizer (examples/agent-tools/train.ts passes the same).
  corpus,
  ...(values['batch-wait-ms'] ? { batchWaitMs: Number(values['batch-wait-ms']) } : {}),
  set: [...set, `rollout.max_tokens=${Math.max(cfg.rollout.max_tokens, 128)}`, `run_dir=${join(out, 'gateway')}`],
  log: quiet,
});
const gateway = timing(join(out, 'gateway'));

const perStep = (s: number, n: number) => (1000 * s) / Math.max(n, 1);
const cell = (s: number, n: number, ref?: number) =>
  `${n} steps, ${perStep(s, n).toFixed(1)} ms/step${ref === undefined ? '' : ` (${(perStep(s, n) / ref).toFixed(2)}×)`}`;
const row = (what: string, pick: (t: Timing) => [number, number]) => {
  const ref = perStep(...pick(inProcess));
  console.log(`| ${what} | ${cell(...pick(inProcess))} | ${cell(...pick(plain), ref)} | ${cell(...pick(gateway), ref)} |`);
};
const tokens = (what: string, f: (t: Timing) => number, digits: number) =>
  console.log(
    `| ${what} | ${f(inProcess).toFixed(digits)} | ${f(plain).toFixed(digits)} (${(f(plain) / f(inProcess)).toFixed(2)}×) | ${f(gateway).toFixed(digits)} (${(f(gateway) / f(inProcess)).toFixed(2)}×) |`,
  );
console.log('| phase | in process | gateway, plain chat (the same prompts) | gateway, tools (forced calls) |');
console.log('|---|---|---|---|');
row('evaluation before training', (t) => [t.evalSeconds, t.evalSteps]);
row('training rollout', (t) => [t.rolloutSeconds, t.rolloutSteps]);
row('update (per step rolled out)', (t) => [t.updateSeconds, t.rolloutSteps]);
tokens('prompt tokens per step (mean)', (t) => t.promptTokens, 0);
tokens('trained tokens per step', (t) => t.trainedTokens / t.rolloutSteps, 1);
if (!values.out) rmSync(out, { recursive: true, force: true });
