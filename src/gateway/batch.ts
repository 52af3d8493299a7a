/**
 * The episodes a player runs together, and their calls sampled in lockstep, as the built-in rollout
 * samples its episodes (../trainer/rollout.ts): a batch waits until every episode still running has a
 * call waiting (or `waitMs` has passed since the first one came), then samples all of them in one
 * `engine.generate`, rows in episode order, with the seed of that step. So an agent that makes the
 * built-in rollout's calls gets the built-in rollout's tokens, and many agents share each forward pass.
 *
 * An episode may have several calls waiting (an agent's calls at once: a parallel guardrail, sub-agents):
 * each is a row of the step, after the rows of the episodes before it, in the order they were submitted.
 * One waiting call is enough for an episode to count as waiting, so a step never waits for an episode's
 * second call, and an agent whose calls each wait for the one before gets exactly the rows it got before.
 */
import type { Generation, PolicyEngine, TokenConstraint } from '../policy/types.ts';
import { batchedOrApart } from '../util/apart.ts';
import { RequestError } from './protocol.ts';

export interface BatchSampling {
  temperature: number;
  topP: number;
  /** The rollout's seed: step t is sampled with seed · 100003 + t, as in the built-in rollout. */
  seed: number;
  /** Pass per-episode cache keys so the engine can reuse each episode's KV cache. */
  reusePrefix: boolean;
}

/** What one call asks to be sampled. */
export interface CallRequest {
  prompt: number[];
  maxTokens: number;
  stop: string[];
  allowedTexts: readonly string[] | null;
  /** A rule over token ids the answer must follow (a forced tool call); never with allowedTexts. */
  constraint?: TokenConstraint | null;
  /**
   * The answer's form is forced (a forced tool call, a JSON format): its tokens no one chooses (the call's
   * wrapper) go through the model in one pass (jump-forward). Off for an agent's own allowed texts, which
   * are sampled exactly as the built-in rollout samples them, log-prob for log-prob.
   */
  forced?: boolean;
}

/** One call waiting for its tokens. */
export interface PendingCall extends CallRequest {
  /** The object submitted, which names the call to `cancel`. */
  request: CallRequest;
  resolve: (g: Generation) => void;
  reject: (e: unknown) => void;
}

/** What a batch knows of each of its episodes. */
export interface BatchMember {
  readonly index: number;
  readonly cacheKey: string;
  /** Ended: it will make no more calls (its agent returned, failed or timed out). */
  readonly ended: boolean;
}

export class LockstepBatch {
  /** The calls waiting, by episode, in the order they were submitted. */
  private readonly pending = new Map<number, PendingCall[]>();
  private step = 0;
  private timer: NodeJS.Timeout | null = null;
  private running: Promise<void> = Promise.resolve();
  private flushing = false;
  /** Prompt tokens the engine ran (the rest came from kept KV caches), over the batch's steps. */
  prefilledTokens = 0;

  constructor(
    private readonly engine: PolicyEngine,
    private readonly sampling: BatchSampling,
    private readonly members: readonly BatchMember[],
    private readonly waitMs: number,
  ) {}

  /**
   * Queues `call` of episode `member` and resolves with its tokens once its step is sampled. `call` is
   * also its handle: `cancel(member, reason, call)` takes this call alone out.
   */
  submit(member: BatchMember, call: CallRequest): Promise<Generation> {
    return new Promise<Generation>((resolve, reject) => {
      const calls = this.pending.get(member.index) ?? [];
      calls.push({ ...call, resolve, reject, request: call });
      this.pending.set(member.index, calls);
      this.maybeFlush();
    });
  }

  /**
   * Drops the waiting calls of `member` (the episode ended), or only `call` (its client hung up), rejecting
   * them with `reason`. A call already being sampled is not waiting: it is answered when its step returns.
   */
  cancel(member: BatchMember, reason: unknown, call?: CallRequest): void {
    const calls = this.pending.get(member.index);
    if (!calls) return;
    const dropped = call === undefined ? calls : calls.filter((c) => c.request === call);
    const kept = calls.filter((c) => !dropped.includes(c));
    if (kept.length > 0) this.pending.set(member.index, kept);
    else this.pending.delete(member.index);
    for (const c of dropped) c.reject(reason);
    if (dropped.length > 0) this.maybeFlush();
  }

  /** Told when an episode ends, so that the others need not wait for it. */
  ended(member: BatchMember): void {
    this.cancel(member, new RequestError(410, 'the episode has ended', null));
    this.engine.releaseCache?.([member.cacheKey]);
    this.maybeFlush();
  }

  /** Calls waiting now. */
  waiting(): number {
    let n = 0;
    for (const calls of this.pending.values()) n += calls.length;
    return n;
  }

  /** Flushes at once when every running episode waits, else within `waitMs` of now. */
  private maybeFlush(): void {
    if (this.pending.size === 0 || this.flushing) {
      if (this.pending.size === 0 && this.timer) {
        clearTimeout(this.timer);
        this.timer = null;
      }
      return;
    }
    const everyoneWaits = this.members.every((m) => m.ended || this.pending.has(m.index));
    if (everyoneWaits) {
      if (this.timer) clearTimeout(this.timer);
      this.timer = null;
      this.flush();
    } else if (!this.timer) {
      this.timer = setTimeout(() => {
        this.timer = null;
        this.flush();
      }, this.waitMs);
    }
  }

  private flush(): void {
    this.flushing = true;
    const calls = [...this.pending.entries()]
      .sort((a, b) => a[0] - b[0])
      .flatMap(([index, waiting]) => waiting.map((c): [number, PendingCall] => [index, c]));
    this.pending.clear();
    this.running = this.running
      .then(() => this.sample(calls))
      .finally(() => {
        this.flushing = false;
        this.maybeFlush();
      });
  }

  /**
   * One step: the calls grouped by what `generate` takes for the whole batch (max tokens, stop texts), one
   * call per group. Prompts are checked against the model's context before they get here (./server.ts),
   * so a throw is rare; when one comes, the group's calls are sampled again one at a time, so that only the
   * call the engine cannot take fails (its episode ends with the engine's error) and the others go on.
   * A call sampled alone is drawn with its own seed, not as its row of the batch: only on this fault path.
   */
  private async sample(calls: [number, PendingCall][]): Promise<void> {
    const groups = new Map<string, [number, PendingCall][]>();
    for (const c of calls) {
      const key = JSON.stringify([c[1].maxTokens, c[1].stop]);
      groups.set(key, [...(groups.get(key) ?? []), c]);
    }
    const t = this.step++;
    let g = 0;
    for (const group of groups.values()) {
      const seed = this.sampling.seed * 100_003 + t + 7_919 * g++;
      await batchedOrApart(group, {
        run: (rows, alone) => this.generate(rows, alone ? seed + 1_000_003 * (1 + group.indexOf(rows[0])) : seed),
        settle: ([, c], o) => (o.ok ? c.resolve(o.value) : c.reject(o.error)),
      });
    }
  }

  private async generate(rows: readonly [number, PendingCall][], seed: number): Promise<Generation[]> {
    const keyOf = new Map(this.members.map((m) => [m.index, m.cacheKey]));
    // An episode's KV cache is kept under its key for one sequence: of its calls in this step, the first
    // keeps it, the others are sampled without one (their prompts are branches of their own).
    const cacheKeys = rows.map(([i], r) => (rows.findIndex(([j]) => j === i) === r ? (keyOf.get(i) ?? null) : null));
    const first = rows[0][1];
    const before = this.engine.prefillCounts?.().prefilledTokens ?? 0;
    const gens = await this.engine.generate(
      rows.map(([, c]) => c.prompt),
      {
        temperature: this.sampling.temperature,
        topP: this.sampling.topP,
        maxTokens: first.maxTokens,
        stop: first.stop.length ? first.stop : undefined,
        seed,
        allowedTexts: rows.some(([, c]) => c.allowedTexts !== null) ? rows.map(([, c]) => c.allowedTexts) : undefined,
        constraints: rows.some(([, c]) => c.constraint) ? rows.map(([, c]) => c.constraint ?? null) : undefined,
        cacheKeys: this.sampling.reusePrefix ? cacheKeys : undefined,
        jumpForward: rows.some(([, c]) => c.forced === true),
      },
    );
    this.prefilledTokens += (this.engine.prefillCounts?.().prefilledTokens ?? 0) - before;
    return gens;
  }

  /** Stops the timer and rejects what waits (the batch is over). */
  close(reason: unknown): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    for (const calls of this.pending.values()) for (const call of calls) call.reject(reason);
    this.pending.clear();
  }
}
