/**
 * Rollouts: many episodes stepped in lockstep, so that every policy call samples one action for
 * every live episode at once (one batched forward pass instead of one per episode).
 */
import type { Config } from '../config/schema.ts';
import type { Env, StepResult } from '../envs/types.ts';
import { envFailure, SUCCESS_SCORE } from '../envs/types.ts';
import type { GenerateOptions, Generation, PolicyEngine, TextTokenizer } from '../policy/types.ts';
import type { ProgressSink } from '../run/progress.ts';
import type { Episode, EpisodeOutcome, RolloutJob, RolloutStats, ShownTip, StepRecord } from '../run/records.ts';
import type { RescoredStep } from '../trajectory/format.ts';
import { turnEventLoop } from '../util/event-loop.ts';
import { parseAction, startDialogue, type Dialogue, type EncodedPrompt, type PromptSettings, type Turn } from './prompt.ts';
import { promptSettings } from './prompt-style.ts';

/**
 * Tips for the current state of each episode that rolls out with memory; called once per step with
 * every such episode (batched, so the embedder sees one batch), with the actions it has taken so far.
 * Episodes without memory are not asked.
 */
export interface TipQuery {
  episode: number;
  job: RolloutJob;
  /** The current observation. */
  state: string;
  /** Actions the episode has taken so far. */
  taken: readonly string[];
  /** The score the episode has reached so far (0 before its first step). */
  scoreSoFar: number;
  /** Actions the environment accepts in the current state. */
  validActions: readonly string[];
  /** The environment's scripted next action, where it has a solver (`Env.oracleAction`). */
  oracleAction: () => string | null;
}

export type TipSource = (queries: TipQuery[]) => Promise<ShownTip[][]>;

export interface RolloutSettings {
  prompt: PromptSettings;
  temperature: number;
  topP: number;
  maxTokens: number;
  constrained: boolean;
  maxSteps: number | null;
  seed: number;
  /** Pass per-episode cache keys so the engine can reuse each episode's KV cache. */
  reusePrefix?: boolean;
  /**
   * Valid actions kept per step for trajectory records (ScienceWorld lists thousands, and every
   * step of a batch is held until the update); 0 or absent keeps none, only their count.
   */
  keptValidActions?: number;
  /** env.max_observation_bytes: a longer observation or task description ends its episode as failed, untokenised (absent: no limit). */
  maxObservationBytes?: number;
}

export function emptyStats(): RolloutStats {
  return { envSteps: 0, generatedTokens: 0, promptTokens: 0, policySeconds: 0, envSeconds: 0, memorySeconds: 0, prefilledTokens: 0 };
}

/** The environment's solver for `experimental.tip_source: oracle`, or an error naming the environment. */
export function oracleOf(env: Env): () => string | null {
  if (!env.oracleAction)
    throw new Error(`experimental.tip_source: oracle needs an environment with a scripted solver (the built-in one); ${env.name} has none`);
  return env.oracleAction.bind(env);
}

/** A valid action with a slot to fill in (WebShop's `search[<your query>]`) cannot be decoded from a list. */
const SLOT = /<[^<>]+>/;

/** What constrained decoding may produce in a state: its valid actions, or free text where one has a slot. */
export function constrainedTo(valid: readonly string[]): readonly string[] | null {
  return valid.some((a) => SLOT.test(a)) ? null : valid;
}

/** What an ActingEngine is told of one episode at a step, besides its prompt. */
export interface ActRow {
  prompt: number[];
  task: string;
  observation: string;
  /** Steps the episode has taken so far (0 for its first action). */
  stepsTaken: number;
  validActions: readonly string[];
}

/**
 * An engine that chooses each action from what the episode has seen, not only from the prompt's tokens
 * (Retrospex: the LLM's candidates rescored by a critic of the state). Rollouts ask it with `act`
 * instead of `generate`; `parse` turns a response into the action the environment is given.
 */
export interface ActingEngine extends PolicyEngine {
  act(
    rows: readonly ActRow[],
    opts: GenerateOptions,
    parse: (text: string, valid: readonly string[]) => string,
  ): Promise<(Generation & { rescored?: RescoredStep })[]>;
  /**
   * What of the engine's own state a later chunk's choices depend on (JSON), and its restoration: a
   * resumed evaluation restores what the stopped one saved after its last finished chunk, so its next
   * chunk starts where an uninterrupted run's would (Retrospex: the text vectors computed so far).
   */
  actingState?(): unknown;
  restoreActingState?(state: unknown): void;
}

export const isActing = (engine: PolicyEngine): engine is ActingEngine => typeof (engine as Partial<ActingEngine>).act === 'function';

/** Cache keys unique within the process, so engines never mix two episodes' KV caches. */
let nextEpisodeKey = 0;

/** Tips for the episodes that roll out with memory: `uses` says which (by position in the jobs), `tips` answers them. */
export interface RolloutMemory {
  tips: TipSource;
  uses: (episode: number) => boolean;
}

/** One episode while it runs. */
interface LiveEpisode {
  index: number;
  job: RolloutJob;
  env: Env;
  task: string;
  dialogue: Dialogue;
  cacheKey: string;
  turns: Turn[];
  valid: readonly string[];
  steps: StepRecord[];
  score: number;
  done: boolean;
  /** Why the engine stopped sampling it (Generation.error). */
  engineError?: string;
  limit: number;
  /** How it ended, once it has. */
  outcome: EpisodeOutcome | null;
  /** What failed, for a failed episode. */
  failure: string | null;
}

/** Plays one episode per job, each on its own environment, in lockstep; tips from `o.memory`, progress told to `o.progress`. */
export async function runEpisodes(
  envs: Env[],
  engine: PolicyEngine,
  jobs: RolloutJob[],
  o: { settings: RolloutSettings; memory?: RolloutMemory; progress?: ProgressSink },
): Promise<{ episodes: Episode[]; stats: RolloutStats }> {
  if (envs.length < jobs.length) throw new Error(`runEpisodes: ${jobs.length} jobs but only ${envs.length} environments`);
  const s = o.settings;
  const stats = emptyStats();
  const live = await Promise.all(jobs.map((job, i) => startEpisode(envs[i], job, i, { tokenizer: engine.tokenizer, s })));
  for (const e of live) {
    o.progress?.started(e.index, e.limit);
    if (e.done) o.progress?.ended(e.index, e.score);
  }
  try {
    for (let t = 0; live.some((e) => !e.done); t++) {
      const active = live.filter((e) => !e.done);
      const tips = o.memory ? await tipsFor(active, o.memory, stats) : active.map(() => []);
      await step(active, tips, { engine, s, t, stats, progress: o.progress });
    }
  } finally {
    engine.releaseCache?.(live.filter((e) => !e.done).map((e) => e.cacheKey));
  }
  const episodes = live.map((e) => ({
    ...e.job,
    description: e.task,
    steps: e.steps,
    finalObservation: e.turns[e.turns.length - 1].observation,
    score: e.score,
    success: e.score >= SUCCESS_SCORE,
    ...(e.engineError ? { engineError: e.engineError } : {}),
    outcome: e.outcome ?? 'step_limit',
    ...(e.failure !== null ? { failure: e.failure } : {}),
  }));
  return { episodes, stats };
}

/** The episode of `job` (the `index`th of the batch) reset on `env`, its dialogue opened. */
async function startEpisode(
  env: Env,
  job: RolloutJob,
  index: number,
  c: { tokenizer: TextTokenizer; s: RolloutSettings },
): Promise<LiveEpisode> {
  const { tokenizer, s } = c;
  const first = await env.reset(job.task, job.variation, s.seed);
  // An environment that failed, or sent more than the policy may read, ends the episode before its first prompt.
  const task = shown(first.task, 'task description', s.maxObservationBytes);
  const observation = shown(first.observation, 'observation', s.maxObservationBytes);
  const failure = envFailure(first.info) ?? task.over ?? observation.over;
  return {
    index,
    job,
    env,
    task: task.text,
    dialogue: startDialogue(tokenizer, s.prompt, {
      task: task.text,
      observation: observation.text,
      validActions: first.validActions,
      reflections: job.reflections,
    }),
    cacheKey: `episode-${nextEpisodeKey++}`,
    turns: [{ observation: observation.text }],
    valid: first.validActions,
    steps: [],
    score: 0,
    done: failure !== null,
    limit: s.maxSteps ?? env.maxSteps(job.task),
    outcome: failure !== null ? 'failed' : null,
    failure,
  };
}

/** How much of an observation or task description is kept in records before it ends an episode for its length. */
const KEPT_OF_OVERSIZED = 1_000;

/**
 * `text` as the policy may see it: whole, or, over `limit` bytes, cut to its start with a note and the
 * reason its episode ends (`over`), so that it is never tokenised nor held whole.
 */
export function shown(text: string, what: string, limit: number | undefined): { text: string; over: string | null } {
  // A string of n UTF-16 units holds at most 3n bytes of UTF-8: most texts pass without being counted.
  if (limit === undefined || text.length * 3 <= limit) return { text, over: null };
  const bytes = Buffer.byteLength(text, 'utf8');
  if (bytes <= limit) return { text, over: null };
  const over = `the ${what} of ${bytes} bytes is over env.max_observation_bytes (${limit})`;
  return { text: `${text.slice(0, KEPT_OF_OVERSIZED)}… [cut: ${over}]`, over };
}

/** The tips each active episode is shown this step (none for those that do not use the memory), timed into `stats`. */
async function tipsFor(active: readonly LiveEpisode[], memory: RolloutMemory, stats: RolloutStats): Promise<ShownTip[][]> {
  const tm = performance.now();
  const asking = active.filter((e) => memory.uses(e.index));
  const answers = asking.length
    ? await memory.tips(
        asking.map((e) => ({
          episode: e.index,
          job: e.job,
          state: e.turns[e.turns.length - 1].observation,
          taken: e.steps.map((st) => st.action),
          scoreSoFar: e.steps.at(-1)?.score ?? 0,
          validActions: e.valid,
          oracleAction: () => oracleOf(e.env)(),
        })),
      )
    : [];
  const byEpisode = new Map(asking.map((e, k) => [e.index, answers[k] ?? []]));
  const tips = active.map((e) => byEpisode.get(e.index) ?? []);
  stats.memorySeconds += (performance.now() - tm) / 1000;
  return tips;
}

/** Step `t` of every active episode: one batched generation, one action each, the environments stepped and the steps recorded. */
async function step(
  active: readonly LiveEpisode[],
  tips: readonly ShownTip[][],
  c: { engine: PolicyEngine; s: RolloutSettings; t: number; stats: RolloutStats; progress?: ProgressSink },
): Promise<void> {
  const { engine, s, stats } = c;
  // Plain prompts are the tiny model's: its actions are its whole answer, as it was trained.
  const actionOf = (text: string, valid: readonly string[]) => (s.prompt.template ? parseAction(text, valid) : text.trim());
  const all = await encodePrompts(active, tips);
  // A prompt the model cannot read ends its episode, rather than the run.
  const playing = withinContext(active, all, { engine, s, progress: c.progress });
  if (playing.length === 0) return;
  const episodes = playing.map((i) => active[i]);
  const encoded = playing.map((i) => all[i]);
  const prompts = encoded.map((x) => x.ids);
  const t0 = performance.now();
  const before = engine.prefillCounts?.().prefilledTokens ?? 0;
  const gens = await sample(episodes, prompts, { engine, s, t: c.t, actionOf });
  const t1 = performance.now();
  stats.prefilledTokens += (engine.prefillCounts?.().prefilledTokens ?? 0) - before;
  const actions = gens.map((g, i) => (g.error ? '' : actionOf(g.text, episodes[i].valid)));
  // A row the engine could not sample (its rollout server died, none was left) ends its episode where it is.
  const results = await Promise.all(episodes.map((e, i) => (gens[i].error ? null : e.env.step(actions[i]))));
  stats.policySeconds += (t1 - t0) / 1000;
  stats.envSeconds += (performance.now() - t1) / 1000;
  const keptValid = s.keptValidActions ?? 0;
  const ended: string[] = [];
  episodes.forEach((e, i) => {
    const g = gens[i];
    const r = results[i];
    const action = actions[i];
    if (!r) {
      e.engineError = g.error;
      end(e, { outcome: 'failed', failure: `the rollout engine could not sample it: ${g.error}` });
      ended.push(e.cacheKey);
      c.progress?.ended(e.index, e.score);
      return;
    }
    const observation = shown(r.observation, 'observation', s.maxObservationBytes);
    e.steps.push({
      observation: e.turns[e.turns.length - 1].observation,
      tips: tips[playing[i]],
      validActions: keptValid > 0 ? e.valid.slice(0, keptValid) : [],
      validActionCount: e.valid.length,
      prompt: prompts[i],
      tipSpan: encoded[i].tipSpan,
      response: g.tokens,
      logprobs: g.logprobs,
      action,
      reward: r.reward,
      score: r.score,
      ...(g.rescored ? { rescored: g.rescored } : {}),
    });
    e.dialogue.advance(g, action, observation.text, r.validActions);
    e.turns[e.turns.length - 1].action = action;
    e.turns.push({ observation: observation.text });
    e.valid = r.validActions;
    e.score = r.score;
    stats.envSteps++;
    stats.generatedTokens += g.tokens.length;
    stats.promptTokens += prompts[i].length;
    const failure = envFailure(r.info) ?? observation.over;
    if (r.done || failure !== null || e.steps.length >= e.limit) {
      end(e, { outcome: outcomeOf(r, failure), failure });
      ended.push(e.cacheKey);
      c.progress?.ended(e.index, e.score);
    }
  });
  if (ended.length) engine.releaseCache?.(ended);
  c.progress?.stepped(episodes.map((e) => e.index));
}

/** One batched generation for the playing episodes (through an acting engine's choice among candidates where there is one). */
async function sample(
  episodes: readonly LiveEpisode[],
  prompts: number[][],
  c: { engine: PolicyEngine; s: RolloutSettings; t: number; actionOf: (text: string, valid: readonly string[]) => string },
): Promise<(Generation & { rescored?: RescoredStep })[]> {
  const { engine, s } = c;
  const options: GenerateOptions = {
    temperature: s.temperature,
    topP: s.topP,
    maxTokens: s.maxTokens,
    seed: s.seed * 100_003 + c.t,
    allowedTexts: s.constrained ? episodes.map((e) => constrainedTo(e.valid)) : undefined,
    cacheKeys: s.reusePrefix === false ? undefined : episodes.map((e) => e.cacheKey),
  };
  return isActing(engine)
    ? await engine.act(
        episodes.map((e, i) => actRow(e, prompts[i])),
        options,
        c.actionOf,
      )
    : await engine.generate(prompts, options);
}

/**
 * The prompt of every active episode, with the event loop turned between episodes: prompts of long
 * observations take a while to tokenise, and a signal (SIGTERM, Ctrl-C) must not wait for all of them.
 */
async function encodePrompts(active: readonly LiveEpisode[], tips: readonly ShownTip[][]): Promise<EncodedPrompt[]> {
  const encoded: EncodedPrompt[] = [];
  for (const [i, e] of active.entries()) {
    if (i > 0) await turnEventLoop();
    encoded.push(e.dialogue.prompt(tips[i].map((tip) => tip.text)));
  }
  return encoded;
}

/**
 * Positions in `active` of the episodes whose prompt, with the tokens it may generate, fits the model's
 * context; the others end here as failed (their prompts are not sent).
 */
function withinContext(
  active: readonly LiveEpisode[],
  encoded: readonly EncodedPrompt[],
  c: { engine: PolicyEngine; s: RolloutSettings; progress?: ProgressSink },
): number[] {
  const context = c.engine.contextLength;
  const playing: number[] = [];
  const cut: string[] = [];
  active.forEach((e, i) => {
    const tokens = encoded[i].ids.length;
    if (context === undefined || tokens + c.s.maxTokens <= context) return void playing.push(i);
    const failure = `its prompt of ${tokens} tokens, with up to ${c.s.maxTokens} to generate (rollout.max_tokens), is longer than the model's context of ${context} tokens`;
    end(e, { outcome: 'failed', failure });
    cut.push(e.cacheKey);
    c.progress?.ended(e.index, e.score);
  });
  if (cut.length) c.engine.releaseCache?.(cut);
  return playing;
}

function end(e: LiveEpisode, how: { outcome: EpisodeOutcome; failure: string | null }): void {
  e.done = true;
  e.outcome = how.outcome;
  e.failure = how.failure;
}

/** How a step that ended its episode ended it. */
function outcomeOf(r: StepResult, failure: string | null): EpisodeOutcome {
  if (failure !== null) return 'failed';
  if (!r.done || r.info?.truncated === true) return 'step_limit';
  return r.score >= SUCCESS_SCORE ? 'success' : 'ended';
}

/** What an ActingEngine sees of `e` at this step. */
function actRow(e: LiveEpisode, prompt: number[]): ActRow {
  return { prompt, task: e.task, observation: e.turns[e.turns.length - 1].observation, stepsTaken: e.steps.length, validActions: e.valid };
}

/**
 * Runs more episodes than there are environments: consecutive chunks of `envs.length` jobs, each a
 * lockstep batch of its own sampled with `settingsFor(start)` (start = the chunk's first job).
 * Episode indices given to the memory and the order of the returned episodes are positions in
 * `jobs`, so callers' per-episode choices do not depend on the chunking. Bounding live environments
 * matters for simulators that are processes (ScienceWorld: one JVM each).
 *
 * A chunk depends on nothing an earlier chunk did (its sampling seeds come from its start, the caches
 * of its episodes are released as they end), so a resumed evaluation plays from `from` (a chunk start)
 * and gets the chunks an uninterrupted one would: `chunkPlayed` hears each as it ends.
 */
export async function runEpisodesInChunks(
  envs: Env[],
  engine: PolicyEngine,
  jobs: RolloutJob[],
  o: ChunkedRolloutOptions,
): Promise<PlayedChunk> {
  if (envs.length === 0) throw new Error('runEpisodesInChunks: no environments');
  const { memory, progress, from = 0 } = o;
  if (from % envs.length !== 0 || from < 0 || from > jobs.length)
    throw new Error(`runEpisodesInChunks: from = ${from} is not the start of a chunk of ${envs.length} among ${jobs.length} jobs`);
  const episodes: Episode[] = [];
  const stats = emptyStats();
  for (let start = from; start < jobs.length; start += envs.length) {
    const chunk = jobs.slice(start, start + envs.length);
    const shifted = memory && {
      tips: (queries: Parameters<TipSource>[0]) => memory.tips(queries.map((q) => ({ ...q, episode: q.episode + start }))),
      uses: (episode: number) => memory.uses(episode + start),
    };
    const shiftedProgress: ProgressSink | undefined = progress && {
      started: (episode, limit) => progress.started(episode + start, limit),
      stepped: (episodes) => progress.stepped(episodes.map((e) => e + start)),
      ended: (episode, score) => progress.ended(episode + start, score),
    };
    const part = await runEpisodes(envs, engine, chunk, { settings: o.settingsFor(start), memory: shifted, progress: shiftedProgress });
    episodes.push(...part.episodes);
    addStats(stats, part.stats);
    o.chunkPlayed?.({ start, ...part });
  }
  return { start: from, episodes, stats };
}

/** Episodes played from job `start` on (in job order), and what playing them took. */
export interface PlayedChunk {
  start: number;
  episodes: Episode[];
  stats: RolloutStats;
}

export interface ChunkedRolloutOptions {
  settingsFor: (start: number) => RolloutSettings;
  memory?: RolloutMemory;
  progress?: ProgressSink;
  /** The first job to play, a chunk start (default 0): the jobs before it were played already (a resumed evaluation). */
  from?: number;
  /** Told each chunk (env count of jobs) as soon as it has been played. */
  chunkPlayed?: (chunk: PlayedChunk) => void;
}

/** Adds `part` into `total`, field by field. */
export function addStats(total: RolloutStats, part: RolloutStats): void {
  for (const key of Object.keys(total) as (keyof RolloutStats)[]) total[key] += part[key];
}

/**
 * Who plays a batch of episodes: by default the built-in rollout over the run's environments
 * (runEpisodesInChunks); a program may pass another (the gateway's, where a user's agent plays each
 * episode through an OpenAI-compatible API) that returns the same records, in job order.
 */
export interface RolloutPlayer {
  (
    engine: PolicyEngine,
    jobs: RolloutJob[],
    o: {
      settingsFor: (start: number) => RolloutSettings;
      memory?: RolloutMemory;
      progress?: ProgressSink;
      evaluation: boolean;
      /** Aborted when the run is asked to stop (Ctrl-C, the library's signal); only a player that `stopsAtOnce` reads it. */
      signal?: AbortSignal;
    },
  ): Promise<{ episodes: Episode[]; stats: RolloutStats }>;
  /**
   * Its episodes stop at once when `signal` aborts, and it throws (EvaluationInterrupted in an evaluation,
   * else RolloutsInterrupted: ../run/interrupt.ts) rather than finish them: a user's agents (../gateway/).
   */
  readonly stopsAtOnce?: boolean;
}

/** The built-in player: the run's environments stepped in lockstep. */
export function environmentPlayer(envs: Env[]): RolloutPlayer {
  return (engine, jobs, o) => runEpisodesInChunks(envs, engine, jobs, o);
}

export function rolloutSettings(cfg: Config, evaluation: boolean, seed: number): RolloutSettings {
  return {
    prompt: promptSettings(cfg),
    temperature: evaluation ? cfg.rollout.eval_temperature : cfg.rollout.temperature,
    topP: evaluation ? 1 : cfg.rollout.top_p,
    maxTokens: cfg.rollout.max_tokens,
    constrained: cfg.rollout.constrained,
    maxSteps: cfg.env.max_steps,
    seed,
    reusePrefix: cfg.rollout.reuse_prefix,
    keptValidActions: cfg.trajectories.max_valid_actions,
    maxObservationBytes: cfg.env.max_observation_bytes,
  };
}
