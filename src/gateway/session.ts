/**
 * One episode as the gateway sees it: its own base URL and key, the steps its calls made (every call
 * is one step: the prompt as sampled with its tip span, the response tokens and their log-probs), its
 * budgets, and how it ended (a reward, or the reason it failed).
 */
import { randomBytes } from 'node:crypto';
import { ResponseStore } from '../openai/responses/store.ts';
import type { RolloutJob, ShownTip, StepRecord } from '../run/records.ts';
import type { LockstepBatch } from './batch.ts';
import type { PromptHistory, SampledTurn } from './prompt.ts';
import { RequestError, type RewardReport } from './protocol.ts';

export interface EpisodeBudget {
  /** Calls the episode may make (each one step). */
  maxCalls: number;
  /** Response tokens over all its calls. */
  maxTokens: number;
  /** Response tokens of one call (a request asking for more is capped to this). */
  maxTokensPerCall: number;
}

/** One call's record: a step without the environment's reward (the agent reports it at the end). */
export type CallRecord = Omit<StepRecord, 'reward' | 'score'>;

let nextSession = 0;

export class EpisodeSession {
  readonly id: string;
  readonly key: string;
  readonly cacheKey: string;
  readonly calls: CallRecord[] = [];
  completionTokens = 0;
  history: PromptHistory | null = null;
  /** Its answers as sampled, which the agent's later calls send back (./prompt.ts `spliceSampled`). */
  readonly turns: SampledTurn[] = [];
  /** Its answers to `POST responses`, for `previous_response_id` (an id from another episode is not found here). */
  readonly responses: ResponseStore;
  /** Set once: the episode will make no more calls. */
  ended = false;
  failure: string | null = null;
  report: RewardReport | null = null;
  /** Requests of this episode the gateway has not answered yet. */
  openRequests = 0;
  /** What its calls are answered with once it has ended: 410, or 503 where the run is stopping. */
  private endStatus = 410;
  private readonly endedListeners: (() => void)[] = [];

  constructor(
    readonly index: number,
    readonly job: RolloutJob,
    readonly o: {
      usesMemory: boolean;
      budget: EpisodeBudget;
      batch: LockstepBatch;
      task: unknown;
      keptValidActions: number;
      /** Told after each call is recorded (progress lines). */
      onCall?: () => void;
    },
  ) {
    const n = nextSession++;
    this.id = `ep${n}-${randomBytes(4).toString('hex')}`;
    this.key = `empo2-ep-${randomBytes(18).toString('base64url')}`;
    this.cacheKey = `gateway-${this.id}`;
    this.responses = new ResponseStore({ scope: `episode ${this.id}` });
  }

  /** Ends the episode (the first reason given is kept); calls waiting are answered with an error, later ones with `status`. */
  end(failure: string | null, status = 410): void {
    if (this.ended) return;
    this.ended = true;
    this.endStatus = status;
    if (failure !== null && this.failure === null) this.failure = failure;
    this.o.batch.ended(this);
    for (const f of this.endedListeners.splice(0)) f();
  }

  /** The answer to a call of the ended episode. */
  endedError(): RequestError {
    if (this.endStatus === 503) return new RequestError(503, `${this.failure} (episode ${this.id})`, null, 'server_error');
    return new RequestError(this.endStatus, `episode ${this.id} has ended${this.failure ? ` (${this.failure})` : ''}`, null);
  }

  /** Calls `f` once the episode ends (at once if it has). */
  onEnd(f: () => void): void {
    if (this.ended) f();
    else this.endedListeners.push(f);
  }

  record(call: CallRecord, tips: readonly ShownTip[]): void {
    this.calls.push({ ...call, tips });
    this.completionTokens += call.response.length;
    this.o.onCall?.();
  }
}
