/**
 * An environment served over HTTP in AgentGym's protocol (./protocol.ts), behind the project's Env
 * interface.
 *
 * - tasks / variations / maxSteps come from env.options (./options.ts): a variation is the
 *   server's data index (AgentGym's data_idx), sent as is.
 * - reset(): creates a server instance (or, with reuse_instance, keeps one per env), resets it to
 *   the data index and reads the valid actions where the server family gives them.
 * - step(): score is the server's "score" times score_scale, or, for servers that only give a
 *   reward, the summed rewards times score_scale; reward is the change in that score, as in the
 *   other envs. Outcomes in info.outcome: 'success' (done at a full score), 'ended' (done below
 *   it), 'step_limit' (this env cut the episode at maxSteps), 'simulator_error'.
 * - a server that fails (no answer in time, connection lost after the retries the call allows,
 *   an error status, an {"error"} answer, an answer of the wrong shape) ends only that episode,
 *   the way ScienceWorld's simulator_error does (src/envs/scienceworld/env.ts): done = true,
 *   reward 0, the score reached so far, info.outcome = 'simulator_error' and
 *   info.simulatorError naming the call. Nothing is thrown, so one bad answer cannot stop a run.
 *   A reset that fails on `reset_attempts` fresh instances returns an episode that is already
 *   over (done() is true); its first step() returns that same ending without calling the server,
 *   so loops that always take a step (the trainer's lockstep rollouts) see an ordinary ended
 *   episode. Once `max_consecutive_failures` episodes in a row on the same server have failed,
 *   reset() throws instead: a run against a server that is down would otherwise train on nothing.
 * - instances: closed when their episode ends (or, with reuse_instance, when the env closes), on
 *   any failure (their state is no longer trusted), by close(), and at process exit (./instances.ts).
 *   A close the server does not answer is tried again at the next reset and at close().
 * - Calling step() before reset() or after the episode ended is a programming error and throws.
 */
import { SUCCESS_SCORE, type Env, type ResetResult, type Split, type StepResult } from '../types.ts';
import { forgetInstance, instanceKey, registerInstance } from './instances.ts';
import type { HttpEnvConfig } from './options.ts';
import { ServerProtocol, type InstanceId } from './protocol.ts';
import { EnvServerError } from './transport.ts';

export type HttpEpisodeOutcome = 'running' | 'success' | 'ended' | 'step_limit' | 'simulator_error';

/** Closes that failed and wait to be tried again; beyond this many per env the oldest is given up. */
const MAX_PENDING_CLOSES = 64;

interface Episode {
  task: string;
  variation: number;
  seed: number;
  maxSteps: number;
  stepsTaken: number;
  score: number;
  rewardSum: number;
  done: boolean;
  validActions: string[];
  /** Set when the server failed: the episode is over for that reason. */
  failure: string | null;
  /** A failed reset: the first step() reports the ending. */
  endingUnreported: boolean;
}

/** Consecutive failed episodes per server, shared by every env of this process that talks to it. */
const failuresByServer = new Map<string, { count: number; last: string }>();

export interface HttpEnvHooks {
  /** Told of each episode the server ended with a failure and of closes given up (default: stderr). */
  warn?: (line: string) => void;
}

export interface HttpEnvStats {
  /** Instances created on the server. */
  created: number;
  /** Instances whose close the server acknowledged. */
  closed: number;
  /** Episodes ended by a server failure. */
  failedEpisodes: number;
  /** Failed attempts sent again. */
  retries: number;
}

export class HttpEnv implements Env {
  readonly name = 'http';
  readonly stats: HttpEnvStats = { created: 0, closed: 0, failedEpisodes: 0, retries: 0 };
  private readonly server: ServerProtocol;
  private readonly warn: (line: string) => void;
  private instance: InstanceId | undefined;
  private pendingCloses: InstanceId[] = [];
  private episode: Episode | undefined;
  private closed = false;
  private warnedAboutClose = false;
  private lastCloseFailure = '';

  constructor(
    readonly config: HttpEnvConfig,
    hooks: HttpEnvHooks = {},
  ) {
    this.warn = hooks.warn ?? ((line) => process.stderr.write(`${line}\n`));
    // Every retry is said: a slow evaluation should not have to be guessed at.
    this.server = new ServerProtocol(config, (message) => {
      this.stats.retries++;
      this.warn(`http env: ${message}`);
    });
  }

  tasks(): string[] {
    return [...this.config.tasks.keys()];
  }

  variations(task: string, split: Split): number[] {
    const indices = this.plan(task).splits[split];
    if (!indices) {
      throw new Error(
        `env.options defines no ${split} split for task "${task}"; add ${split}: "<first>-<last>" to env.options.variations (or to env.options.tasks.${task})`,
      );
    }
    return [...indices];
  }

  maxSteps(task: string): number {
    return this.plan(task).maxSteps;
  }

  async reset(task: string, variation: number, seed = 0): Promise<ResetResult> {
    this.assertOpen();
    const maxSteps = this.maxSteps(task);
    if (!Number.isSafeInteger(variation) || variation < 0)
      throw new Error(`HttpEnv.reset(): the variation is the server's data index, a non-negative integer; got ${String(variation)}`);
    this.episode = undefined;
    if (!this.config.protocol.reuseInstance && this.instance !== undefined) await this.release(); // an episode left unfinished
    await this.retryPendingCloses();
    const health = failuresByServer.get(this.config.baseUrl);
    if (health && health.count >= this.config.maxConsecutiveFailures) {
      throw new Error(
        `the environment server at ${this.config.baseUrl} failed ${health.count} episodes in a row (last: ${health.last}); ` +
          `stopping rather than training on failed episodes (env.options.max_consecutive_failures = ${this.config.maxConsecutiveFailures})`,
      );
    }

    let lastFailure: EnvServerError | undefined;
    for (let attempt = 1; attempt <= this.config.resetAttempts; attempt++) {
      try {
        const id = await this.liveInstance();
        const answer = await this.server.reset(id, task, variation);
        const validActions = await this.server.actionsOf(id, answer);
        failuresByServer.delete(this.config.baseUrl);
        const score = answer.score === null ? 0 : answer.score * this.config.protocol.scoreScale;
        this.episode = {
          task,
          variation,
          seed,
          maxSteps,
          stepsTaken: 0,
          score,
          rewardSum: 0,
          done: false,
          validActions,
          failure: null,
          endingUnreported: false,
        };
        return {
          observation: answer.observation,
          task: answer.taskDescription ?? task,
          validActions: [...validActions],
          info: { variation, seed, maxSteps, score, instance: id },
        };
      } catch (error) {
        if (!(error instanceof EnvServerError)) throw error;
        lastFailure = error;
        await this.discard(true);
      }
    }
    const failure = `${lastFailure!.message} (reset tried on ${this.config.resetAttempts} instance${this.config.resetAttempts === 1 ? '' : 's'})`;
    this.noteFailure(task, variation, failure);
    this.episode = {
      task,
      variation,
      seed,
      maxSteps,
      stepsTaken: 0,
      score: 0,
      rewardSum: 0,
      done: true,
      validActions: [],
      failure,
      endingUnreported: true,
    };
    return {
      observation: failedObservation(),
      task,
      validActions: [],
      info: { variation, seed, maxSteps, score: 0, outcome: 'simulator_error' satisfies HttpEpisodeOutcome, simulatorError: failure },
    };
  }

  async step(action: string): Promise<StepResult> {
    this.assertOpen();
    const episode = this.episode;
    if (!episode) throw new Error('HttpEnv.step() called before reset()');
    if (episode.endingUnreported) {
      episode.endingUnreported = false;
      episode.stepsTaken++;
      return this.failedStep(episode);
    }
    if (episode.done)
      throw new Error(`HttpEnv.step() called after the episode of "${episode.task}" data index ${episode.variation} ended; call reset()`);
    if (typeof action !== 'string') throw new Error(`HttpEnv.step() needs a string action, got ${typeof action}`);

    const id = this.instance!;
    try {
      const answer = await this.server.step(id, action);
      episode.stepsTaken++;
      const scale = this.config.protocol.scoreScale;
      episode.rewardSum += answer.reward!;
      const score = answer.score !== null ? answer.score * scale : episode.rewardSum * scale;
      const reward = score - episode.score;
      episode.score = score;
      const outcome: HttpEpisodeOutcome = answer.done
        ? score >= SUCCESS_SCORE
          ? 'success'
          : 'ended'
        : episode.stepsTaken >= episode.maxSteps
          ? 'step_limit'
          : 'running';
      episode.done = outcome !== 'running';
      episode.validActions = episode.done ? [] : await this.server.actionsOf(id, answer);
      failuresByServer.delete(this.config.baseUrl);
      if (episode.done && !this.config.protocol.reuseInstance) await this.release();
      return {
        observation: answer.observation,
        reward,
        done: episode.done,
        score,
        validActions: [...episode.validActions],
        info: { outcome, truncated: outcome === 'step_limit', stepsTaken: episode.stepsTaken, serverReward: answer.reward },
      };
    } catch (error) {
      if (!(error instanceof EnvServerError)) throw error;
      episode.stepsTaken++;
      episode.done = true;
      episode.validActions = [];
      episode.failure = error.message;
      this.noteFailure(episode.task, episode.variation, error.message);
      // A step that failed half-way leaves the instance in a state nobody knows: it is not used again.
      await this.discard(false);
      return this.failedStep(episode);
    }
  }

  validActions(): string[] {
    return this.episode ? [...this.episode.validActions] : [];
  }

  score(): number {
    return this.episode?.score ?? 0;
  }

  done(): boolean {
    return this.episode?.done ?? false;
  }

  /** Closes this env's instances on the server; safe to call twice. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.episode = undefined;
    if (this.instance !== undefined) await this.release();
    // The last chance in this env, so with the retries a close may have.
    await this.retryPendingCloses(this.config.retries);
    if (this.pendingCloses.length > 0) {
      this.warn(
        `http env: ${this.pendingCloses.length} instance(s) on ${this.config.baseUrl} could not be closed (last: ${this.lastCloseFailure}); they are tried once more when this process exits`,
      );
    }
  }

  /** Instances this env has created whose close the server has not acknowledged (the live one included). */
  unclosedInstances(): InstanceId[] {
    return [...(this.instance === undefined ? [] : [this.instance]), ...this.pendingCloses];
  }

  private plan(task: string) {
    const plan = this.config.tasks.get(task);
    if (!plan) throw new Error(`unknown task "${task}" for the http env at ${this.config.baseUrl} (tasks: ${this.tasks().join(', ')})`);
    return plan;
  }

  private async liveInstance(): Promise<InstanceId> {
    if (this.instance !== undefined) return this.instance;
    const id = await this.server.create();
    this.stats.created++;
    this.instance = id;
    if (this.config.protocol.closeEndpoint)
      registerInstance(instanceKey(this.config.baseUrl, id), {
        url: this.server.url('close'),
        body: { [this.config.protocol.idField]: id },
      });
    return id;
  }

  /** Closes the live instance at the end of its use. */
  private async release(): Promise<void> {
    const id = this.instance;
    this.instance = undefined;
    if (id === undefined || !this.config.protocol.closeEndpoint) return;
    await this.closeOrKeep(id, this.config.retries);
  }

  /**
   * After a failure: closes the live instance (its state is not trusted). A server without
   * /close keeps its instance unless `force`, since dropping it would leave it open for good.
   */
  private async discard(force: boolean): Promise<void> {
    const id = this.instance;
    if (id === undefined) return;
    if (!this.config.protocol.closeEndpoint) {
      if (force) this.instance = undefined;
      return;
    }
    this.instance = undefined;
    await this.closeOrKeep(id, 0);
  }

  private async closeOrKeep(id: InstanceId, retries: number): Promise<void> {
    try {
      await this.server.close(id, this.config.closeTimeoutMs, retries);
      this.stats.closed++;
      forgetInstance(instanceKey(this.config.baseUrl, id));
    } catch (error) {
      if (!(error instanceof EnvServerError)) throw error;
      if (error.kind === 'status' && (error.status === 404 || error.status === 405)) {
        forgetInstance(instanceKey(this.config.baseUrl, id));
        this.warn(
          `http env: ${error.message}; the server has no POST /close, so its instances cannot be released: set env.options.close_endpoint: false and reuse_instance: true`,
        );
        return;
      }
      if (error.kind === 'garbage' && !this.warnedAboutClose) {
        this.warnedAboutClose = true;
        this.warn(`http env: ${error.message}; the instance is taken as still open and its close is tried again later`);
      }
      this.lastCloseFailure = error.message;
      this.pendingCloses.push(id);
      if (this.pendingCloses.length > MAX_PENDING_CLOSES) {
        const given = this.pendingCloses.shift()!;
        forgetInstance(instanceKey(this.config.baseUrl, given));
        this.warn(
          `http env: gave up closing instance ${JSON.stringify(given)} on ${this.config.baseUrl} after ${MAX_PENDING_CLOSES} later closes also failed`,
        );
      }
    }
  }

  /** Each reset tries the waiting closes once, without retries, so that a slow server delays episodes little. */
  private async retryPendingCloses(retries = 0): Promise<void> {
    const pending = this.pendingCloses;
    this.pendingCloses = [];
    for (const id of pending) await this.closeOrKeep(id, retries);
  }

  private noteFailure(task: string, variation: number, message: string): void {
    this.stats.failedEpisodes++;
    const health = failuresByServer.get(this.config.baseUrl) ?? { count: 0, last: '' };
    health.count++;
    health.last = message;
    failuresByServer.set(this.config.baseUrl, health);
    this.warn(`http env: episode of "${task}" data index ${variation} ended by a server failure: ${message}`);
  }

  private failedStep(episode: Episode): StepResult {
    return {
      observation: failedObservation(),
      reward: 0,
      done: true,
      score: episode.score,
      validActions: [],
      info: { outcome: 'simulator_error' satisfies HttpEpisodeOutcome, simulatorError: episode.failure, stepsTaken: episode.stepsTaken },
    };
  }

  private assertOpen(): void {
    if (this.closed) throw new Error('this http env is closed');
  }
}

/** What the policy sees: the details (URL, payload) are for people, in info.simulatorError and the warning. */
function failedObservation(): string {
  return 'The environment server failed and this episode was ended.';
}
