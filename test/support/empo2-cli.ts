/** The `empo2` command as a user runs it: `node bin/empo2.js ...` in a child process from the repository root. */
import { spawn } from 'node:child_process';
import { join, resolve } from 'node:path';

const REPO_ROOT = resolve(import.meta.dirname, '..', '..');

export interface Finished {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs `empo2 <args>` to its end, with its output collected. */
export function runEmpo2(args: readonly string[]): Promise<Finished> {
  return new Promise((done, fail) => {
    const child = spawn(process.execPath, [join(REPO_ROOT, 'bin', 'empo2.js'), ...args], {
      cwd: REPO_ROOT,
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, NO_COLOR: '1' },
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.on('error', fail);
    child.on('close', (code) => done({ code, stdout, stderr }));
  });
}
