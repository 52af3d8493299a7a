/**
 * A user's agent tasks as the trainer draws them: one task family per task name (`agent` for tasks
 * without one), whose train-split variations are the indices of its training tasks and whose evaluation
 * splits are its held-out tasks (the training tasks again when none are given). The trainer draws
 * (task, variation) jobs and groups from it as from any environment, and evaluation tables have a row
 * per family; the agent plays each job through the gateway, so the environment itself is never stepped.
 */
import { ConfigError } from '../config/load.ts';
import type { Config } from '../config/schema.ts';
import type { EnvSettings } from '../envs/index.ts';
import { envNames, registerEnv } from '../envs/index.ts';
import type { Env, ResetResult, Split, StepResult } from '../envs/types.ts';

/** `env.name` of a run whose episodes a user's agent plays. */
export const AGENT_ENV = 'agent';
/** The task family of tasks without a name. */
export const AGENT_TASK = 'agent';

export interface AgentTaskCounts {
  /** Training tasks (variations 0 … train − 1). */
  train_tasks: number;
  /** Held-out tasks (variations train … train + eval − 1); 0: evaluate on the training tasks. */
  eval_tasks: number;
  /** Text for the tiny model's tokenizer (the tasks' texts), when model.path is null. */
  corpus?: string[];
  /** The family of every training task, then of every held-out task (absent: all are `agent`). */
  task_names?: string[];
}

function countsOf(s: EnvSettings): AgentTaskCounts {
  const o = s.options as Partial<AgentTaskCounts>;
  const train = o.train_tasks;
  if (typeof train !== 'number' || !Number.isInteger(train) || train < 1)
    throw new Error('env.options.train_tasks must be the number of training tasks (trainAgent and empo2 train --agent set it)');
  const evalTasks = o.eval_tasks ?? 0;
  if (!Number.isInteger(evalTasks) || evalTasks < 0)
    throw new Error('env.options.eval_tasks must be a count (0: evaluate on the training tasks)');
  const names = o.task_names;
  if (names !== undefined && (!Array.isArray(names) || names.length !== train + evalTasks || names.some((n) => typeof n !== 'string')))
    throw new Error(`env.options.task_names must hold the name of each of the ${train + evalTasks} tasks (trainAgent sets it)`);
  return { train_tasks: train, eval_tasks: evalTasks, corpus: o.corpus, task_names: names };
}

const range = (from: number, n: number) => Array.from({ length: n }, (_, i) => from + i);

class AgentTasksEnv implements Env {
  readonly name = AGENT_ENV;
  constructor(
    private readonly counts: AgentTaskCounts,
    private readonly maxCalls: number | null,
  ) {}
  tasks(): string[] {
    const names = this.counts.task_names;
    return names ? [...new Set(names.slice(0, this.counts.train_tasks))] : [AGENT_TASK];
  }
  variations(task: string, split: Split): number[] {
    const { train_tasks: n, eval_tasks: m, task_names: names } = this.counts;
    const all = split === 'train' || m === 0 ? range(0, n) : range(n, m);
    return names ? all.filter((i) => names[i] === task) : all;
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

/** An agent run's tasks: the training and held-out ones, and optionally the name of each task's family. */
export interface AgentTasks<Task = unknown> {
  tasks: readonly Task[];
  evalTasks?: readonly Task[];
  corpus?: string[];
  /** The family a task belongs to: its row in the evaluation tables (undefined or null: `agent`). */
  taskName?: (task: Task) => string | null | undefined;
}

/**
 * The family of every training task, then of every held-out task; undefined when no task has a name
 * (one family, `agent`, as before names existed). Every held-out name must be a training name and the
 * other way round, so that every family is trained and evaluated.
 */
function taskNames<Task>(o: AgentTasks<Task>): string[] | undefined {
  const { tasks, evalTasks = [], taskName } = o;
  if (!taskName) return undefined;
  const nameOf = (task: Task, where: string) => {
    const name = taskName(task);
    if (name === undefined || name === null) return AGENT_TASK;
    if (typeof name !== 'string' || name.trim() === '')
      throw new ConfigError(`task names: ${where} is named ${JSON.stringify(name)}; a task's name must be a non-empty string`);
    return name;
  };
  const train = tasks.map((t, i) => nameOf(t, `training task ${i + 1}`));
  const held = evalTasks.map((t, i) => nameOf(t, `held-out task ${i + 1}`));
  if (held.length > 0) {
    const trained = new Set(train);
    const bad = held.findIndex((n) => !trained.has(n));
    if (bad >= 0)
      throw new ConfigError(
        `task names: held-out task ${bad + 1} is named "${held[bad]}", which no training task is (names: ${[...trained].join(', ')}); every held-out name must be trained on`,
      );
    const missing = [...trained].filter((n) => !held.includes(n));
    if (missing.length > 0)
      throw new ConfigError(
        `task names: no held-out task is named ${missing.map((n) => `"${n}"`).join(', ')}: give every training name held-out tasks, or no evalTasks (evaluate on the training tasks)`,
      );
  }
  const names = [...train, ...held];
  return names.every((n) => n === AGENT_TASK) ? undefined : names;
}

/** A run's config for an agent's tasks: `cfg` with env.name `agent` over them (the tiny model's corpus: the tasks' texts unless given). */
export function agentConfig<Task>(cfg: Config, o: AgentTasks<Task>): Config {
  const { tasks, evalTasks = [] } = o;
  if (!Array.isArray(tasks) || tasks.length === 0) throw new ConfigError('trainAgent: give at least one task (tasks: [...])');
  if (cfg.env.name !== 'builtin' && cfg.env.name !== AGENT_ENV)
    throw new ConfigError(
      `trainAgent: env.name is "${cfg.env.name}", but an agent's episodes are played through the gateway (leave env.name out)`,
    );
  const corpus = o.corpus ?? [...tasks, ...evalTasks].map(text);
  const names = taskNames(o);
  const options: AgentTaskCounts = {
    train_tasks: tasks.length,
    eval_tasks: evalTasks.length,
    corpus,
    ...(names ? { task_names: names } : {}),
  };
  return { ...cfg, env: { ...cfg.env, name: AGENT_ENV, tasks: null, options: { ...options } } };
}
