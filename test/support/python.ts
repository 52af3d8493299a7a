/**
 * Tests that compare against PyTorch / transformers / sentence-transformers / PEFT run Python from
 * the project's virtualenv (created by `npm run setup:test`, see scripts/requirements-torch.txt).
 * Without it those tests fail in CI (the set-up is part of CI) and are skipped, with the reason
 * printed, on a developer machine.
 */
import { spawn, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { it } from 'vitest';

export const REPO_ROOT = resolve(import.meta.dirname, '..', '..');

export function venvPython(): string {
  return process.env.EMPO2_PYTHON ?? join(process.env.EMPO2_VENV ?? join(REPO_ROOT, '.venv'), 'bin', 'python');
}

export interface PythonGate {
  available: boolean;
  /** Title suffix that shows, in the test report, why the suite was skipped. */
  label: string;
}

const cache = new Map<string, string | null>();

/** Checks that the venv's Python can import `modules`; returns null when it can, else the reason. */
function missing(modules: readonly string[]): string | null {
  const key = modules.join(',');
  if (cache.has(key)) return cache.get(key)!;
  const python = venvPython();
  let reason: string | null = null;
  if (!existsSync(python)) reason = `no Python at ${python}: run 'npm run setup:test'`;
  else {
    const r = spawnSync(python, ['-c', `import ${modules.join(', ')}`], { encoding: 'utf8', timeout: 120_000 });
    if (r.status !== 0)
      reason = `${python} cannot import ${modules.join(', ')} (${(r.stderr || '').trim().split('\n').pop()}): run 'npm run setup:test'`;
  }
  cache.set(key, reason);
  return reason;
}

export function pythonGate(modules: readonly string[]): PythonGate {
  const reason = missing(modules);
  if (reason === null) return { available: true, label: `python: ${modules.join(', ')}` };
  if (process.env.CI) {
    it(`Python modules ${modules.join(', ')} are installed (required in CI)`, () => {
      throw new Error(`cannot run: ${reason}`);
    });
  } else {
    console.warn(`[python] skipping: ${reason}`);
  }
  return { available: false, label: `SKIPPED: ${reason}` };
}

/**
 * Runs a Python script file with arguments; rejects with its stderr tail when it fails. Asynchronous
 * on purpose: a synchronous child blocks the test worker's event loop, and vitest's worker reports
 * "Timeout calling onTaskUpdate" when its RPC goes unanswered for 60 s, which a reference script
 * importing torch can take on a loaded machine.
 */
export function runPython(script: string, args: readonly string[], timeoutMs = 300_000): Promise<string> {
  return new Promise((resolvePromise, reject) => {
    const child = spawn(venvPython(), [script, ...args], { stdio: ['ignore', 'pipe', 'pipe'], timeout: timeoutMs });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    child.stdout.on('data', (b: Buffer) => out.push(b));
    child.stderr.on('data', (b: Buffer) => err.push(b));
    child.on('error', reject);
    child.on('close', (code, signal) => {
      const stderr = Buffer.concat(err).toString('utf8');
      if (code !== 0)
        reject(
          new Error(`python ${script} failed (exit ${code}${signal ? `, ${signal}` : ''}):\n${stderr.split('\n').slice(-30).join('\n')}`),
        );
      else resolvePromise(Buffer.concat(out).toString('utf8'));
    });
  });
}
