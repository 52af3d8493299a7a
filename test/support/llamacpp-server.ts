/**
 * For tests: llama-cpp-python's OpenAI-compatible server (`python -m llama_cpp.server`), a server this
 * project did not write, serving the SmolLM2-135M-Instruct GGUF that `npm run setup` downloads, from
 * the project's virtualenv (scripts/requirements-llamacpp.txt, installed by `npm run setup:test`).
 *
 * The gate behaves as the other venv-dependent tests do (./python.ts): without the package or the GGUF,
 * the suite fails in CI, where both are part of the set-up, and is skipped with the reason in its title
 * on a developer machine. The server gets a free loopback port and one thread; `stop()` ends it (SIGTERM,
 * then SIGKILL). It also ends itself when its stdin closes, which happens when the test process dies in
 * any way (a SIGKILLed vitest fork included), so none is left behind.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { it } from 'vitest';
import { REPO_ROOT, pythonGate, venvPython, type PythonGate } from './python.ts';

export const SMOLLM2_GGUF = join(REPO_ROOT, 'models', 'smollm2-135m-instruct', 'SmolLM2-135M-Instruct.Q4_1.gguf');
/** The name the server knows the model by (`--model_alias`; the server answers any name with its one model). */
export const LLAMACPP_MODEL = 'smollm2-135m-instruct';

/** Whether the server can be started here: llama-cpp-python's server in the venv, and the GGUF. */
export function llamaCppGate(): PythonGate {
  if (!existsSync(SMOLLM2_GGUF)) {
    const reason = `${SMOLLM2_GGUF} is absent: run 'npm run setup'`;
    if (process.env.CI)
      it('the SmolLM2 GGUF is installed (required in CI)', () => {
        throw new Error(`cannot run: ${reason}`);
      });
    else console.warn(`[llama.cpp] skipping: ${reason}`);
    return { available: false, label: `SKIPPED: ${reason}` };
  }
  // The server's own module: it imports fastapi, uvicorn and the rest of the [server] extra.
  return pythonGate(['llama_cpp.server.app']);
}

export interface LlamaCppServer {
  /** e.g. http://127.0.0.1:40123/v1 */
  baseURL: string;
  model: string;
  /** What the server printed (its log goes to stderr), for messages when a test fails. */
  output(): string;
  stop(): Promise<void>;
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
  });
}

/** `python -m llama_cpp.server ARGS`, plus a thread that ends the process once stdin closes (its parent is gone). */
const LAUNCHER = [
  'import os, runpy, sys, threading',
  'threading.Thread(target=lambda: (sys.stdin.read(), os._exit(0)), daemon=True).start()',
  "sys.argv = ['llama_cpp.server', *sys.argv[1:]]",
  "runpy.run_module('llama_cpp.server', run_name='__main__', alter_sys=True)",
].join('\n');

const running = new Set<ChildProcess>();
let exitHook = false;

/** Starts the server and resolves once it answers GET /v1/models; rejects with its output if it exits or is not up in time. */
export async function startLlamaCppServer(o: { nCtx?: number; threads?: number; readyTimeoutMs?: number } = {}): Promise<LlamaCppServer> {
  if (!exitHook) {
    exitHook = true;
    process.once('exit', () => {
      for (const child of running) child.kill('SIGKILL');
    });
  }
  const port = await freePort();
  const args = [
    '--model',
    SMOLLM2_GGUF,
    '--model_alias',
    LLAMACPP_MODEL,
    '--host',
    '127.0.0.1',
    '--port',
    String(port),
    '--n_threads',
    String(o.threads ?? 1),
    '--n_threads_batch',
    String(o.threads ?? 1),
    '--n_ctx',
    String(o.nCtx ?? 4096),
  ];
  const child = spawn(venvPython(), ['-c', LAUNCHER, ...args], {
    stdio: ['pipe', 'pipe', 'pipe'],
    env: { ...process.env, OMP_NUM_THREADS: '1' },
  });
  running.add(child);
  let log = '';
  const keep = (b: Buffer) => {
    log = (log + b.toString('utf8')).slice(-20_000);
  };
  child.stdout!.on('data', keep);
  child.stderr!.on('data', keep);
  const exited = new Promise<void>((resolve) =>
    child.once('exit', () => {
      running.delete(child);
      resolve();
    }),
  );
  const stop = async () => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    child.kill('SIGTERM');
    const killer = setTimeout(() => child.kill('SIGKILL'), 5000);
    await exited;
    clearTimeout(killer);
  };
  const baseURL = `http://127.0.0.1:${port}/v1`;
  const deadline = Date.now() + (o.readyTimeoutMs ?? 120_000);
  let gone = false;
  void exited.then(() => (gone = true));
  for (;;) {
    if (gone)
      throw new Error(
        `llama-cpp-python's server exited before it answered (${venvPython()} -m llama_cpp.server ${args.join(' ')}):\n${log.slice(-3000)}`,
      );
    try {
      const res = await fetch(`${baseURL}/models`, { signal: AbortSignal.timeout(2000) });
      if (res.ok) break;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) {
      await stop();
      throw new Error(`llama-cpp-python's server did not answer ${baseURL}/models in time:\n${log.slice(-3000)}`);
    }
    await new Promise((r) => setTimeout(r, 250));
  }
  return { baseURL, model: LLAMACPP_MODEL, output: () => log, stop };
}
