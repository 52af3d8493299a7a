/**
 * Ctrl-C during training. The first SIGINT asks the loop to finish the current iteration, save a
 * checkpoint and stop (an iteration long enough to be saved part-way stops at its next part-way save:
 * after the rollouts or an optimiser step, ./partial.ts); the second ends the process at once, leaving the last complete checkpoint as
 * it was (checkpoints are written under a temporary name and renamed when complete).
 *
 * Node runs a signal handler only when its event loop turns. With the in-process engine and the
 * built-in environment, a whole iteration is one chain of promises that resolve as microtasks, so
 * the loop would not turn until the iteration ends (tens of seconds). So `policyCalls` wraps an
 * engine so that the loop turns before every policy call (once per environment step in rollouts and
 * evaluations, once per optimiser step in updates): the first Ctrl-C is seen within one call.
 *
 * The second Ctrl-C must end a run whose engine holds the thread (TensorFlow.js in this process; one
 * optimiser step can take seconds) even in the middle of a call, where no handler can run. So after
 * the first, such a run gives SIGINT back its default action for good (the kernel then ends the
 * process on the next), and only then acknowledges the first: a Ctrl-C sent in answer to that line
 * always finds the default action. The switch is made once, after the loop has handed over every
 * signal read with the first (two presses during one long call: the second exits at once). Node
 * addresses each signal it catches to the listener of that moment and drops it if that listener is
 * removed before the loop hands it over: switching back around every call would drop a Ctrl-C that
 * came just before a call, and the run would finish its iteration and write its checkpoint. One
 * arriving within the microseconds between the loop reading the first and the switch is still lost,
 * like two the kernel merges into one. A process the kernel ends runs no clean-up: a half-written
 * checkpoint is removed by the next start (removeStaleTemporaryFiles), and child processes (the
 * ScienceWorld bridges) end when their stdin closes.
 *
 * A run whose calls wait on another process (the PyTorch worker, a server) keeps the listener: the
 * second Ctrl-C removes this process's half-written checkpoint and exits with 130, and
 * `process.on('exit')` hooks end the child processes.
 *
 * A program that trains through the library stops a run with an AbortSignal instead: its abort is a
 * first Ctrl-C (the same stops, the same saves). The library installs no SIGINT listener, since
 * the process and its signals are the program's; there is no second abort, so no exit either.
 *
 * Episodes a user's agent plays through the gateway (../gateway/) cannot be finished in this process:
 * the agent runs for as long as it likes. So the stop is also an AbortSignal (`stopping`), which the
 * player hands on to the agents at once: the rollouts or evaluation they were playing end there, with
 * nothing of them kept (RolloutsInterrupted, EvaluationInterrupted). A run whose agents are processes
 * (`empo2 train --agent`) keeps its SIGINT listener even where its engine holds the thread: those
 * processes run in groups of their own, which the kernel's default action would leave running, so a
 * second Ctrl-C must exit through `process.exit`, whose hooks kill them (and remove run.lock). It
 * waits for the policy call holding the thread, if any: one sampling or optimiser step.
 */
import type { PolicyEngine } from '../policy/types.ts';
import { turnEventLoop } from '../util/event-loop.ts';

/**
 * Thrown at the next policy call after a Ctrl-C during an evaluation outside the loop (the first,
 * before iteration 1, or the final one): nothing is left to save, so the run stops there.
 */
export class EvaluationInterrupted extends Error {
  constructor() {
    super('evaluation interrupted');
    this.name = 'EvaluationInterrupted';
  }
}

/**
 * Thrown by a player whose episodes stop at once on a stop (agents through the gateway) when a Ctrl-C
 * or abort came during an iteration's rollouts: the iteration is cut short, so nothing of it is kept.
 */
export class RolloutsInterrupted extends Error {
  constructor() {
    super('rollouts interrupted');
    this.name = 'RolloutsInterrupted';
  }
}

export interface InterruptOptions {
  /** Some policy calls of this run hold the thread (TensorFlow.js in this process). */
  holdsTheThread: boolean;
  /** Listen for Ctrl-C (SIGINT); default true. */
  sigint?: boolean;
  /** Aborting it stops the run as a first Ctrl-C does (one already aborted stops it at once). */
  signal?: AbortSignal;
}

export class InterruptHandling {
  private stop = false;
  private listening = true;
  private acknowledged = false;
  private disposed = false;
  /** An evaluation outside the loop is running: a Ctrl-C ends it at the next policy call. */
  private evaluating = false;
  /** Rollouts whose player stops at once (agents through the gateway) are running. */
  private cutting = false;
  private readonly stopped = new AbortController();

  /** `beforeExit` runs (synchronously) just before this handler exits on a second signal. */
  constructor(
    private readonly log: (line: string) => void,
    private readonly beforeExit: () => void,
    private readonly options: InterruptOptions,
  ) {
    if (options.sigint === false) this.listening = false;
    else process.on('SIGINT', this.onSigint);
    if (options.signal?.aborted) this.onAbort();
    else options.signal?.addEventListener('abort', this.onAbort, { once: true });
  }

  /** The first SIGINT arrived: stop after the current iteration, with a checkpoint. */
  get stopRequested(): boolean {
    return this.stop;
  }

  /** Aborted at the first Ctrl-C or abort: what plays episodes elsewhere (agents) stops them on it. */
  get stopping(): AbortSignal {
    return this.stopped.signal;
  }

  /** Called before every policy call: a pending switch to SIGINT's default action is made here. */
  beforePolicyCall(): void {
    if (!this.stop) return;
    this.useDefaultAction();
    if (this.evaluating) throw new EvaluationInterrupted();
  }

  /**
   * `work`, an evaluation before the first iteration or after the last, during which the first
   * Ctrl-C ends the evaluation (EvaluationInterrupted) instead of waiting for an iteration to end:
   * it would take as long as the evaluation itself, and `--resume` makes it again. A Ctrl-C that
   * came before it (during the last iteration) ends it at its first call.
   */
  async evaluation<T>(work: () => Promise<T>): Promise<T> {
    this.evaluating = true;
    try {
      return await work();
    } finally {
      this.evaluating = false;
    }
  }

  /**
   * `work`, rollouts whose player stops its episodes at once on `stopping` (RolloutsInterrupted): only
   * so that the acknowledgement says the iteration stops there rather than finishing.
   */
  async rollouts<T>(work: () => Promise<T>): Promise<T> {
    this.cutting = true;
    try {
      return await work();
    } finally {
      this.cutting = false;
    }
  }

  /**
   * The run's loop is over. Before any Ctrl-C the listener goes. After one, it stays for the rest of
   * the process (signal listeners do not keep Node alive): a second Ctrl-C while the run closes its
   * environments and engine still exits at once, and removing it could drop one already on its way.
   */
  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    this.options.signal?.removeEventListener('abort', this.onAbort);
    if (!this.stop) {
      this.removeListener();
      return;
    }
    this.acknowledge();
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
    if (!this.options.holdsTheThread || this.disposed) this.acknowledge();
    // Not here: a second SIGINT read in the same batch as this one is handed over after this returns.
    else setImmediate(() => this.useDefaultAction());
    this.stopped.abort(new Error('the run is stopping (Ctrl-C)'));
  };

  private readonly onAbort = () => {
    if (this.stop || this.disposed) return;
    this.stop = true;
    this.acknowledge('abort');
    this.stopped.abort(new Error('the run is stopping (its signal was aborted)'));
  };

  private useDefaultAction(): void {
    if (!this.options.holdsTheThread || !this.listening || this.disposed) return;
    this.removeListener(); // with no listener left, Node restores SIGINT's default action
    this.acknowledge();
  }

  private removeListener(): void {
    if (!this.listening) return;
    this.listening = false;
    process.off('SIGINT', this.onSigint);
  }

  private acknowledge(cause: 'sigint' | 'abort' = 'sigint'): void {
    if (this.acknowledged) return;
    this.acknowledged = true;
    if (this.cutting) {
      this.log(
        cause === 'abort'
          ? 'aborted: stopping the agents and this iteration, of which nothing is kept'
          : 'interrupt: stopping the agents and this iteration, of which nothing is kept (Ctrl-C again to exit at once)',
      );
      return;
    }
    if (cause === 'abort') {
      this.log(
        this.evaluating
          ? 'aborted: stopping this evaluation; the last checkpoint is complete and resuming makes the evaluation again'
          : 'aborted: finishing this iteration, saving a checkpoint, then stopping (one past train.partial_save_minutes stops at its next part-way save)',
      );
      return;
    }
    this.log(
      this.evaluating
        ? 'interrupt: stopping this evaluation; the last checkpoint is complete and --resume makes the evaluation again (Ctrl-C again to exit at once)'
        : 'interrupt: finishing this iteration, saving a checkpoint, then stopping (one past train.partial_save_minutes stops at its next part-way save; Ctrl-C again to exit at once)',
    );
  }
}

/**
 * `engine` with a turn of the event loop before each call. `interrupts` is read at each call: null
 * while no handler is installed.
 */
export function policyCalls(engine: PolicyEngine, interrupts: () => InterruptHandling | null): PolicyEngine {
  const guard = async <T>(call: () => Promise<T>): Promise<T> => {
    await turnEventLoop(); // a signal that arrived during the previous call is handled here
    interrupts()?.beforePolicyCall();
    return call();
  };
  return {
    tokenizer: engine.tokenizer,
    contextLength: engine.contextLength,
    supportsBranches: engine.supportsBranches,
    generate: (prompts, opts) => guard(() => engine.generate(prompts, opts)),
    logprobs: (batch, temperature) => guard(() => engine.logprobs(batch, temperature)),
    trainStep: (batch, objective, temperature, lr, resume) => guard(() => engine.trainStep(batch, objective, temperature, lr, resume)),
    save: (dir) => engine.save(dir),
    releaseCache: engine.releaseCache ? (keys) => engine.releaseCache!(keys) : undefined,
    prefillCounts: engine.prefillCounts ? () => engine.prefillCounts!() : undefined,
    setProgressListener: engine.setProgressListener ? (listener) => engine.setProgressListener!(listener) : undefined,
    dispose: () => engine.dispose(),
  };
}
