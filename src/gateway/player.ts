/**
 * Episodes played by a user's agent through the gateway, as a RolloutPlayer (../trainer/rollout.ts): the
 * trainer draws the jobs and modes as for the built-in rollout, each job becomes an episode with its
 * own base URL and key, the agent plays it and returns (or POSTs) its reward, and the episodes come
 * back as the same records the built-in rollout makes, so the update, the memory and the logs are the
 * built-in ones.
 *
 * Faults end the episode, never the run: an agent that throws, runs past `timeoutMs` of its own time
 * (the time its calls wait inside the gateway, for the batch and the model, is not counted: ./agent-clock.ts), makes no call,
 * reports no reward or goes over a budget gives a failed episode with its reason (the trainer logs it
 * and leaves it out of the update). Its waiting calls are answered with an error, its signal is
 * aborted (a process agent is killed: ./agent-process.ts), and the player returns only once none of
 * its requests is open.
 *
 * A stop of the run (Ctrl-C, the library's signal: the player's `signal`) ends every episode at once:
 * the gateway answers every call 503 from then on, the agents' signals are aborted, and the player
 * throws EvaluationInterrupted or RolloutsInterrupted (../run/interrupt.ts) instead of returning
 * episodes, so nothing of what was cut short is scored or trained on.
 */
import type { PolicyEngine } from '../policy/types.ts';
import { EvaluationInterrupted, RolloutsInterrupted } from '../run/interrupt.ts';
import type { Episode, RolloutJob, RolloutStats, ShownTip } from '../run/records.ts';
import type { RolloutMemory, RolloutPlayer, RolloutSettings } from '../trainer/rollout.ts';
import { LockstepBatch } from './batch.ts';
import { outcomeFailure } from './outcome.ts';
import { RequestError } from './protocol.ts';
import type { Gateway } from './server.ts';
import { EpisodeSession, type EpisodeBudget } from './session.ts';

/** What an agent is given for one episode. */
export interface AgentInput<Task = unknown> {
  /** The episode's own OpenAI-compatible base URL (`{gateway}/episodes/{id}/v1`). */
  baseURL: string;
  /** The episode's key: send it as the API key. */
  apiKey: string;
  /** The model name to send (any other is refused). */
  model: string;
  task: Task;
  /** Aborted when the episode is over for the trainer (timeout, the run stopping): stop then. */
  signal: AbortSignal;
  /** The episode's id, its rollout seed (for an environment that takes one) and its group of rollouts of the same task. */
  episode: { id: string; seed: number; group: number };
}

/**
 * How an episode went, as the agent says it: a number is the reward, in [0, 1] (1 is success); or an
 * object with `reward` or `score` (in [0, 100], as empo2's environments score), optionally the reward and
 * score after each call (`steps`, in score units, one per call) and the last thing the agent saw
 * (`finalObservation`, which the reflection reads). Nothing (undefined): the reward POSTed to the gateway.
 * A value out of range fails the episode (./outcome.ts).
 */
export type AgentOutcome =
  | number
  | void
  | undefined
  | {
      reward?: number;
      score?: number;
      steps?: readonly { reward: number; score: number }[];
      finalObservation?: string;
      /** The task in words, as the episode's records and the reflection show it (default: the task's text). */
      description?: string;
    };

export type AgentRunner<Task = unknown> = (input: AgentInput<Task>) => Promise<AgentOutcome>;

export interface AgentPlayerOptions<Task = unknown> {
  gateway: Gateway;
  /** Sets which engine the gateway samples with (the player is given it for each batch). */
  useEngine: (engine: PolicyEngine) => void;
  modelName: string;
  agent: AgentRunner<Task>;
  /** The task an agent plays for a job. */
  taskOf: (job: RolloutJob) => Task;
  /** Calls and response tokens an episode may use (calls default to the rollout's step limit), and its calls at once. */
  budget: { maxCalls: number; maxTokens: number; maxConcurrentCalls: number };
  /** The agent's own time an episode may take, its calls' time inside the gateway not counted (./agent-clock.ts). */
  timeoutMs: number;
  /** How long a lockstep batch waits for the episodes that have not called yet (./batch.ts). */
  batchWaitMs: number;
  /** Episodes played at once (null: the whole batch). */
  concurrency: number | null;
  /** env.reward: judge with mode replace: the judge gives the training reward, so an agent may report none (its score is then 0). */
  judged?: boolean;
  /** rollout.malformed_tool_call_reward: added to the reward of a step whose tool call did not parse (null: nothing). */
  malformedToolCallReward?: number | null;
  log: (line: string) => void;
}

export function agentPlayer<Task>(o: AgentPlayerOptions<Task>): RolloutPlayer {
  const play: RolloutPlayer = async (engine, jobs, p) => {
    const interrupted = () => (p.evaluation ? new EvaluationInterrupted() : new RolloutsInterrupted());
    if (p.signal?.aborted) throw interrupted();
    o.useEngine(engine);
    const size = o.concurrency ?? Math.max(1, jobs.length);
    const episodes: Episode[] = [];
    const stats: RolloutStats = {
      envSteps: 0,
      generatedTokens: 0,
      promptTokens: 0,
      policySeconds: 0,
      envSeconds: 0,
      memorySeconds: 0,
      prefilledTokens: 0,
    };
    const t0 = performance.now();
    for (let start = 0; start < jobs.length; start += size) {
      const chunk = {
        engine,
        jobs: jobs.slice(start, start + size),
        start,
        settings: p.settingsFor(start),
        memory: p.memory,
        progress: p.progress,
        signal: p.signal,
      };
      const part = await playChunk(o, chunk);
      if (p.signal?.aborted) throw interrupted();
      episodes.push(...part.episodes);
      stats.prefilledTokens += part.prefilledTokens;
    }
    for (const e of episodes) {
      stats.envSteps += e.steps.length;
      for (const st of e.steps) {
        stats.generatedTokens += st.response.length;
        stats.promptTokens += st.prompt.length;
      }
    }
    stats.policySeconds = (performance.now() - t0) / 1000;
    return { episodes, stats };
  };
  return Object.assign(play, { stopsAtOnce: true });
}

interface Chunk {
  engine: PolicyEngine;
  jobs: RolloutJob[];
  start: number;
  settings: RolloutSettings;
  memory?: RolloutMemory;
  progress?: Parameters<RolloutPlayer>[2]['progress'];
  signal?: AbortSignal;
}

async function playChunk<Task>(o: AgentPlayerOptions<Task>, c: Chunk): Promise<{ episodes: Episode[]; prefilledTokens: number }> {
  const { settings: s } = c;
  const members: EpisodeSession[] = [];
  const batch = new LockstepBatch(
    c.signal ? stoppable(c.engine, c.signal) : c.engine,
    { temperature: s.temperature, topP: s.topP, seed: s.seed, reusePrefix: s.reusePrefix !== false },
    members,
    o.batchWaitMs,
  );
  const budget: EpisodeBudget = {
    maxCalls: s.maxSteps ?? o.budget.maxCalls,
    maxTokens: o.budget.maxTokens,
    maxTokensPerCall: s.maxTokens,
    maxConcurrentCalls: o.budget.maxConcurrentCalls,
  };
  members.push(
    ...c.jobs.map(
      (job, k) =>
        new EpisodeSession(k, job, {
          usesMemory: c.memory?.uses(c.start + k) ?? false,
          budget,
          batch,
          task: o.taskOf(job),
          keptValidActions: s.keptValidActions ?? 0,
          onCall: () => c.progress?.stepped([c.start + k]),
        }),
    ),
  );
  const tips = c.memory ? tipsFor(c.memory, c.start) : null;
  const stop = () => {
    const reason = stopReason(c.signal!);
    o.gateway.stop(reason);
    for (const session of members) {
      batch.cancel(session, new RequestError(503, reason, null, 'server_error'));
      session.end(reason, 503); // its agent's signal is aborted now (playEpisode)
    }
  };
  if (c.signal?.aborted) stop();
  else c.signal?.addEventListener('abort', stop, { once: true });
  try {
    const episodes = await Promise.all(
      members.map(async (session) => {
        c.progress?.started(c.start + session.index, budget.maxCalls);
        o.gateway.add(session, tips);
        const episode = await playEpisode(o, session, s.seed);
        c.progress?.ended(c.start + session.index, episode.score);
        return episode;
      }),
    );
    return { episodes, prefilledTokens: batch.prefilledTokens };
  } finally {
    c.signal?.removeEventListener('abort', stop);
    for (const session of members) session.end('the batch ended');
    await drained(members);
    batch.close(new Error('the batch ended'));
    for (const session of members) o.gateway.remove(session);
  }
}

/** What every call is answered with once the run is stopping. */
function stopReason(signal: AbortSignal): string {
  const why = signal.reason instanceof Error ? signal.reason.message : 'the run is stopping';
  return `${why}: the episode is over and nothing of it is kept; stop now`;
}

/**
 * `engine` whose calls, once the run is stopping, fail with the 503 every call then gets: a call the
 * run's Ctrl-C handling ends (EvaluationInterrupted) would otherwise be answered 500.
 */
function stoppable(engine: PolicyEngine, signal: AbortSignal): PolicyEngine {
  const refuse = () => new RequestError(503, stopReason(signal), null, 'server_error');
  const generate: PolicyEngine['generate'] = async (prompts, opts) => {
    if (signal.aborted) throw refuse();
    try {
      return await engine.generate(prompts, opts);
    } catch (e) {
      throw signal.aborted ? refuse() : e;
    }
  };
  return new Proxy(engine, {
    get: (target, key) => {
      if (key === 'generate') return generate;
      const v: unknown = Reflect.get(target, key);
      return typeof v === 'function' ? v.bind(target) : v;
    },
  });
}

/** The memory's tips for a memory rollout's state, asked as the built-in rollout asks (one query per call). */
function tipsFor(memory: RolloutMemory, start: number) {
  return async (session: EpisodeSession, state: string, validActions: readonly string[]): Promise<ShownTip[]> => {
    const [tips] = await memory.tips([
      {
        episode: start + session.index,
        job: session.job,
        state,
        taken: session.calls.map((call) => call.action),
        scoreSoFar: 0,
        validActions,
        oracleAction: () => {
          throw new Error(
            'experimental.tip_source: oracle needs the built-in environment; an agent played through the gateway has no solver',
          );
        },
      },
    ]);
    return tips ?? [];
  };
}

/** Waits until no request of these episodes is open (each ended episode's calls are answered as soon as the engine's current step returns). */
async function drained(sessions: readonly EpisodeSession[]): Promise<void> {
  while (sessions.some((s) => s.openRequests > 0)) await new Promise((r) => setTimeout(r, 5));
}

class EpisodeFailure extends Error {}

async function playEpisode<Task>(o: AgentPlayerOptions<Task>, session: EpisodeSession, seed: number): Promise<Episode> {
  const control = new AbortController();
  let cancelTimeout = () => {};
  const timedOut = new Promise<never>((_, reject) => {
    cancelTimeout = session.clock.deadline(o.timeoutMs, () => reject(new EpisodeFailure(timeoutReason(o.timeoutMs))));
  });
  const endedByGateway = new Promise<never>((_, reject) =>
    session.onEnd(() => reject(new EpisodeFailure(session.failure ?? 'the episode ended'))),
  );
  let outcome: AgentOutcome = undefined;
  let failure: string | null = null;
  try {
    const input: AgentInput<Task> = {
      baseURL: o.gateway.baseURL(session),
      apiKey: session.key,
      model: o.modelName,
      task: session.o.task as Task,
      signal: control.signal,
      episode: { id: session.id, seed, group: session.job.group },
    };
    outcome = await Promise.race([Promise.resolve().then(() => o.agent(input)), timedOut, endedByGateway]);
  } catch (e) {
    failure = e instanceof EpisodeFailure ? e.message : `the agent threw: ${e instanceof Error ? e.message : String(e)}`;
  } finally {
    cancelTimeout();
    control.abort(new Error(failure ?? 'the episode is over'));
    timedOut.catch(() => {});
    endedByGateway.catch(() => {});
  }
  const failed = failure ?? session.failure;
  session.end(failed);
  return episodeOf(session, failed === null ? outcome : undefined, failed, {
    judged: o.judged ?? false,
    malformedToolCallReward: o.malformedToolCallReward ?? null,
  });
}

/** Why an episode whose agent's own time ran out failed (./agent-clock.ts: what the timeout measures). */
export function timeoutReason(timeoutMs: number): string {
  return `no reward within ${timeoutMs / 1000} s of the agent's own time (time its calls waited in the gateway for the model not counted)`;
}

/**
 * The episode's record: the calls as steps, the reward on them. A failed one has outcome 'failed' and its
 * reason, so the update leaves it out and the scores count it apart (as an environment failure is). With
 * `malformedToolCallReward`, a step whose tool call did not parse gets it added to its reward: a failed
 * format, as verl-agent's invalid-action penalty scores an action outside the format.
 */
export function episodeOf(
  session: EpisodeSession,
  outcome: AgentOutcome,
  failure: string | null,
  o: { judged?: boolean; malformedToolCallReward?: number | null } = {},
): Episode {
  const judged = o.judged ?? false;
  const calls = session.calls;
  const base = { ...session.job, description: describe(session.o.task), episodeId: session.id };
  const fail = (why: string): Episode => ({
    ...base,
    steps: calls.map((c) => ({ ...c, reward: 0, score: 0 })),
    finalObservation: calls.at(-1)?.observation ?? '',
    score: 0,
    success: false,
    outcome: 'failed',
    failure: why,
  });
  if (failure !== null) return fail(failure);
  if (calls.length === 0) return fail('the agent made no call to the gateway');
  const r = typeof outcome === 'number' ? { reward: outcome } : (outcome ?? reported(session) ?? (judged ? { score: 0 } : null));
  if (!r) return fail('the agent never reported a reward (return it, print "reward: <number>" last, or POST it to {baseURL}/empo2/reward)');
  const bad = outcomeFailure(r, outcome === undefined || outcome === null);
  if (bad !== null) return fail(bad);
  const score = r.score ?? r.reward! * 100;
  if (r.steps && r.steps.length !== calls.length)
    return fail(`the agent reported ${r.steps.length} step rewards for ${calls.length} calls`);
  const steps = calls.map((c, t) => {
    const given = r.steps?.[t];
    const last = t === calls.length - 1;
    const format = c.call?.malformedToolCall !== undefined ? (o.malformedToolCallReward ?? 0) : 0;
    return { ...c, reward: (given ? given.reward : last ? score : 0) + format, score: given ? given.score : last ? score : 0 };
  });
  const description = r.description ?? base.description;
  const finalObservation = r.finalObservation ?? calls.at(-1)!.observation;
  return { ...base, description, steps, finalObservation, score, success: score >= 100, outcome: score >= 100 ? 'success' : 'ended' };
}

function reported(session: EpisodeSession): Exclude<AgentOutcome, number | void | undefined> | null {
  const rep = session.report;
  if (!rep) return null;
  return { reward: rep.reward, score: rep.score, steps: rep.steps, finalObservation: rep.final_observation, description: rep.description };
}

/** A task as the episode records describe it. */
function describe(task: unknown): string {
  if (typeof task === 'string') return task;
  if (typeof task === 'object' && task !== null) {
    const t = task as { description?: unknown; prompt?: unknown; question?: unknown };
    for (const v of [t.description, t.prompt, t.question]) if (typeof v === 'string') return v;
  }
  return JSON.stringify(task) ?? String(task);
}
