/**
 * One episode as the gateway sees it: its own base URL and key, the steps its calls made (every call
 * is one step: the prompt as sampled with its tip span, the response tokens and their log-probs), its
 * budgets, and how it ended (a reward, or the reason it failed).
 *
 * Calls may come at once (an agent's parallel guardrail, its sub-agents): each takes a step slot when its
 * request has been read (`reserve`), so the steps are in the order the calls arrived whatever order their
 * answers are sampled in; a call recorded fills its slot, a call that fails or is cancelled gives its slot
 * back (`release`), and the steps are the filled slots, so it leaves no hole.
 */
import { randomBytes } from 'node:crypto';
import { ResponseStore } from '../openai/responses/store.ts';
import { AgentClock } from './agent-clock.ts';
import type { RolloutJob, ShownTip, StepRecord } from '../run/records.ts';
import type { LockstepBatch } from './batch.ts';
import type { PromptHistory, SampledTurn } from './prompt.ts';
import { RequestError, type RewardReport } from './protocol.ts';

export interface EpisodeBudget {
  /** Calls the episode may make (each one step; those in flight count). */
  maxCalls: number;
  /** Calls it may have in flight at once; one more is answered 429 (the episode goes on). */
  maxConcurrentCalls: number;
  /** Response tokens over all its calls. */
  maxTokens: number;
  /** Response tokens of one call (a request asking for more is capped to this). */
  maxTokensPerCall: number;
}

/** One call's record: a step without the environment's reward (the agent reports it at the end). */
export type CallRecord = Omit<StepRecord, 'reward' | 'score'>;

/** A call's place among the episode's steps, taken when its request was read. */
export interface CallSlot {
  record: CallRecord | null;
}

/** Branches of token-in/token-out history kept per episode (the calls at once of a few sub-agents). */
const KEPT_BRANCHES = 16;

let nextSession = 0;

export class EpisodeSession {
  readonly id: string;
  readonly key: string;
  readonly cacheKey: string;
  /** The calls' slots in order of arrival: filled (recorded) or in flight. */
  private readonly slots: CallSlot[] = [];
  completionTokens = 0;
  /**
   * The tip-free prompt and answer of answered calls that no later call has extended (branches), the
   * latest answered first: a call's prompt extends the longest one its text starts with (../prompt.ts).
   * Calls one at a time keep one branch, the previous call, as the built-in rollout does.
   */
  private branches: PromptHistory[] = [];
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
  /** The agent's own time, which its timeout measures: stands still while one of its calls is inside the gateway. */
  readonly clock = new AgentClock();
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

  /** The calls recorded, as steps in the order they arrived. */
  get calls(): CallRecord[] {
    return this.slots.flatMap((s) => (s.record ? [s.record] : []));
  }

  /** Calls made (recorded or in flight): what the budget of calls counts. */
  callsMade(): number {
    return this.slots.length;
  }

  /** Calls in flight: read and not yet recorded or given up. */
  inFlight(): number {
    return this.slots.reduce((n, s) => n + (s.record ? 0 : 1), 0);
  }

  /** Takes the next step slot for a call whose request has been read. */
  reserve(): CallSlot {
    const slot: CallSlot = { record: null };
    this.slots.push(slot);
    return slot;
  }

  /** Gives back the slot of a call that failed or was cancelled (none once it is recorded), so it leaves no hole. */
  release(slot: CallSlot): void {
    if (slot.record) return;
    const at = this.slots.indexOf(slot);
    if (at >= 0) this.slots.splice(at, 1);
  }

  record(slot: CallSlot, call: CallRecord, tips: readonly ShownTip[]): void {
    if (!this.slots.includes(slot)) throw new Error(`episode ${this.id}: a call was recorded without its slot`);
    slot.record = { ...call, tips };
    this.completionTokens += call.response.length;
    this.o.onCall?.();
  }

  /** The branches a new call's prompt may extend, the latest answered first. */
  history(): readonly PromptHistory[] {
    return this.branches;
  }

  /** An answered call's prompt and answer, `extended` the branch its prompt extended (null: none), which it replaces. */
  answered(next: PromptHistory, extended: PromptHistory | null): void {
    this.branches = [next, ...this.branches.filter((b) => b !== extended)].slice(0, KEPT_BRANCHES);
  }
}
