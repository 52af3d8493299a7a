/**
 * The gateway as the trainer uses it: started for a run, its player handed to the training loop
 * (../trainer/trainer.ts `player`), closed with the run. `trainAgent()` (../api/train-agent.ts) and
 * `empo2 train --agent` are built on it.
 */
import { basename, resolve } from 'node:path';
import { ConfigError } from '../config/load.ts';
import type { Config } from '../config/schema.ts';
import type { PolicyEngine } from '../policy/types.ts';
import type { RolloutJob } from '../run/records.ts';
import { longestTokenBytes } from '../serve/limits.ts';
import { promptSettings } from '../trainer/prompt-style.ts';
import type { RolloutPlayer } from '../trainer/rollout.ts';
import type { TrainPhase } from '../run/records.ts';
import { agentPlayer, type AgentRunner } from './player.ts';
import { startGateway, type Gateway } from './server.ts';

export { agentPlayer, episodeOf, type AgentInput, type AgentOutcome, type AgentRunner } from './player.ts';
export { startGateway, type Gateway } from './server.ts';
export { runAgentProcess, type AgentProcessOptions } from './agent-process.ts';

export interface AgentPlayOptions<Task> {
  agent: AgentRunner<Task>;
  /** The task an agent plays for a job of the run. */
  taskOf: (job: RolloutJob) => Task;
  /**
   * Seconds of the agent's own time an episode may take before it fails (default 300): the clock stands still
   * while one of its calls is inside the gateway (queued, batched, sampled, its answer written), so waiting
   * for the model and the other episodes of the batch does not count (./agent-clock.ts).
   */
  timeoutSeconds?: number;
  /** Calls an episode may make when the config sets no env.max_steps (default 50). */
  maxCalls?: number;
  /** Response tokens an episode may use over all its calls (default 16384). */
  maxTokens?: number;
  /** Calls an episode may have in flight at once (default 8); one more is answered 429. */
  maxConcurrentCalls?: number;
  /** Milliseconds a lockstep batch waits for episodes that have not called yet (default 1000). */
  batchWaitMs?: number;
  /** Episodes played at once (default: env.max_instances, else the whole batch). */
  concurrency?: number | null;
  host?: string;
  port?: number;
  log: (line: string) => void;
}

export interface AgentPlay {
  player: RolloutPlayer;
  /** The trainer's TrainOptions.onPhase: the gateway's /health says the phase and the policy version. */
  onPhase: (p: TrainPhase) => void;
  gateway: Gateway;
  modelName: string;
  close(): Promise<void>;
}

/** Starts the gateway for a run of `cfg` and the player that plays its episodes with `o.agent`. */
export async function openAgentPlay<Task>(cfg: Config, o: AgentPlayOptions<Task>): Promise<AgentPlay> {
  const concurrent = o.maxConcurrentCalls ?? 8;
  if (!Number.isInteger(concurrent) || concurrent < 1)
    throw new ConfigError(`maxConcurrentCalls must be a whole number of calls, at least 1 (got ${String(o.maxConcurrentCalls)})`);
  const modelName = cfg.model.path ? basename(resolve(cfg.model.path)) || 'empo2' : 'empo2-tiny';
  let engine: PolicyEngine | null = null;
  const gateway = await startGateway({
    modelName,
    rendering: { template: promptSettings(cfg).template },
    tokenizer: () => {
      if (!engine) throw new Error('the gateway has no engine yet');
      return engine.tokenizer;
    },
    contextLength: () => engine?.contextLength,
    toolParser: cfg.model.tool_parser,
    host: o.host,
    port: o.port,
    log: o.log,
  });
  const player = agentPlayer<Task>({
    gateway,
    useEngine: (e) => {
      engine = e;
      longestTokenBytes(e.tokenizer); // a pass over the vocabulary (kept per tokenizer), done before the first call waits on it
    },
    modelName,
    agent: o.agent,
    taskOf: o.taskOf,
    budget: { maxCalls: o.maxCalls ?? 50, maxTokens: o.maxTokens ?? 16_384, maxConcurrentCalls: concurrent },
    timeoutMs: (o.timeoutSeconds ?? 300) * 1000,
    batchWaitMs: o.batchWaitMs ?? 1000,
    concurrency: o.concurrency === undefined ? cfg.env.max_instances : o.concurrency,
    judged: cfg.env.reward === 'judge' && cfg.env.judge?.mode === 'replace',
    malformedToolCallReward: cfg.rollout.malformed_tool_call_reward,
    log: o.log,
  });
  o.log(`gateway: ${gateway.url} (each episode gets ${gateway.url}/episodes/<id>/v1 and its own key; model "${modelName}")`);
  return { player, onPhase: (p) => gateway.setPhase(p), gateway, modelName, close: () => gateway.close() };
}
