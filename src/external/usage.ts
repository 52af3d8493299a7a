/**
 * What calls to an external model cost: the numbers an iteration's `train` line in metrics.jsonl
 * carries per role (`external.reflector`, ...), and the clock that measures them.
 */

export interface ExternalUsage {
  /** Calls made (one per tip, judgement, ...), however they were answered. */
  calls: number;
  /** Calls answered from the on-disk cache (nothing sent). */
  cached: number;
  /** Calls that got no usable answer after their retries: what depended on them was skipped. */
  failed: number;
  /** HTTP requests sent, retries included. */
  requests: number;
  /** Requests sent again after a 429, a 5xx, a time-out or a connection error. */
  retries: number;
  /** Tokens the server reported for the answered requests (the model's own tokenizer; cached calls cost none). */
  prompt_tokens: number;
  completion_tokens: number;
  /** Wall time with at least one request in flight or waiting to be retried. */
  seconds: number;
}

export function emptyUsage(): ExternalUsage {
  return { calls: 0, cached: 0, failed: 0, requests: 0, retries: 0, prompt_tokens: 0, completion_tokens: 0, seconds: 0 };
}

/**
 * Counts usage, timing the stretches in which any call is busy (calls run concurrently, so their
 * durations are not added up: ten calls in parallel for 2 s cost 2 s of the iteration).
 */
export class UsageMeter {
  private usage = emptyUsage();
  private busy = 0;
  private since = 0;

  add(part: Partial<Omit<ExternalUsage, 'seconds'>>): void {
    for (const [k, v] of Object.entries(part) as [keyof ExternalUsage, number][]) this.usage[k] += v;
  }

  start(): void {
    if (this.busy++ === 0) this.since = performance.now();
  }

  stop(): void {
    if (--this.busy === 0) this.usage.seconds += (performance.now() - this.since) / 1000;
  }

  /** The usage since the last take (a stretch still running is counted up to now and goes on). */
  take(): ExternalUsage {
    if (this.busy > 0) {
      const now = performance.now();
      this.usage.seconds += (now - this.since) / 1000;
      this.since = now;
    }
    const out = this.usage;
    this.usage = emptyUsage();
    return out;
  }
}
