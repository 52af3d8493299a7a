/**
 * One trainer per run folder. Two `empo2 train` processes on the same run_dir would interleave their
 * metrics lines and overwrite each other's checkpoints; the second one is refused with the first's pid.
 *
 * The lock is a file created exclusively (O_EXCL) holding the owner's pid, host and start time. A
 * lock left by a process that no longer runs (killed with SIGKILL, machine rebooted) is taken over when
 * its host is this one; a lock from another host (a shared filesystem) cannot be checked, so it is
 * refused with what to do.
 */
import { readFileSync, unlinkSync, writeFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';

export const LOCK_FILE = 'run.lock';

interface LockOwner {
  pid: number;
  host: string;
  started: string;
}

export class RunFolderInUse extends Error {}

export class RunLock {
  private released = false;
  private readonly onExit = () => this.release();

  private constructor(readonly path: string) {
    process.on('exit', this.onExit); // a crash that still runs exit handlers leaves no stale lock
  }

  /** Takes the lock of `runDir` or throws RunFolderInUse naming its holder. `log` hears of a stale lock taken over. */
  static acquire(runDir: string, log: (line: string) => void): RunLock {
    const path = join(runDir, LOCK_FILE);
    const me: LockOwner = { pid: process.pid, host: hostname(), started: new Date().toISOString() };
    for (let attempt = 0; attempt < 2; attempt++) {
      try {
        writeFileSync(path, JSON.stringify(me) + '\n', { flag: 'wx' });
        return new RunLock(path);
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
      }
      const owner = readOwner(path);
      if (owner === 'gone') continue; // released between our attempt and the read
      if (owner === null) {
        throw new RunFolderInUse(
          `${path} exists but is not a lock this program wrote; if no trainer is using ${runDir}, delete ${path} and start again`,
        );
      }
      if (owner.host !== me.host) {
        throw new RunFolderInUse(
          `${runDir} is in use by pid ${owner.pid} on host ${owner.host} (since ${owner.started}); this host cannot check that process, so if it no longer runs, delete ${path} and start again`,
        );
      }
      if (isRunning(owner.pid)) {
        const who = owner.pid === process.pid ? 'this process (an earlier run in it was not closed)' : `pid ${owner.pid}`;
        throw new RunFolderInUse(
          `${runDir} is in use by ${who} since ${owner.started}: one trainer per run folder (stop it first, or choose another run_dir)`,
        );
      }
      log(`${path}: taking over the lock of pid ${owner.pid} (since ${owner.started}), which no longer runs`);
      unlinkSync(path);
    }
    throw new RunFolderInUse(
      `${path}: another process took the lock while this one was replacing a stale lock; is a second trainer starting on ${runDir}?`,
    );
  }

  /** Removes the lock file if it is still this process's (idempotent). */
  release(): void {
    if (this.released) return;
    this.released = true;
    process.off('exit', this.onExit);
    const owner = readOwner(this.path);
    if (owner !== 'gone' && owner !== null && owner.pid === process.pid && owner.host === hostname()) unlinkSync(this.path);
  }
}

function readOwner(path: string): LockOwner | null | 'gone' {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return 'gone';
    throw e;
  }
  try {
    const v = JSON.parse(text) as Partial<LockOwner>;
    return Number.isInteger(v.pid) && typeof v.host === 'string' && typeof v.started === 'string' ? (v as LockOwner) : null;
  } catch {
    return null;
  }
}

/** Whether a process with this pid exists (EPERM: it exists but belongs to another user). */
function isRunning(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}
