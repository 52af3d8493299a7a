/**
 * One ScienceWorld simulator: a Python bridge process (bridge.py) and the JVM it starts.
 *
 * The bridge is spawned as the leader of its own process group, and py4j starts the JVM
 * inside that group, so killing the group ends both at once, whatever state they are in
 * (a stopped or hung process included). Requests go out one at a time; each has a deadline,
 * and a missed deadline kills the group: a simulator that hangs once is not trusted again.
 */
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { createInterface } from 'node:readline';
import { BRIDGE_SCRIPT, SETUP_HINT, defaultPython } from './setup.ts';

export interface SimulatorOptions {
  /** Python interpreter with the `scienceworld` package (default: the project's .venv). */
  python?: string;
  /** How long the JVM may take to start and answer (ms). */
  startTimeoutMs?: number;
  /** Make the JVM's identity hash codes constant; see ScienceWorldEnvOptions.deterministic. */
  deterministic?: boolean;
  /** Extra JVM options, e.g. ['-Xmx2g'] to cap the heap. */
  jvmOptions?: string[];
}

/**
 * HotSpot's default identity hash codes depend on thread start-up timing, and the simulator
 * iterates hash sets of world objects, so e.g. when a circuit becomes powered can differ by a
 * tick between runs of the same actions. A constant identity hash makes those sets iterate in
 * insertion order, which is the same in every run, at the price of slower hash lookups.
 */
const DETERMINISTIC_JVM_OPTIONS = '-XX:+UnlockExperimentalVMOptions -XX:hashCode=2';

/** The simulator died, hung past its deadline, or could not start. */
export class SimulatorError extends Error {
  constructor(
    message: string,
    readonly kind: 'start' | 'died' | 'timeout' | 'closed',
  ) {
    super(message);
    this.name = 'SimulatorError';
  }
}

/** The simulator is healthy but rejected the request (bad task name, bad simplification...). */
export class SimulatorRequestError extends Error {
  constructor(
    message: string,
    readonly errorType: string,
  ) {
    super(message);
    this.name = 'SimulatorRequestError';
  }
}

interface Pending {
  id: number;
  op: string;
  resolve: (value: unknown) => void;
  reject: (error: Error) => void;
  timer: NodeJS.Timeout;
}

const STDERR_KEEP = 8_000;
const liveSimulators = new Set<Simulator>();
let exitHookInstalled = false;

/** A Node process that exits (even through an uncaught error) must not leave JVMs behind. */
function installExitHook(): void {
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  process.on('exit', () => {
    for (const simulator of liveSimulators) simulator.kill();
  });
}

export class Simulator {
  readonly pid: number;
  javaPid: number | undefined;
  scienceworldVersion = '';
  private readonly child: ChildProcessWithoutNullStreams;
  private readonly queue: Array<() => void> = [];
  private pending: Pending | undefined;
  private busy = false;
  private nextId = 1;
  private stderrTail = '';
  private exited = false;
  private exitDescription = '';
  private readonly exitPromise: Promise<void>;
  private readyWaiter: { resolve: () => void; reject: (error: Error) => void } | undefined;

  private constructor(python: string, deterministic: boolean, jvmOptions: string[]) {
    const env: NodeJS.ProcessEnv = { ...process.env, PYTHONUNBUFFERED: '1' };
    // The official API offers no JVM options, but py4j starts the JVM with the bridge's
    // environment, and every JVM reads JAVA_TOOL_OPTIONS.
    const extra = [...(deterministic ? [DETERMINISTIC_JVM_OPTIONS] : []), ...jvmOptions];
    if (extra.length > 0) env.JAVA_TOOL_OPTIONS = [process.env.JAVA_TOOL_OPTIONS, ...extra].filter(Boolean).join(' ');
    this.child = spawn(python, ['-u', BRIDGE_SCRIPT], {
      detached: true,
      stdio: ['pipe', 'pipe', 'pipe'],
      env,
    });
    if (this.child.pid === undefined) {
      // spawn reports a missing interpreter asynchronously through 'error'; pid is then unset.
      this.pid = -1;
    } else {
      this.pid = this.child.pid;
    }
    liveSimulators.add(this);
    installExitHook();

    let markExited: () => void = () => {};
    this.exitPromise = new Promise((resolve) => {
      markExited = resolve;
      this.child.once('exit', (code, signal) => {
        this.exited = true;
        this.exitDescription = signal ? `killed by ${signal}` : `exited with code ${code}`;
        liveSimulators.delete(this);
        // The JVM may outlive a bridge that crashed; it is in the same group, so end it too.
        this.killGroup();
        const error = new SimulatorError(`ScienceWorld bridge (pid ${this.pid}) ${this.exitDescription}${this.stderrSuffix()}`, 'died');
        this.readyWaiter?.reject(error);
        this.failPending(error);
        resolve();
      });
    });
    this.child.once('error', (error) => {
      if (this.child.pid === undefined) {
        // Never started, so no 'exit' event will follow.
        this.exited = true;
        this.exitDescription = `could not be started (${error.message})`;
        liveSimulators.delete(this);
        markExited();
      }
      const failure = new SimulatorError(`cannot start the ScienceWorld bridge with ${python}: ${error.message}; ${SETUP_HINT}`, 'start');
      this.readyWaiter?.reject(failure);
      this.failPending(failure);
    });
    this.child.stderr.setEncoding('utf8');
    this.child.stderr.on('data', (chunk: string) => {
      this.stderrTail = (this.stderrTail + chunk).slice(-STDERR_KEEP);
    });
    // Responses can be large (hundreds of valid actions); readline has no line-length limit.
    const lines = createInterface({ input: this.child.stdout, crlfDelay: Infinity });
    lines.on('line', (line) => this.onLine(line));
    // Writing to a bridge that just died raises EPIPE here; the exit handler reports it.
    this.child.stdin.on('error', () => {});
  }

  /** Starts a simulator and waits until its JVM answers. */
  static async start(options: SimulatorOptions = {}): Promise<Simulator> {
    const python = options.python ?? defaultPython();
    const timeoutMs = options.startTimeoutMs ?? 120_000;
    const simulator = new Simulator(python, options.deterministic ?? false, options.jvmOptions ?? []);
    try {
      await new Promise<void>((resolve, reject) => {
        const timer = setTimeout(() => {
          reject(new SimulatorError(`ScienceWorld simulator did not start within ${timeoutMs} ms${simulator.stderrSuffix()}`, 'timeout'));
        }, timeoutMs);
        simulator.readyWaiter = {
          resolve: () => {
            clearTimeout(timer);
            resolve();
          },
          reject: (error) => {
            clearTimeout(timer);
            reject(error);
          },
        };
      });
    } catch (error) {
      simulator.kill();
      await simulator.exitPromise.catch(() => {});
      throw error;
    } finally {
      simulator.readyWaiter = undefined;
    }
    return simulator;
  }

  get alive(): boolean {
    return !this.exited;
  }

  /**
   * Sends one request and waits for its answer. On a missed deadline or a lost JVM the whole
   * process group is killed and the promise rejects with SimulatorError; a request the
   * simulator refused rejects with SimulatorRequestError and leaves the simulator usable.
   */
  async call<T>(op: string, args: Record<string, unknown>, timeoutMs: number): Promise<T> {
    await this.takeTurn();
    try {
      if (this.exited) {
        throw new SimulatorError(`ScienceWorld bridge (pid ${this.pid}) ${this.exitDescription}${this.stderrSuffix()}`, 'died');
      }
      const id = this.nextId++;
      const answer = new Promise<unknown>((resolve, reject) => {
        const timer = setTimeout(() => {
          this.pending = undefined;
          this.kill();
          reject(
            new SimulatorError(
              `ScienceWorld simulator (pid ${this.pid}) did not answer '${op}' within ${timeoutMs} ms; it was killed`,
              'timeout',
            ),
          );
        }, timeoutMs);
        this.pending = { id, op, resolve, reject, timer };
      });
      this.child.stdin.write(JSON.stringify({ id, op, ...args }) + '\n');
      return (await answer) as T;
    } finally {
      this.releaseTurn();
    }
  }

  /** Asks the bridge to shut its JVM down, then makes sure the whole group is gone. */
  async close(graceMs = 5_000): Promise<void> {
    if (!this.exited) {
      try {
        await this.call('exit', {}, graceMs);
      } catch {
        // A bridge that cannot even say goodbye is killed below.
      }
      this.child.stdin.end();
      const grace = new Promise<'late'>((resolve) => setTimeout(() => resolve('late'), graceMs).unref());
      if ((await Promise.race([this.exitPromise.then(() => 'exited' as const), grace])) === 'late') this.kill();
    }
    await this.exitPromise;
    // The bridge may exit a moment before the JVM it asked to stop; end the group regardless.
    this.killGroup();
  }

  /** Ends the bridge and its JVM immediately. Safe to call at any time, more than once. */
  kill(): void {
    this.killGroup();
    if (!this.exited) {
      try {
        this.child.kill('SIGKILL');
      } catch {
        // Already gone.
      }
    }
  }

  /** Waits until the bridge process has exited. */
  waitForExit(): Promise<void> {
    return this.exitPromise;
  }

  private killGroup(): void {
    if (this.pid <= 0) return;
    try {
      process.kill(-this.pid, 'SIGKILL');
    } catch {
      // ESRCH: nothing left in the group.
    }
  }

  private onLine(line: string): void {
    let message: Record<string, unknown>;
    try {
      message = JSON.parse(line) as Record<string, unknown>;
    } catch {
      this.stderrTail = (this.stderrTail + '\n[stdout] ' + line).slice(-STDERR_KEEP);
      return;
    }
    if (message.event === 'ready') {
      this.javaPid = typeof message.javaPid === 'number' ? message.javaPid : undefined;
      this.scienceworldVersion = String(message.scienceworldVersion ?? '');
      this.readyWaiter?.resolve();
      return;
    }
    if (message.event === 'fatal') {
      this.readyWaiter?.reject(new SimulatorError(`ScienceWorld bridge could not start: ${String(message.error)}`, 'start'));
      return;
    }
    const pending = this.pending;
    if (!pending || message.id !== pending.id) return;
    this.pending = undefined;
    clearTimeout(pending.timer);
    if (message.ok === true) {
      pending.resolve(message.result);
    } else if (message.fatal === true) {
      this.kill();
      pending.reject(new SimulatorError(`ScienceWorld simulator failed during '${pending.op}': ${String(message.error)}`, 'died'));
    } else {
      pending.reject(new SimulatorRequestError(String(message.error), String(message.errorType ?? 'Error')));
    }
  }

  private failPending(error: Error): void {
    const pending = this.pending;
    if (!pending) return;
    this.pending = undefined;
    clearTimeout(pending.timer);
    pending.reject(error);
  }

  private takeTurn(): Promise<void> {
    if (!this.busy) {
      this.busy = true;
      return Promise.resolve();
    }
    return new Promise((resolve) => this.queue.push(resolve));
  }

  private releaseTurn(): void {
    const next = this.queue.shift();
    if (next) next();
    else this.busy = false;
  }

  private stderrSuffix(): string {
    const tail = this.stderrTail.trim();
    if (!tail) return '';
    const lines = tail.split('\n').slice(-6).join('\n');
    return `\n--- bridge stderr (last lines) ---\n${lines}`;
  }
}
