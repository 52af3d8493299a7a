/**
 * Lets the event loop turn once. With the in-process engine and environment every `await` in a
 * training loop resolves as a microtask, so without this signal handlers (Ctrl-C) and anything
 * waiting on I/O or timers (a test runner's worker messages) wait for the whole loop.
 */
export function turnEventLoop(): Promise<void> {
  return new Promise<void>((resolve) => setImmediate(resolve));
}
