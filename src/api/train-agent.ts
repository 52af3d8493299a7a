/**
 * `trainAgent()`: trains the model behind an agent the user already has, a function that plays one
 * task with any OpenAI-compatible client and returns its reward. The trainer serves the policy through
 * the gateway (../gateway/), gives every episode its own base URL and key, and trains on the calls the
 * agent made with EMPO² (or GRPO, GiGPO) exactly as on its own rollouts: groups of rollouts per task,
 * the memory's tips in memory rollouts, the update on every call's response tokens. docs/AGENTS.md.
 */
import { ConfigError } from '../config/load.ts';
import type { Config } from '../config/schema.ts';
import type { AgentInput, AgentOutcome, AgentPlayOptions } from '../gateway/index.ts';
import { agentConfig, registerAgentEnv } from '../gateway/tasks-env.ts';
import { loadConfig } from './config.ts';
import type { JudgeReward } from './judge.ts';
import type { TrainOptions, TrainResult } from './train.ts';

export type { AgentInput, AgentOutcome } from '../gateway/index.ts';

/** An agent: plays one task through `input.baseURL` with `input.apiKey` and returns how it went. */
export type Agent<Task> = (input: AgentInput<Task>) => Promise<AgentOutcome>;

export interface TrainAgentOptions<Task> extends TrainOptions {
  agent: Agent<Task>;
  /** The training tasks: anything the agent reads (a string, an object); groups of rollouts are drawn from them. */
  tasks: readonly Task[];
  /** Held-out tasks for the evaluations (default: the training tasks). */
  evalTasks?: readonly Task[];
  /**
   * A task's name: tasks of the same name form one task family, with its own row in the evaluation tables
   * and its own memory (`memory.slot: task`); undefined or null: the family `agent` (default: all tasks are).
   */
  taskName?: (task: Task) => string | null | undefined;
  /**
   * Seconds of the agent's own time an episode may take before it fails (default 300). Time its calls spend
   * inside the gateway (waiting for their lockstep batch, being sampled) is not counted, so a big batch on a
   * slow model needs no longer timeout.
   */
  timeoutSeconds?: number;
  /** Calls an episode may make (default: env.max_steps, else 50). */
  maxCalls?: number;
  /** Response tokens an episode may use over its calls (default 16384); one call's are capped by rollout.max_tokens. */
  maxTokens?: number;
  /**
   * Calls an episode may have in flight at once (default 8: a parallel guardrail, sub-agents); each is a
   * step, in order of arrival. One more is answered 429 and the episode goes on.
   */
  maxConcurrentCalls?: number;
  /** Milliseconds a step waits for the episodes that have not called yet before sampling those that have (default 1000). */
  batchWaitMs?: number;
  /** Episodes played at once (default: env.max_instances, else the whole batch). */
  concurrency?: number | null;
  /** Text for the tiny model's tokenizer when model.path is null (default: the tasks' texts). */
  corpus?: string[];
  /**
   * The training reward: `judge({ base_url, model, rubric })` scores each group's episodes together
   * (env.reward: judge; mode replace, the default, lets the agent return no reward). Default: what the agent reports.
   */
  reward?: JudgeReward;
  /** Where the gateway listens (default 127.0.0.1, a free port). */
  host?: string;
  port?: number;
}

/** Trains the policy behind `options.agent` on `options.tasks`; returns as train() does. */
export async function trainAgent<Task>(options: TrainAgentOptions<Task>): Promise<TrainResult> {
  if (typeof options.agent !== 'function')
    throw new ConfigError('trainAgent: agent must be an async function ({ baseURL, apiKey, model, task, signal }) => reward');
  registerAgentEnv();
  const { tasks, evalTasks = [] } = options;
  const loaded = loadConfig(options.config, { set: options.set });
  const config = agentConfig(options.reward ? withJudge(loaded, options.reward) : loaded, {
    tasks,
    evalTasks,
    corpus: options.corpus,
    taskName: options.taskName,
  });
  const log = options.log ?? ((l: string) => console.log(l));
  const [{ train: runTraining }, { formatEvalTable }, { openAgentPlay }] = await Promise.all([
    import('../trainer/trainer.ts'),
    import('../trainer/evaluate.ts'),
    import('../gateway/index.ts'),
  ]);
  const play = await openAgentPlay<Task>(config, {
    ...(options as Omit<AgentPlayOptions<Task>, 'taskOf' | 'log'>),
    taskOf: (job) => (job.variation < tasks.length ? tasks[job.variation] : evalTasks[job.variation - tasks.length]),
    log,
  });
  try {
    const result = await runTraining(config, {
      resume: options.resume ?? false,
      log,
      signal: options.signal,
      onIteration: options.onIteration,
      player: play.player,
      onPhase: play.onPhase,
    });
    const evalTable = result.finalEval && !result.interrupted ? formatEvalTable(result.finalEval, result.initialEval) : null;
    return { ...result, evalTable, config };
  } finally {
    await play.close();
  }
}

/** The config with the judge as its reward (a reward option that is not judge() output is refused, naming it). */
function withJudge(cfg: Config, reward: JudgeReward): Config {
  if (reward?.kind !== 'judge') throw new ConfigError('trainAgent: reward must be judge({ base_url, model, rubric })');
  return { ...cfg, env: { ...cfg.env, reward: 'judge', judge: reward.settings } };
}
