/**
 * `env.options` of `env.name: http`, checked once: where the server is, how it speaks (a preset
 * for each AgentGym server, every field overridable), and what the trainer needs that AgentGym
 * servers do not say (task names, which data indices make up each split, step limits).
 *
 * Protocol facts below follow WooooDyy/AgentGym at commit 3ef9235d23e68e7c2920c5422ad957dc8ced5c6c
 * (agentenv/agentenv/envs/*.py for the clients, agentenv-<name>/agentenv_<name>/server.py and
 * environment.py / env_wrapper.py for the servers).
 */
import { z } from 'zod';
import type { Split } from '../types.ts';

/** Where the valid actions of a state come from. */
export type ActionSource = 'response' | 'endpoint' | 'observation' | 'none';

/** How one server family shapes its requests and answers. */
export interface Protocol {
  /** Key of the instance id in bodies and query strings: "id" (most servers), "env_idx" (WebShop). */
  idField: string;
  /** Key of the data index in the reset body: "data_idx", "session_id" (WebShop), "game" (ALFWorld). */
  indexField: string;
  /** Key that carries the task name in the reset body, for servers with several tasks (null: not sent). */
  taskField: string | null;
  /** JSON body of POST /create. */
  createBody: Record<string, unknown>;
  /** Extra fields of every reset body, e.g. ALFWorld's {"world_type": "Text"}. */
  resetBody: Record<string, unknown>;
  /** The server has POST /close (WebShop and ALFWorld at that commit do not). */
  closeEndpoint: boolean;
  actionsFrom: ActionSource;
  /** Multiplies the server's score (or summed reward) to the 0-100 scale: 100 for 0-1 rewards. */
  scoreScale: number;
  /**
   * true: one server instance per env, reset for each episode and closed on failure and shutdown
   * (what AgentGym's clients do; needed where create is expensive or close is missing).
   * false: a fresh instance per episode, closed as soon as the episode ends.
   */
  reuseInstance: boolean;
}

const GENERIC: Protocol = {
  idField: 'id',
  indexField: 'data_idx',
  taskField: null,
  createBody: {},
  resetBody: {},
  closeEndpoint: true,
  actionsFrom: 'response',
  scoreScale: 100,
  reuseInstance: false,
};

/**
 * - agentgym: the common shape (SciWorld, BabyAI, TextCraft, ...) with a 0-1 reward, per-episode
 *   instances; also the shape of examples/http-env/server.py.
 * - sciworld: score already 0-100; create starts a JVM, so the instance is reused.
 * - babyai: the valid actions are printed at the end of the observation ("Available actions: [...]").
 * - textcraft: the common shape as it is (reward 1 when the goal item is crafted; no action list).
 * - alfworld: reset by "game" with world_type Text; actions in every answer; no /close.
 * - webshop: "env_idx" and "session_id", create answers a bare number, step answers "state",
 *   actions from GET /available_actions ({has_search_bar, clickables}); no /close.
 */
export const PRESETS = {
  agentgym: GENERIC,
  sciworld: { ...GENERIC, scoreScale: 1, reuseInstance: true },
  babyai: { ...GENERIC, actionsFrom: 'observation' },
  textcraft: GENERIC,
  alfworld: { ...GENERIC, indexField: 'game', resetBody: { world_type: 'Text' }, closeEndpoint: false, reuseInstance: true },
  webshop: { ...GENERIC, idField: 'env_idx', indexField: 'session_id', closeEndpoint: false, reuseInstance: true, actionsFrom: 'endpoint' },
} satisfies Record<string, Protocol>;

export type PresetName = keyof typeof PRESETS;

/**
 * Data indices: a list of integers, or a string of inclusive ranges and single indices such as
 * "0-399" or "0-9,20,30-39".
 */
const IndexSpec = z.union([z.array(z.number().int().nonnegative()).min(1), z.string().min(1)], {
  error: 'expected data indices: a non-empty list of non-negative integers, or a string of ranges such as "0-399" or "0-9,20-29"',
});

const SplitRanges = z.object({ train: IndexSpec, dev: IndexSpec.optional(), test: IndexSpec.optional() }).strict();

const TaskSpec = z
  .object({ train: IndexSpec, dev: IndexSpec.optional(), test: IndexSpec.optional(), max_steps: z.number().int().positive().optional() })
  .strict();

const positiveMs = z.number().int().positive();

export const HttpEnvOptionsSchema = z
  .object({
    base_url: z.string().url(),
    preset: z.enum(Object.keys(PRESETS) as [PresetName, ...PresetName[]]).default('agentgym'),
    /** Task names with shared `variations`, or each task with its own ranges and step limit. */
    tasks: z.union([z.array(z.string().min(1)).min(1), z.record(z.string().min(1), TaskSpec)], {
      error: (issue) =>
        issue.input === undefined
          ? 'required: the task names, as a list (with env.options.variations giving the data indices of each split) or as a mapping from name to {train, dev, test, max_steps}'
          : 'expected a non-empty list of task names, or a mapping from task name to {train: indices, dev?: indices, test?: indices, max_steps?: n}',
    }),
    variations: SplitRanges.optional(),
    max_steps: z.number().int().positive().optional(),
    timeout_ms: positiveMs.default(60_000),
    create_timeout_ms: positiveMs.default(120_000),
    close_timeout_ms: positiveMs.default(5_000),
    retries: z.number().int().nonnegative().default(3),
    retry_backoff_ms: z.number().int().nonnegative().default(500),
    reset_attempts: z.number().int().positive().default(2),
    max_consecutive_failures: z.number().int().positive().default(20),
    max_response_bytes: z
      .number()
      .int()
      .positive()
      .default(16 * 2 ** 20),
    corpus_episodes: z.number().int().nonnegative().default(4),
    id_field: z.string().min(1).optional(),
    index_field: z.string().min(1).optional(),
    task_field: z.string().min(1).nullable().optional(),
    create_body: z.record(z.string(), z.unknown()).optional(),
    reset_body: z.record(z.string(), z.unknown()).optional(),
    close_endpoint: z.boolean().optional(),
    actions_from: z.enum(['response', 'endpoint', 'observation', 'none']).optional(),
    score_scale: z.number().positive().optional(),
    reuse_instance: z.boolean().optional(),
  })
  .strict();

export interface TaskPlan {
  splits: Partial<Record<Split, number[]>>;
  maxSteps: number;
}

export interface HttpEnvConfig {
  baseUrl: string;
  preset: PresetName;
  protocol: Protocol;
  tasks: Map<string, TaskPlan>;
  timeoutMs: number;
  createTimeoutMs: number;
  closeTimeoutMs: number;
  retries: number;
  retryBackoffMs: number;
  resetAttempts: number;
  maxConsecutiveFailures: number;
  maxResponseBytes: number;
  corpusEpisodes: number;
}

/** What the trainer's own env settings add: env.tasks (a subset) and env.max_steps (one limit for all). */
export interface EnvOverrides {
  tasks?: string[] | null;
  maxSteps?: number | null;
}

const MAX_INDICES_PER_SPLIT = 1_000_000;

/** "0-9,20,30-39" → [0..9, 20, 30..39]; `where` names the option in errors. */
export function parseIndices(spec: number[] | string, where: string): number[] {
  if (Array.isArray(spec)) return [...spec];
  const out: number[] = [];
  for (const raw of spec.split(',')) {
    const part = raw.trim();
    const m = /^(\d+)(?:\s*-\s*(\d+))?$/.exec(part);
    if (!m) throw new Error(`${where}: "${part}" is not an index or a range such as "0-399" (in "${spec}")`);
    const lo = Number(m[1]);
    const hi = m[2] === undefined ? lo : Number(m[2]);
    if (hi < lo) throw new Error(`${where}: range "${part}" ends before it starts`);
    if (out.length + (hi - lo + 1) > MAX_INDICES_PER_SPLIT)
      throw new Error(`${where}: more than ${MAX_INDICES_PER_SPLIT} indices in "${spec}"`);
    for (let i = lo; i <= hi; i++) out.push(i);
  }
  return out;
}

export function parseHttpEnvOptions(raw: unknown, overrides: EnvOverrides = {}): HttpEnvConfig {
  const parsed = HttpEnvOptionsSchema.safeParse(raw ?? {});
  if (!parsed.success) {
    const problems = parsed.error.issues.map((i) => {
      const at = ['env.options', ...i.path.map(String)].join('.');
      if (i.code === 'unrecognized_keys') return `${at}: unknown option(s) ${i.keys.join(', ')}`;
      return `${at}: ${i.message}`;
    });
    throw new Error(`invalid options for env.name http:\n  - ${problems.join('\n  - ')}`);
  }
  const o = parsed.data;
  const url = new URL(o.base_url);
  if (url.protocol !== 'http:' && url.protocol !== 'https:')
    throw new Error(`env.options.base_url must be an http:// or https:// URL, got "${o.base_url}"`);
  if (url.search || url.hash) throw new Error(`env.options.base_url must not have a query or fragment, got "${o.base_url}"`);

  const preset = PRESETS[o.preset];
  const protocol: Protocol = {
    idField: o.id_field ?? preset.idField,
    indexField: o.index_field ?? preset.indexField,
    taskField: o.task_field === undefined ? preset.taskField : o.task_field,
    createBody: o.create_body ?? preset.createBody,
    resetBody: o.reset_body ?? preset.resetBody,
    closeEndpoint: o.close_endpoint ?? preset.closeEndpoint,
    actionsFrom: o.actions_from ?? preset.actionsFrom,
    scoreScale: o.score_scale ?? preset.scoreScale,
    reuseInstance: o.reuse_instance ?? preset.reuseInstance,
  };
  if (!protocol.closeEndpoint && !protocol.reuseInstance) {
    throw new Error(
      'env.options: close_endpoint is false (the server cannot close instances) but reuse_instance is false, so every episode would leave an instance open on the server; set reuse_instance: true',
    );
  }
  for (const key of [protocol.idField, protocol.indexField, protocol.taskField]) {
    if (key !== null && key in protocol.resetBody) throw new Error(`env.options.reset_body must not set "${key}": the client fills it in`);
  }

  const tasks = new Map<string, TaskPlan>();
  const limitFor = (task: string, own: number | undefined): number => {
    const limit = overrides.maxSteps ?? own ?? o.max_steps;
    if (limit === undefined || limit === null) {
      throw new Error(
        `env.options.max_steps (or env.options.tasks.${task}.max_steps, or env.max_steps) must be set: an AgentGym server does not say when an episode is cut off`,
      );
    }
    return limit;
  };
  const plan = (task: string, ranges: z.infer<typeof SplitRanges>, where: string, ownLimit: number | undefined): TaskPlan => {
    const splits: Partial<Record<Split, number[]>> = {};
    for (const split of ['train', 'dev', 'test'] as const) {
      const spec = ranges[split];
      if (spec !== undefined) splits[split] = parseIndices(spec, `${where}.${split}`);
    }
    checkDisjoint(splits, where);
    return { splits, maxSteps: limitFor(task, ownLimit) };
  };
  if (Array.isArray(o.tasks)) {
    if (!o.variations)
      throw new Error(
        'env.options.variations must give the data indices of each split (e.g. {train: "0-399", test: "400-499"}) when env.options.tasks is a list of names',
      );
    for (const task of o.tasks) {
      if (tasks.has(task)) throw new Error(`env.options.tasks names "${task}" twice`);
      tasks.set(task, plan(task, o.variations, 'env.options.variations', undefined));
    }
  } else {
    if (o.variations)
      throw new Error(
        'env.options.variations is only read when env.options.tasks is a list; with a mapping, give each task its own train/dev/test',
      );
    for (const [task, spec] of Object.entries(o.tasks)) tasks.set(task, plan(task, spec, `env.options.tasks.${task}`, spec.max_steps));
    if (tasks.size === 0) throw new Error('env.options.tasks must name at least one task');
  }
  if (overrides.tasks) {
    for (const task of overrides.tasks) {
      if (!tasks.has(task))
        throw new Error(`env.tasks names "${task}", which env.options.tasks does not define (defined: ${[...tasks.keys()].join(', ')})`);
    }
    for (const task of [...tasks.keys()]) if (!overrides.tasks.includes(task)) tasks.delete(task);
  }

  return {
    baseUrl: o.base_url.replace(/\/+$/, ''),
    preset: o.preset,
    protocol,
    tasks,
    timeoutMs: o.timeout_ms,
    createTimeoutMs: o.create_timeout_ms,
    closeTimeoutMs: o.close_timeout_ms,
    retries: o.retries,
    retryBackoffMs: o.retry_backoff_ms,
    resetAttempts: o.reset_attempts,
    maxConsecutiveFailures: o.max_consecutive_failures,
    maxResponseBytes: o.max_response_bytes,
    corpusEpisodes: o.corpus_episodes,
  };
}

function checkDisjoint(splits: Partial<Record<Split, number[]>>, where: string): void {
  const owner = new Map<number, Split>();
  for (const [split, indices] of Object.entries(splits) as [Split, number[]][]) {
    for (const i of indices) {
      const other = owner.get(i);
      if (other === split) throw new Error(`${where}.${split}: data index ${i} is listed twice`);
      if (other) throw new Error(`${where}: data index ${i} is in both ${other} and ${split}; splits must be disjoint`);
      owner.set(i, split);
    }
  }
}
