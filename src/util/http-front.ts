/**
 * An HTTP front for a server whose thread blocks: TensorFlow.js computes synchronously, so while the
 * trainer samples, updates or writes a checkpoint, a server on the main thread answers nothing for
 * seconds, and its keep-alive timer, firing late, resets connections clients had already sent a
 * request on. The front runs in a worker thread (./http-front-worker.mjs): it owns the public socket,
 * answers `GET /health` at once from the state the main thread last posted, and forwards every other
 * request to the real server, which listens on loopback only; a request that arrives during a block
 * waits for its answer. A client that hangs up closes its forwarded request, so the server still sees
 * the `close` it cancels work on. Every forwarded request carries `x-empo2-received-at`, when the front
 * received it (ms since the epoch; one a client sent is replaced): the gateway does not count a call's wait
 * here against its agent's time (../gateway/agent-clock.ts). The gateway and `empo2 serve` run behind one.
 */
import type { AddressInfo } from 'node:net';
import { Worker } from 'node:worker_threads';

export interface HttpFrontOptions {
  host: string;
  /** 0 picks a free port. */
  port: number;
  /** Where the real server listens (loopback). */
  upstream: { host: string; port: number };
  /** What `GET /health` answers besides `"status": "ok"`. */
  health: Record<string, unknown>;
  /** How long an idle kept-alive client connection stays open (default 75 s, nginx's). */
  keepAliveMs?: number;
  /** How long `close()` lets answers already on their way finish before it cuts their connections (default 2 s). */
  drainMs?: number;
  /** Told when the front's thread fails after it started (its socket is closed then). */
  onError?: (e: Error) => void;
}

export interface HttpFront {
  address: AddressInfo;
  /** Replaces what `GET /health` answers. */
  setHealth(health: Record<string, unknown>): void;
  close(): Promise<void>;
}

type FromWorker = { type: 'listening'; address: AddressInfo } | { type: 'error'; message: string; code?: string } | { type: 'closed' };

/** Starts the front listening on `o.host`:`o.port`; a failure to bind rejects as `listen` would. */
export async function startHttpFront(o: HttpFrontOptions): Promise<HttpFront> {
  const worker = new Worker(new URL('./http-front-worker.mjs', import.meta.url), {
    workerData: {
      host: o.host,
      port: o.port,
      upstream: o.upstream,
      health: o.health,
      keepAliveMs: o.keepAliveMs ?? 75_000,
      drainMs: o.drainMs ?? 2000,
    },
  });
  const address = await new Promise<AddressInfo>((resolve, reject) => {
    const onExit = (code: number) => reject(new Error(`the HTTP front's thread exited (code ${code}) before it listened`));
    worker.once('error', reject);
    worker.once('exit', onExit);
    worker.once('message', (m: FromWorker) => {
      worker.off('error', reject);
      worker.off('exit', onExit);
      if (m.type === 'listening') return resolve(m.address);
      void worker.terminate();
      const e = Object.assign(new Error(m.type === 'error' ? m.message : 'the HTTP front closed before it listened'), {
        code: m.type === 'error' ? m.code : undefined,
      });
      reject(e);
    });
  });
  worker.on('error', (e) => o.onError?.(e));
  let closing: Promise<void> | null = null;
  return {
    address,
    setHealth: (health) => worker.postMessage({ type: 'health', value: health }),
    close: () =>
      (closing ??= new Promise<void>((resolve) => {
        worker.once('message', () => void worker.terminate().then(() => resolve()));
        worker.once('exit', () => resolve());
        worker.postMessage({ type: 'close' });
      })),
  };
}
