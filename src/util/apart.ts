/**
 * A batched call that one bad item cannot fail for the others: the items run in one call, and if that
 * call throws while holding more than one item, each item runs again alone, so the item the call could
 * not take fails by itself and its batch-mates get their answers. Both servers over an engine (the
 * training gateway's lockstep batch and `empo2 serve`'s merged requests) sample this way.
 */

/** How one item ended. */
export type ItemOutcome<R> = { ok: true; value: R } | { ok: false; error: unknown };

export interface BatchedOrApart<T, R> {
  /** One call over `items` (in order), one result per item; `alone` when it retries a single item after a failure. */
  run: (items: readonly T[], alone: boolean) => Promise<R[]>;
  settle: (item: T, outcome: ItemOutcome<R>) => void;
  /** Whether a failure of the whole call is worth retrying item by item (default: always; not when every client has gone). */
  retryApart?: (error: unknown) => boolean;
}

export async function batchedOrApart<T, R>(items: readonly T[], o: BatchedOrApart<T, R>): Promise<void> {
  try {
    const results = await o.run(items, false);
    items.forEach((item, k) => o.settle(item, { ok: true, value: results[k] }));
    return;
  } catch (error) {
    if (items.length === 1 || !(o.retryApart?.(error) ?? true)) {
      for (const item of items) o.settle(item, { ok: false, error });
      return;
    }
  }
  for (const item of items) {
    try {
      const [value] = await o.run([item], true);
      o.settle(item, { ok: true, value });
    } catch (error) {
      o.settle(item, { ok: false, error });
    }
  }
}
