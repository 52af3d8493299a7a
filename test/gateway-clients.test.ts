/**
 * Real clients against the training gateway: trainAgent() trains the tiny model behind agents written
 * with the unmodified `openai` npm client (plain and streaming), the Vercel AI SDK (`ai` with
 * `@ai-sdk/openai-compatible`, generateText and streamText), and a Python agent using the `openai` pip
 * package run as a process (`empo2 train --agent`'s path). Each run does an iteration of EMPO² and its
 * records show that every episode's calls are the ones its agent made.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { trainAgent, type AgentInput } from '../src/index.ts';
import { runAgentProcess } from '../src/gateway/index.ts';
import { wordAgent, wordReward, type WordTask } from '../examples/agent-openai/agent.ts';
import { pythonGate, REPO_ROOT, venvPython } from './support/python.ts';
import { TINY_MODEL } from './support/tiny.ts';

let root: string;
beforeAll(() => {
  root = mkdtempSync(join(tmpdir(), 'empo2-gateway-clients-'));
});
afterAll(() => rmSync(root, { recursive: true, force: true }));

const TASKS: WordTask[] = [{ word: 'apple' }, { word: 'river' }, { word: 'stone' }];
const SET = [
  ...TINY_MODEL,
  'seed=5',
  'train.iterations=1',
  'train.eval_every=0',
  'algo.name=empo2',
  'algo.p=1',
  'algo.q=0.5',
  'rollout.tasks_per_batch=2',
  'rollout.group_size=2',
  'rollout.max_tokens=8',
  'env.eval_variations=1',
];

/** Trains one iteration behind `agent`; returns the run's train line and its recorded training episodes. */
async function trainBehind(name: string, agent: (input: AgentInput<WordTask>) => Promise<unknown>) {
  const lines: string[] = [];
  const result = await trainAgent<WordTask>({
    agent: agent as never,
    tasks: TASKS,
    set: [...SET, `run_dir=${join(root, name)}`, 'trajectories.train_per_iteration=4'],
    timeoutSeconds: 120,
    log: (l) => lines.push(l),
  });
  const metrics = readFileSync(join(result.runDir, 'metrics.jsonl'), 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l));
  const episodes = readFileSync(join(result.runDir, 'trajectories', 'train.jsonl'), 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l));
  expect(lines.filter((l) => l.includes('failed and is left out of the update'))).toEqual([]);
  const trainLine = metrics.find((m) => m.type === 'train');
  expect(Object.values(trainLine.modes as Record<string, number>).reduce((a, b) => a + b, 0)).toBe(4);
  expect(trainLine.sequences).toBeGreaterThan(0);
  expect(result.finalEval?.summary.episodes).toBeGreaterThan(0);
  return { trainLine, episodes: episodes as { description: string; score: number; steps: { action: string }[] }[] };
}

/** Wraps an agent to keep, per task word, the answers it was given (to check the records against). */
function witnessed(agent: (input: AgentInput<WordTask>) => Promise<number>) {
  const seen: { word: string; reward: number }[] = [];
  return {
    seen,
    agent: async (input: AgentInput<WordTask>) => {
      const reward = await agent(input);
      seen.push({ word: input.task.word, reward });
      return reward;
    },
  };
}

describe('the gateway with real clients', () => {
  it('the openai npm client (plain and streaming) plays and trains', async () => {
    for (const stream of [false, true]) {
      const w = witnessed(wordAgent({ stream }));
      const { episodes } = await trainBehind(`openai-${stream}`, w.agent);
      for (const e of episodes) {
        // The recorded answers are those the client read: its reward recomputed from them is the episode's.
        const best = Math.max(...e.steps.map((st) => wordReward(st.action, JSON.parse(e.description).word)));
        expect(e.score).toBeCloseTo(best * 100, 9);
      }
    }
  }, 300_000);

  it('the Vercel AI SDK (generateText and streamText through @ai-sdk/openai-compatible) plays and trains', async () => {
    const { generateText, streamText } = await import('ai');
    const { createOpenAICompatible } = await import('@ai-sdk/openai-compatible');
    for (const stream of [false, true]) {
      const agent = async ({ baseURL, apiKey, model, task, signal }: AgentInput<WordTask>) => {
        const provider = createOpenAICompatible({ name: 'empo2', baseURL, apiKey });
        const prompt = `Say the word "${task.word}".`;
        let text: string;
        if (stream) {
          const r = streamText({ model: provider(model), prompt, maxOutputTokens: 8, abortSignal: signal, maxRetries: 0 });
          text = await r.text;
        } else {
          text = (await generateText({ model: provider(model), prompt, maxOutputTokens: 8, abortSignal: signal, maxRetries: 0 })).text;
        }
        return wordReward(text, task.word);
      };
      const { episodes } = await trainBehind(`ai-sdk-${stream}`, agent);
      for (const e of episodes) expect(e.score).toBeCloseTo(wordReward(e.steps[0].action, JSON.parse(e.description).word) * 100, 9);
    }
  }, 300_000);

  const gate = pythonGate(['openai']);
  it.skipIf(!gate.available)(
    `a Python agent with the openai pip package, as a process (${gate.label})`,
    async () => {
      const script = join(REPO_ROOT, 'examples', 'agent-python', 'agent.py');
      // Streaming: the SSE chunks as the pip client parses them (its plain answers are the npm client's case above).
      const command = `AGENT_STREAM=1 ${venvPython()} ${script}`;
      const { episodes } = await trainBehind('python', (input) => runAgentProcess({ command }, input));
      for (const e of episodes) {
        const best = Math.max(...e.steps.map((st) => wordReward(st.action, JSON.parse(e.description).word)));
        expect(e.score).toBeCloseTo(best * 100, 9);
      }
    },
    300_000,
  );
});
