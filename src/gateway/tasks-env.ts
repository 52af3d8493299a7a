/**
 * A user's agent tasks as the trainer draws them: one task family, `agent`, whose train-split
 * variations are the indices of the training tasks and whose evaluation splits are the held-out
 * tasks (the training tasks again when none are given). The trainer draws (task, variation) jobs and
 * groups from it as from any environment; the agent plays each job through the gateway, so the
 * environment itself is never stepped.
 */
import { ConfigError } from '../config/load.ts';
import type { Config } from '../config/schema.ts';
import type { EnvSettings } from '../envs/index.ts';
import { envNames, registerEnv } from '../envs/index.ts';
import type { Env, ResetResult, Split, StepResult } from '../envs/types.ts';

/** `env.name` of a run whose episodes a user's agent plays. */
export const AGENT_ENV = 'agent';
/** Its one task family. */
export const AGENT_TASK = 'agent';

export interface AgentTaskCounts {
  /** Training tasks (variations 0 … train − 1). */
  train_tasks: number;
  /** Held-out tasks (variations train … train + eval − 1); 0: evaluate on the training tasks. */
  eval_tasks: number;
  /** Text for the tiny model's tokenizer (the tasks' texts), when model.path is null. */
  corpus?: string[];
}

function countsOf(s: EnvSettings): AgentTaskCounts {
  const o = s.options as Partial<AgentTaskCounts>;
  const train = o.train_tasks;
  if (typeof train !== 'number' || !Number.isInteger(train) || train < 1)
    throw new Error('env.options.train_tasks must be the number of training tasks (trainAgent and empo2 train --agent set it)');
  const evalTasks = o.eval_tasks ?? 0;
  if (!Number.isInteger(evalTasks) || evalTasks < 0)
    throw new Error('env.options.eval_tasks must be a count (0: evaluate on the training tasks)');
  return { train_tasks: train, eval_tasks: evalTasks, corpus: o.corpus };
}

const range = (from: number, n: number) => Array.from({ length: n }, (_, i) => from + i);

class AgentTasksEnv implements Env {
  readonly name = AGENT_ENV;
  constructor(
    private readonly counts: AgentTaskCounts,
    private readonly maxCalls: number | null,
  ) {}
  tasks(): string[] {
    return [AGENT_TASK];
  }
  variations(_task: string, split: Split): number[] {
    const { train_tasks: n, eval_tasks: m } = this.counts;
    return split === 'train' || m === 0 ? range(0, n) : range(n, m);
  }
  maxSteps(): number {
    return this.maxCalls ?? 50;
  }
  private played(): never {
    throw new Error(
      `the "${AGENT_ENV}" environment is played by your agent through the gateway (trainAgent, empo2 train --agent), not stepped by the trainer`,
    );
  }
  reset(): Promise<ResetResult> {
    this.played();
  }
  step(): Promise<StepResult> {
    this.played();
  }
  validActions(): string[] {
    return [];
  }
  score(): number {
    return 0;
  }
  done(): boolean {
    return true;
  }
  async close(): Promise<void> {}
}

/** Registers the `agent` environment (once per process). */
export function registerAgentEnv(): void {
  if (envNames().includes(AGENT_ENV)) return;
  registerEnv(AGENT_ENV, {
    create: (s) => new AgentTasksEnv(countsOf(s), s.max_steps),
    corpus: (s) => {
      const c = countsOf(s).corpus;
      if (!c || c.length === 0) throw new Error('the tiny model needs text for its tokenizer: give trainAgent a corpus, or a model.path');
      return c;
    },
  });
}

const text = (task: unknown) => (typeof task === 'string' ? task : (JSON.stringify(task) ?? String(task)));

/** A run's config for an agent's tasks: `cfg` with env.name `agent` over them (the tiny model's corpus: the tasks' texts unless given). */
export function agentConfig(cfg: Config, o: { tasks: readonly unknown[]; evalTasks?: readonly unknown[]; corpus?: string[] }): Config {
  const { tasks, evalTasks = [] } = o;
  if (!Array.isArray(tasks) || tasks.length === 0) throw new ConfigError('trainAgent: give at least one task (tasks: [...])');
  if (cfg.env.name !== 'builtin' && cfg.env.name !== AGENT_ENV)
    throw new ConfigError(
      `trainAgent: env.name is "${cfg.env.name}", but an agent's episodes are played through the gateway (leave env.name out)`,
    );
  const corpus = o.corpus ?? [...tasks, ...evalTasks].map(text);
  return {
    ...cfg,
    env: { ...cfg.env, name: AGENT_ENV, tasks: null, options: { train_tasks: tasks.length, eval_tasks: evalTasks.length, corpus } },
  };
}
