/**
 * LangGraph.js's prebuilt ReAct agent (`createReactAgent` over LangChain's `ChatOpenAI`, unmodified)
 * through the training gateway with the tiny model: a tool episode of two forced calls and their results.
 * The model is bound with `tool_choice: "required"` (the gateway constrains decoding to a valid call of the
 * tool's schema); the tool returns directly, so each `invoke` of the graph is one call and its result, and
 * the second `invoke` continues the graph's own message state. Each call is one recorded step whose state
 * is the tool's result before it and whose prompt extends the previous step's sampled ids token for token.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../src/config/load.ts';
import { environmentCorpus } from '../src/envs/index.ts';
import { createEngine, initBackend } from '../src/policy/index.ts';
import type { PolicyEngine } from '../src/policy/types.ts';
import type { Episode } from '../src/run/records.ts';
import { rolloutSettings } from '../src/trainer/rollout.ts';
import { removeTips } from '../src/trainer/prompt.ts';
import { openAgentPlay, type AgentInput } from '../src/gateway/index.ts';
import { TINY_MODEL } from './support/tiny.ts';

let engine: PolicyEngine;
const cfg = loadConfig(null, [...TINY_MODEL, 'seed=9', 'rollout.max_tokens=120', 'run_dir=/nonexistent']);
beforeAll(async () => {
  await initBackend();
  ({ engine } = await createEngine(cfg, 'fresh', () => environmentCorpus(cfg.env)));
}, 120_000);

async function playOne(agent: (input: AgentInput) => Promise<number>): Promise<Episode> {
  const play = await openAgentPlay(cfg, { agent, taskOf: () => 'task', log: () => {} });
  try {
    const settings = rolloutSettings(cfg, false, 31);
    const { episodes } = await play.player(engine, [{ task: 'agent', variation: 0, group: 0 }], {
      settingsFor: () => settings,
      evaluation: false,
    });
    return episodes[0];
  } finally {
    await play.close();
  }
}

describe('LangGraph.js createReactAgent through the gateway', () => {
  it('plays two forced tool calls and their results, each a token-exact step', async () => {
    const { ChatOpenAI } = await import('@langchain/openai');
    const { tool } = await import('@langchain/core/tools');
    const { HumanMessage } = await import('@langchain/core/messages');
    const { createReactAgent } = await import('@langchain/langgraph/prebuilt');
    const { z } = await import('zod');
    const visited: string[] = [];
    const episode = await playOne(async ({ baseURL, apiKey, model }) => {
      const move = tool(
        async ({ room }: { room: string }) => {
          visited.push(room);
          return `You are in the ${room}.`;
        },
        {
          name: 'move',
          description: 'Go to a room.',
          schema: z.object({ room: z.enum(['hall', 'kitchen', 'garden']) }),
          returnDirect: true,
        },
      );
      const llm = new ChatOpenAI({ model, apiKey, configuration: { baseURL }, maxRetries: 0 });
      const agent = createReactAgent({ llm: llm.bindTools([move], { tool_choice: 'required' }), tools: [move] });
      let state = await agent.invoke({ messages: [new HumanMessage('Find the hat. You are in the hall.')] });
      state = await agent.invoke({ messages: [...state.messages, new HumanMessage('Not here. Move again.')] });
      expect(state.messages.map((m) => m.getType())).toEqual(['human', 'ai', 'tool', 'human', 'ai', 'tool']);
      return 1;
    });
    expect(episode.failure ?? null).toBeNull();
    expect(visited).toHaveLength(2);
    expect(episode.steps.map((s) => s.action)).toEqual(visited.map((room) => `move {"room":"${room}"}`));
    expect(episode.steps[1].observation).toBe('Not here. Move again.');
    const [first, second] = episode.steps;
    const sampled = [...removeTips(first.prompt, first.tipSpan), ...first.response];
    expect(second.prompt.slice(0, sampled.length)).toEqual(sampled);
    expect(second.call?.tokenExact).toBe(true);
  }, 120_000);
});
