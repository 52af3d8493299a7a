/**
 * An episode's own time: what its timeout measures. The gateway samples the calls of many episodes in
 * lockstep (./batch.ts), so a call waits for the whole batch and for the model; that wait is the run's,
 * not the agent's. The clock runs from the episode's start while none of its calls is inside the
 * gateway, and stands still while one is: from the moment the gateway's HTTP front received the call
 * (its `x-empo2-received-at` stamp, ../util/http-front.ts: a call that arrives while the trainer's thread
 * is busy sampling waits there, and that wait is the model's too) until the gateway has written its whole
 * answer (or the client hung up). An answer written is the end, not an answer read: an agent that never
 * reads its answers still runs out its time.
 *
 * A call inside the gateway stands the clock still for as long as it stays there. Every wait there has a
 * bound of its own: a batch samples within `batchWaitMs` of a call, an answer has at most its call's max
 * tokens, the memory's tips are a local lookup, a request body is read within the front's request timeout
 * (Node's 300 s), and a call of an episode that has ended is answered at once (410). Only an engine whose
 * `generate` never returns would hold a call for ever, and it would hold the whole run with it (every
 * episode of the batch waits for the same step); stopping the run (Ctrl-C, the `signal`) is the way out
 * of that, as it is of any hung step.
 */

/** The header the HTTP front stamps on every request it forwards: when it received the request (ms since the epoch). */
export const RECEIVED_AT_HEADER = 'x-empo2-received-at';

/**
 * After the clock says the time is up, the episode fails only if it is still up this much later: a call
 * that reached the front before the deadline while this thread was busy (timers run before the event
 * loop reads new requests) is seen first, and its wait taken off.
 */
const GRACE_MS = 100;

export class AgentClock {
  readonly start: number;
  /** The calls inside the gateway now, by when they arrived. */
  private readonly open = new Set<{ from: number }>();
  /** Spans calls were inside the gateway (merged, in order), the ones that ended. */
  private spans: [number, number][] = [];
  private readonly listeners = new Set<() => void>();

  constructor(private readonly now: () => number = Date.now) {
    this.start = now();
  }

  /** Calls inside the gateway now. */
  inGateway(): number {
    return this.open.size;
  }

  /** The agent's own time in ms: since the start, less the time any of its calls was inside the gateway. */
  ownMs(): number {
    const t = this.now();
    const spans: [number, number][] = [...this.spans, ...[...this.open].map((c): [number, number] => [c.from, t])];
    return t - this.start - covered(spans);
  }

  /**
   * A call came in, received at `at` (ms since the epoch; clamped to the clock's start and now): the clock
   * stands still from then. Returns what to call once it has been answered (more than once is harmless).
   */
  arrived(at: number = this.now()): () => void {
    const t = this.now();
    const call = { from: Math.min(Math.max(Number.isFinite(at) ? at : t, this.start), t) };
    this.open.add(call);
    this.changed();
    return () => {
      if (!this.open.delete(call)) return;
      this.spans = merge([...this.spans, [call.from, this.now()]]);
      this.changed();
    };
  }

  /**
   * Calls `onExpire` once the agent's own time reaches `limitMs` (checked again GRACE_MS later, so a call
   * already on its way is counted). Returns a function that cancels it.
   */
  deadline(limitMs: number, onExpire: () => void): () => void {
    let timer: NodeJS.Timeout | null = null;
    let done = false;
    const clear = () => {
      if (timer) clearTimeout(timer);
      timer = null;
    };
    const check = (grace: boolean) => {
      clear();
      if (done) return;
      const left = limitMs - this.ownMs();
      if (left <= 0) {
        if (!grace) return void (timer = setTimeout(() => check(true), GRACE_MS));
        done = true;
        this.listeners.delete(listener);
        return onExpire();
      }
      // A call inside the gateway: the clock stands still until it is answered (a change checks again).
      if (this.open.size === 0) timer = setTimeout(() => check(false), left);
    };
    const listener = () => check(false);
    this.listeners.add(listener);
    check(false);
    return () => {
      done = true;
      clear();
      this.listeners.delete(listener);
    };
  }

  private changed(): void {
    for (const f of [...this.listeners]) f();
  }
}

/** Sorted, overlapping or touching spans joined. */
function merge(spans: [number, number][]): [number, number][] {
  const out: [number, number][] = [];
  for (const [a, b] of [...spans].sort((x, y) => x[0] - y[0])) {
    const last = out.at(-1);
    if (last && a <= last[1]) last[1] = Math.max(last[1], b);
    else out.push([a, b]);
  }
  return out;
}

/** The time the union of `spans` covers. */
function covered(spans: [number, number][]): number {
  return merge(spans).reduce((n, [a, b]) => n + (b - a), 0);
}
