/**
 * Every server instance this process created and has not seen closed, so that none outlives the
 * process (AgentGym's WebShop server ran out of memory with 1,764 threads of instances nobody
 * closed, AgentGym#62):
 * - close() of each env closes its own; this registry is the safety net for the rest.
 * - process exit (process.exit(), the end of the event loop): 'exit' handlers cannot wait for a
 *   request, so a short-lived child process sends the close requests, with a 5 s limit.
 * - SIGTERM and SIGHUP, while instances are open: they are closed first, by the same child process
 *   (waited for: 5 s limit), then the signal is raised again with its default action, so the process
 *   still ends by that signal.
 * SIGINT is left to the trainer's Ctrl-C handling (src/run/interrupt.ts): its first Ctrl-C
 * ends the run through close(); a second one, or SIGKILL, ends the process before anything can
 * be sent, which is why servers should also drop instances idle for long (see README.md).
 */
import { spawnSync } from 'node:child_process';

export interface CloseRequest {
  url: string;
  body: unknown;
}

const open = new Map<string, CloseRequest>();
const SIGNALS = ['SIGTERM', 'SIGHUP'] as const;
let exitHookInstalled = false;
let signalsInstalled = false;

export function instanceKey(baseUrl: string, id: number | string): string {
  return `${baseUrl}#${JSON.stringify(id)}`;
}

export function registerInstance(key: string, close: CloseRequest): void {
  open.set(key, close);
  if (!exitHookInstalled) {
    exitHookInstalled = true;
    process.on('exit', closeAllBeforeExit);
  }
  if (!signalsInstalled) {
    signalsInstalled = true;
    for (const signal of SIGNALS) process.on(signal, onSignal);
  }
}

export function forgetInstance(key: string): void {
  open.delete(key);
  if (open.size === 0 && signalsInstalled) {
    signalsInstalled = false;
    for (const signal of SIGNALS) process.off(signal, onSignal);
  }
}

/** Instances of this process believed open on their servers. */
export function openInstanceCount(): number {
  return open.size;
}

const CHILD_SCRIPT = `
let input = '';
process.stdin.on('data', (d) => (input += d)).on('end', async () => {
  const calls = JSON.parse(input);
  await Promise.allSettled(calls.map((c) => fetch(c.url, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(c.body), signal: AbortSignal.timeout(3000) })));
  process.exit(0); // not waiting for kept-alive connections to close: the caller waits for this process
});`;

function closeAllBeforeExit(): void {
  if (open.size === 0) return;
  const calls = [...open.values()];
  open.clear();
  // NODE_OPTIONS is cleared so the child does not load this process's loaders (tsx) for a plain script.
  spawnSync(process.execPath, ['-e', CHILD_SCRIPT], {
    input: JSON.stringify(calls),
    timeout: 5_000,
    stdio: ['pipe', 'ignore', 'ignore'],
    env: { ...process.env, NODE_OPTIONS: '' },
  });
}

function onSignal(signal: NodeJS.Signals): void {
  for (const s of SIGNALS) process.off(s, onSignal);
  signalsInstalled = false;
  // Sent from a child process, waited for here: the signal may come while a long computation holds
  // the thread (a long prompt's prefill), which turns the event loop only between stretches of
  // seconds, so requests sent from this process would wait for several of them.
  closeAllBeforeExit();
  process.kill(process.pid, signal);
}
