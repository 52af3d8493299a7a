/**
 * The gateway path is the built-in path: the built-in environment played by an agent that talks to the
 * gateway over HTTP and builds the same messages as the built-in rollout's prompt gives the same
 * token ids, log-probs, tips, update statistics and evaluations as the in-process rollout, run for run
 * (EMPO² with memory rollouts on- and off-policy, the novelty reward and GiGPO's step groups, over two
 * iterations so that the second shows the tips the first wrote). Twice: the tiny model's plain prompt with
 * constrained actions, and a model with a chat template, where the trainer uses the instruct prompt
 * (token-in/token-out) and the agent sends the model's free-text answers back as it got them.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadConfig } from '../config/load.ts';
import type { Config } from '../config/schema.ts';
import { createEnv } from '../envs/index.ts';
import { promptSettings } from '../trainer/prompt-style.ts';
import { parseAction, type PromptSettings } from '../trainer/prompt.ts';
import { constrainedTo, environmentPlayer, type RolloutPlayer } from '../trainer/rollout.ts';
import { train } from '../trainer/trainer.ts';
import { saveTinyInstructModel } from '../../test/support/instruct-model.ts';
import { TINY_RUN } from '../../test/support/tiny.ts';
import { openAgentPlay, type AgentInput } from './index.ts';
import type { Episode, RolloutJob } from '../run/records.ts';

let root: string;
beforeAll(() => {
  root = mkdtempSync(join(tmpdir(), 'empo2-gateway-eq-'));
});
afterAll(() => rmSync(root, { recursive: true, force: true }));

const EMPO2 = [
  ...TINY_RUN,
  'train.iterations=2',
  'train.eval_every=1',
  'algo.name=empo2',
  'algo.p=1',
  'algo.q=0.5',
  'experimental.mode_draw_per_rollout=true',
  'algo.step_advantage=gigpo',
  'trajectories.train_per_iteration=4',
];

type Message = { role: 'system' | 'user' | 'assistant'; content: string };

/** One turn of the agent's episode: what it saw, and the model's answer and the action in it once it answered. */
interface AgentTurn {
  observation: string;
  valid: readonly string[];
  answer?: string;
  action?: string;
}

/** How an agent talks to the model: the messages of the current turn, and the action in an answer. */
interface AgentStyle {
  messages(s: PromptSettings, task: string, turns: readonly AgentTurn[]): Message[];
  action(answer: string, valid: readonly string[]): string;
}

const kept = (s: PromptSettings, turns: readonly AgentTurn[]) =>
  s.history === null ? turns : turns.slice(Math.max(0, turns.length - 1 - s.history));

/** The built-in plain prompt (../trainer/prompt.ts renderPromptParts): the actions as the assistant's turns. */
const PLAIN: AgentStyle = {
  messages(s, task, turns) {
    const shown = kept(s, turns);
    const messages: Message[] = s.system ? [{ role: 'system', content: s.system }] : [];
    shown.forEach((turn, i) => {
      let user = i === 0 ? `Task: ${task}\n${turn.observation}` : turn.observation;
      const current = i === shown.length - 1;
      if (current && s.showValidActions) user += `\nValid actions: ${turn.valid.join(', ')}`;
      messages.push({ role: 'user', content: user });
      if (!current) messages.push({ role: 'assistant', content: turn.action ?? '' });
    });
    return messages;
  },
  action: (answer) => answer.trim(),
};

/**
 * The built-in instruct prompt (../trainer/prompt.ts InstructDialogue), as an agent of an instruction-tuned
 * model writes it: the system prompt, the valid actions in every user message that lists them, the model's
 * answers as the gateway returned them in the assistant messages, the action parsed out of the answer.
 */
const INSTRUCT: AgentStyle = {
  messages(s, task, turns) {
    const shown = kept(s, turns);
    const messages: Message[] = s.system ? [{ role: 'system', content: s.system }] : [];
    shown.forEach((turn, i) => {
      let user = i === 0 ? `Task: ${task}\n\n${turn.observation}` : turn.observation;
      const listed = s.showValidActions && turn.valid.length > 0 && turn.valid.length <= (s.maxListedActions ?? Infinity);
      if (listed) user += `\n\nValid actions: ${turn.valid.join(', ')}`;
      messages.push({ role: 'user', content: user });
      if (i < shown.length - 1) messages.push({ role: 'assistant', content: turn.answer ?? '' });
    });
    return messages;
  },
  action: (answer, valid) => parseAction(answer, valid),
};

/**
 * An agent that plays the built-in environment through the gateway, with plain fetch. It names the state
 * (`empo2_state`) and its valid actions: as the allowed texts of a constrained run, else as `empo2_valid_actions`.
 */
function builtinAgent(cfg: Config, style: AgentStyle) {
  const s = promptSettings(cfg);
  return async ({ baseURL, apiKey, model, task, episode }: AgentInput<RolloutJob>) => {
    const env = await createEnv({ name: 'builtin', tasks: cfg.env.tasks, max_steps: cfg.env.max_steps, options: {} });
    try {
      const first = await env.reset(task.task, task.variation, episode.seed);
      const turns: AgentTurn[] = [{ observation: first.observation, valid: first.validActions }];
      const steps: { reward: number; score: number }[] = [];
      const limit = cfg.env.max_steps ?? env.maxSteps(task.task);
      for (let t = 0; t < limit; t++) {
        const turn = turns.at(-1)!;
        const res = await fetch(`${baseURL}/chat/completions`, {
          method: 'POST',
          headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${apiKey}` },
          body: JSON.stringify({
            model,
            messages: style.messages(s, first.task, turns),
            empo2_state: turn.observation,
            ...(cfg.rollout.constrained ? { allowed_texts: constrainedTo(turn.valid) } : { empo2_valid_actions: turn.valid }),
          }),
        });
        const json = (await res.json()) as { choices: { message: { content: string } }[] };
        if (res.status !== 200) throw new Error(`gateway answered ${res.status}: ${JSON.stringify(json)}`);
        turn.answer = json.choices[0].message.content;
        turn.action = style.action(turn.answer, turn.valid);
        const r = await env.step(turn.action);
        steps.push({ reward: r.reward, score: r.score });
        turns.push({ observation: r.observation, valid: r.validActions });
        if (r.done) break;
      }
      return { score: env.score(), steps, finalObservation: turns.at(-1)!.observation, description: first.task };
    } finally {
      await env.close();
    }
  };
}

/** A player that keeps the episodes of every batch it plays. */
function recording(inner: RolloutPlayer) {
  const batches: Episode[][] = [];
  const player: RolloutPlayer = async (engine, jobs, o) => {
    const r = await inner(engine, jobs, o);
    batches.push(r.episodes);
    return r;
  };
  return { player, batches };
}

/** A record without its clock readings (wall times, rates, shares of time). */
const TIMING = /seconds|elapsed|time|_per_s$|share_of_rollout/i;
function strip(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(strip);
  if (typeof v !== 'object' || v === null) return v;
  return Object.fromEntries(Object.entries(v).flatMap(([k, x]) => (TIMING.test(k) ? [] : [[k, strip(x)]])));
}

function metrics(runDir: string): unknown[] {
  return readFileSync(join(runDir, 'metrics.jsonl'), 'utf8')
    .trim()
    .split('\n')
    .map((l) => strip(JSON.parse(l)));
}

function trajectories(runDir: string, file: string): unknown[] {
  return readFileSync(join(runDir, 'trajectories', file), 'utf8')
    .trim()
    .split('\n')
    .map((l) => strip(JSON.parse(l)));
}

/**
 * Trains the same run in process and through the gateway with `style`'s agent and checks that every call's
 * prompt ids (with the tip block where shown, and its span), sampled ids, log-probs and tips, the metrics
 * lines and the trajectory records are the same; gives the in-process run's metrics lines.
 */
async function sameRuns(name: string, args: readonly string[], style: AgentStyle): Promise<unknown[]> {
  const inProcess = loadConfig(null, [...args, `run_dir=${join(root, name, 'in-process')}`]);
  const envs = await Promise.all(
    [0, 1, 2, 3].map(() => createEnv({ name: 'builtin', tasks: inProcess.env.tasks, max_steps: inProcess.env.max_steps })),
  );
  const builtIn = recording(environmentPlayer(envs));
  await train(inProcess, { resume: false, log: () => {}, player: builtIn.player });
  await Promise.all(envs.map((e) => e.close()));

  const viaGateway = loadConfig(null, [...args, `run_dir=${join(root, name, 'gateway')}`]);
  const lines: string[] = [];
  const play = await openAgentPlay<RolloutJob>(viaGateway, {
    agent: builtinAgent(viaGateway, style),
    taskOf: (job) => job,
    batchWaitMs: 30_000, // only the episodes' own pace decides a step: never a timer
    log: (l) => lines.push(l),
  });
  try {
    const gateway = recording(play.player);
    await train(viaGateway, { resume: false, log: (l) => lines.push(l), player: gateway.player });
    const calls = (r: typeof gateway.batches) =>
      r.flatMap((b) => b.flatMap((e) => e.steps.map((st) => ({ ...st, tips: st.tips?.map((t) => t.text) }))));
    expect(calls(gateway.batches)).toEqual(calls(builtIn.batches));
    const shown = calls(builtIn.batches).filter((st) => st.tipSpan !== null);
    expect(shown.length).toBeGreaterThan(0);
    expect(gateway.batches.length).toBe(builtIn.batches.length);
  } finally {
    await play.close();
  }
  expect(lines.filter((l) => l.includes('failed and is left out of the update'))).toEqual([]);
  const a = metrics(inProcess.run_dir);
  expect(metrics(viaGateway.run_dir)).toEqual(a);
  // The second iteration was shown the tips the first one wrote, and trained on them on- and off-policy.
  const second = (a as { type: string; iteration: number; modes: Record<string, number> }[]).find(
    (l) => l.type === 'train' && l.iteration === 2,
  );
  expect(second?.modes['tips-off-policy']).toBeGreaterThan(0);
  expect(second?.modes['tips-on-policy']).toBeGreaterThan(0);
  expect(trajectories(viaGateway.run_dir, 'train.jsonl')).toEqual(trajectories(inProcess.run_dir, 'train.jsonl'));
  expect(trajectories(viaGateway.run_dir, 'eval.jsonl')).toEqual(trajectories(inProcess.run_dir, 'eval.jsonl'));
  return a;
}

describe('the gateway path against the built-in rollout', () => {
  it('gives the same tokens, log-probs, tips, update statistics and evaluations (EMPO², tips on- and off-policy, GiGPO)', async () => {
    await sameRuns('plain', EMPO2, PLAIN);
  }, 300_000);

  it('does so with a chat template: the instruct prompt, token-in/token-out, free-text answers parsed into actions', async () => {
    const modelDir = join(root, 'instruct-model');
    await saveTinyInstructModel(modelDir);
    const args = [...EMPO2, `model.path=${modelDir}`, 'rollout.constrained=false', 'rollout.max_tokens=8'];
    expect(promptSettings(loadConfig(null, args)).template).toBeDefined();
    await sameRuns('instruct', args, INSTRUCT);
  }, 300_000);
});
