/**
 * A pool of K ScienceWorld envs, each owning one simulator process, for parallel rollouts.
 *
 * acquire() hands out an idle env (waiting for one if all K are busy), release() returns it.
 * A simulator that dies or hangs is replaced by its env (see env.ts), so the pool never
 * shrinks and a failed simulator costs one episode, not the run. close() shuts every
 * simulator down; envs still checked out are closed too, so their next call throws.
 */
import { ScienceWorldEnv, type ScienceWorldEnvOptions } from './env.ts';

export class ScienceWorldPool {
  readonly size: number;
  private readonly envs: ScienceWorldEnv[];
  private readonly idle: ScienceWorldEnv[];
  private readonly waiters: Array<{ resolve: (env: ScienceWorldEnv) => void; reject: (error: Error) => void }> = [];
  private readonly checkedOut = new Set<ScienceWorldEnv>();
  private closed = false;

  constructor(size: number, options: ScienceWorldEnvOptions = {}) {
    if (!Number.isInteger(size) || size < 1) {
      throw new Error(`ScienceWorldPool size must be a positive integer, got ${String(size)}`);
    }
    this.size = size;
    this.envs = Array.from({ length: size }, () => new ScienceWorldEnv(options));
    this.idle = [...this.envs];
  }

  /** Starts all K simulators in parallel, so the first episodes do not each wait for a JVM. */
  async start(): Promise<void> {
    this.assertOpen();
    await Promise.all(this.envs.map((env) => env.start()));
  }

  async acquire(): Promise<ScienceWorldEnv> {
    this.assertOpen();
    const env = this.idle.pop();
    if (env) {
      this.checkedOut.add(env);
      return env;
    }
    return new Promise((resolve, reject) => this.waiters.push({ resolve, reject }));
  }

  release(env: ScienceWorldEnv): void {
    if (!this.checkedOut.delete(env)) {
      throw new Error('ScienceWorldPool.release() got an env that this pool did not hand out, or that was already released');
    }
    if (this.closed) return;
    const waiter = this.waiters.shift();
    if (waiter) {
      this.checkedOut.add(env);
      waiter.resolve(env);
    } else {
      this.idle.push(env);
    }
  }

  /** Runs `work` with an env from the pool and always gives the env back. */
  async use<T>(work: (env: ScienceWorldEnv) => Promise<T>): Promise<T> {
    const env = await this.acquire();
    try {
      return await work(env);
    } finally {
      this.release(env);
    }
  }

  /** Simulators replaced so far across the pool (after dying or hanging). */
  get restarts(): number {
    return this.envs.reduce((sum, env) => sum + env.restarts, 0);
  }

  /** Process ids of every running simulator (bridge and JVM). */
  simulatorPids(): Array<{ bridge: number; java: number | undefined }> {
    return this.envs.flatMap((env) => (env.simulatorPids ? [env.simulatorPids] : []));
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    for (const waiter of this.waiters.splice(0)) waiter.reject(new Error('ScienceWorldPool was closed while waiting for an env'));
    await Promise.all(this.envs.map((env) => env.close()));
  }

  private assertOpen(): void {
    if (this.closed) throw new Error('ScienceWorldPool is closed');
  }
}
