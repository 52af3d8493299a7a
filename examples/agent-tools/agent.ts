/**
 * An agent written with the OpenAI Agents SDK (`@openai/agents`), on its default model (the Responses
 * API), whose actions are tool calls: it plays one episode of an empo2 environment (the built-in one in
 * ./train.ts) through one function tool, `act`, whose `action` argument is an enum of the actions the
 * environment accepts now. Each step is one run of the agent with `tool_choice: "required"`, ended by the
 * tool's result (`stop_on_first_tool`), so the model makes one call per step and the enum follows the
 * state; the conversation (function calls and their outputs) is carried from step to step as the SDK's
 * history. trainAgent() hands it the episode's baseURL and apiKey; nothing in it knows about empo2 but
 * the outcome it returns (the score after each step, for GiGPO's step credit).
 */
import OpenAI from 'openai';
import { Agent, OpenAIProvider, Runner, tool, type AgentInputItem } from '@openai/agents';

/** One episode: a task family of the environment and one of its variations. */
export interface EnvTask {
  family: string;
  variation: number;
}

/** What the agent needs of an environment (empo2's `Env`, or any with the same calls). */
export interface ToolEnv {
  reset(task: string, variation: number, seed?: number): Promise<{ observation: string; task: string; validActions: string[] }>;
  step(action: string): Promise<{ observation: string; reward: number; done: boolean; score: number; validActions: string[] }>;
  close(): Promise<void>;
}

export interface ToolAgentOptions {
  /** Opens one instance of the environment per episode. */
  openEnv: () => Promise<ToolEnv>;
  /** Steps an episode may take. */
  maxSteps: number;
  /**
   * Past turns (a call and its result) kept in the conversation after the first observation (default 2,
   * as the in-process plain prompt keeps; null: the whole episode). The whole history of a long episode
   * outgrows a small model's context: the tiny default's 4,096 tokens went in 17 steps.
   */
  keepTurns?: number | null;
}

interface AgentInput {
  baseURL: string;
  apiKey: string;
  model: string;
  task: EnvTask;
  signal: AbortSignal;
}

/** The agent: returns the episode's score (0-100) and the reward and score after each step. */
export function toolAgent(o: ToolAgentOptions) {
  return async ({ baseURL, apiKey, model, task, signal }: AgentInput) => {
    const client = new OpenAI({ baseURL, apiKey, maxRetries: 0 });
    // A cast only: @openai/agents-openai pins its own copy of the `openai` package, the same client at run time.
    const runner = new Runner({ modelProvider: new OpenAIProvider({ openAIClient: client as never }), tracingDisabled: true });
    const env = await o.openEnv();
    try {
      const start = await env.reset(task.family, task.variation);
      let valid = start.validActions;
      let history: AgentInputItem[] = [{ role: 'user', content: start.observation }];
      const steps: { reward: number; score: number }[] = [];
      let score = 0;
      for (let t = 0; t < o.maxSteps && valid.length > 0; t++) {
        let done = false;
        const act = tool({
          name: 'act',
          description: 'Take one action in the environment.',
          parameters: {
            type: 'object',
            properties: { action: { type: 'string', enum: valid } },
            required: ['action'],
            additionalProperties: false,
          },
          strict: true,
          execute: async (input) => {
            const r = await env.step((input as { action: string }).action);
            steps.push({ reward: r.reward, score: r.score });
            ({ score, done } = r);
            valid = r.validActions;
            return r.observation;
          },
        });
        const agent = new Agent({
          name: 'player',
          instructions: `Task: ${start.task}`,
          model,
          tools: [act],
          modelSettings: { toolChoice: 'required' },
          toolUseBehavior: 'stop_on_first_tool',
        });
        // A signal per step: the SDK leaves a listener on the signal of each run, which an episode's many runs would pile up.
        const stepControl = new AbortController();
        const stop = () => stepControl.abort(signal.reason);
        signal.addEventListener('abort', stop, { once: true });
        try {
          const [first, ...turns] = (await runner.run(agent, history, { signal: stepControl.signal, maxTurns: 2 })).history;
          // Each turn is two items: the function call and its output.
          const keep = o.keepTurns === undefined ? 2 : o.keepTurns;
          history = [first, ...(keep === null ? turns : turns.slice(-2 * keep))];
        } finally {
          signal.removeEventListener('abort', stop);
        }
        if (done) break;
      }
      return { score, steps };
    } finally {
      await env.close();
    }
  };
}
