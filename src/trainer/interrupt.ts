/**
 * Ctrl-C during training. The first SIGINT asks the loop to finish the current iteration, save a
 * checkpoint and stop; the second ends the process at once, leaving the last complete checkpoint as
 * it was (checkpoints are written under a temporary name and renamed when complete).
 *
 * Node runs a signal handler only when its event loop turns. With the in-process engine and the
 * built-in environment, a whole iteration is one chain of promises that resolve as microtasks, so
 * the loop would not turn until the iteration ends (tens of seconds). Two measures:
 *   - `policyCalls` wraps an engine so that the loop turns before every policy call (once per
 *     environment step in rollouts and evaluations, once per optimiser step in updates): the first
 *     Ctrl-C is seen within one call;
 *   - once a stop is requested, a call into an engine that blocks the thread (TensorFlow.js in this
 *     process; one optimiser step can take seconds) runs with SIGINT's default action, so a second
 *     Ctrl-C ends the process even in the middle of it. Between calls, and during calls that wait on
 *     another process (the PyTorch worker, a server), the handler exits with code 130 itself, after
 *     removing a half-written checkpoint; `process.on('exit')` hooks end child processes.
 */
import type { PolicyEngine } from '../policy/types.ts';
import { turnEventLoop } from '../util/event-loop.ts';

export class InterruptHandling {
  private stop = false;
  private disposed = false;

  /** `beforeExit` runs (synchronously) just before the exit on the second signal. */
  constructor(
    private readonly log: (line: string) => void,
    private readonly beforeExit: () => void,
  ) {
    process.on('SIGINT', this.onSigint);
  }

  /** The first SIGINT arrived: stop after the current iteration, with a checkpoint. */
  get stopRequested(): boolean {
    return this.stop;
  }

  dispose(): void {
    this.disposed = true;
    process.off('SIGINT', this.onSigint);
  }

  /** Runs a call that holds the thread; after the first SIGINT, with SIGINT's default action. */
  async blocking<T>(call: () => Promise<T>): Promise<T> {
    if (!this.stop || this.disposed) return call();
    // With no listener left, Node gives SIGINT back its default action: the kernel ends the process.
    process.off('SIGINT', this.onSigint);
    try {
      return await call();
    } finally {
      if (!this.disposed) process.on('SIGINT', this.onSigint);
    }
  }

  private readonly onSigint = () => {
    if (this.stop) {
      this.log('second interrupt: exiting now (the last complete checkpoint is intact)');
      try {
        this.beforeExit();
      } finally {
        process.exit(130);
      }
    }
    this.stop = true;
    this.log('interrupt: finishing this iteration, saving a checkpoint, then stopping (Ctrl-C again to exit at once)');
  };
}

/**
 * `engine` with a turn of the event loop before each call. `blocking`: the engine's calls hold the
 * thread (TensorFlow.js in this process), so after a first Ctrl-C they run under
 * `interrupts().blocking`. `interrupts` is read at each call: null while no handler is installed.
 */
export function policyCalls(engine: PolicyEngine, blocking: boolean, interrupts: () => InterruptHandling | null): PolicyEngine {
  const guard = async <T>(call: () => Promise<T>): Promise<T> => {
    await turnEventLoop(); // a signal that arrived during the previous call is handled here
    const handling = interrupts();
    return blocking && handling ? handling.blocking(call) : call();
  };
  return {
    tokenizer: engine.tokenizer,
    generate: (prompts, opts) => guard(() => engine.generate(prompts, opts)),
    logprobs: (batch, temperature) => guard(() => engine.logprobs(batch, temperature)),
    trainStep: (batch, objective, temperature, lr) => guard(() => engine.trainStep(batch, objective, temperature, lr)),
    save: (dir) => engine.save(dir),
    releaseCache: engine.releaseCache ? (keys) => engine.releaseCache!(keys) : undefined,
    prefillCounts: engine.prefillCounts ? () => engine.prefillCounts!() : undefined,
    dispose: () => engine.dispose(),
  };
}
