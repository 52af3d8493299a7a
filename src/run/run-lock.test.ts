import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { LOCK_FILE, RunFolderInUse, RunLock } from './run-lock.ts';

const fresh = () => mkdtempSync(join(tmpdir(), 'empo2-lock-'));
const lockOf = (pid: number, host = hostname()) => JSON.stringify({ pid, host, started: '2026-11-25T10:00:00.000Z' });
/** The pid of a process that has exited (pids are not reused this soon on Linux). */
const deadPid = () => spawnSync(process.execPath, ['-e', '0']).pid!;

describe('RunLock', () => {
  it('is exclusive: a second acquire names the holder; release lets the next one in', () => {
    const dir = fresh();
    const first = RunLock.acquire(dir, () => {});
    expect(JSON.parse(readFileSync(join(dir, LOCK_FILE), 'utf8'))).toMatchObject({ pid: process.pid, host: hostname() });
    expect(() => RunLock.acquire(dir, () => {})).toThrow(RunFolderInUse);
    expect(() => RunLock.acquire(dir, () => {})).toThrow(`${dir} is in use by this process`);
    first.release();
    expect(existsSync(join(dir, LOCK_FILE))).toBe(false);
    first.release(); // idempotent
    RunLock.acquire(dir, () => {}).release();
  });

  it('refuses a folder held by another live process, naming its pid', async () => {
    const dir = fresh();
    const other = spawn(process.execPath, ['-e', 'setTimeout(() => {}, 60000)']);
    try {
      writeFileSync(join(dir, LOCK_FILE), lockOf(other.pid!));
      expect(() => RunLock.acquire(dir, () => {})).toThrow(
        `${dir} is in use by pid ${other.pid} since 2026-11-25T10:00:00.000Z: one trainer per run folder`,
      );
      expect(JSON.parse(readFileSync(join(dir, LOCK_FILE), 'utf8')).pid).toBe(other.pid); // the holder's lock is untouched
    } finally {
      other.kill();
    }
  });

  it('takes over the lock of a process that no longer runs, and says so', () => {
    const dir = fresh();
    const pid = deadPid();
    writeFileSync(join(dir, LOCK_FILE), lockOf(pid));
    const lines: string[] = [];
    const lock = RunLock.acquire(dir, (l) => lines.push(l));
    expect(lines).toEqual([
      `${join(dir, LOCK_FILE)}: taking over the lock of pid ${pid} (since 2026-11-25T10:00:00.000Z), which no longer runs`,
    ]);
    expect(JSON.parse(readFileSync(join(dir, LOCK_FILE), 'utf8')).pid).toBe(process.pid);
    lock.release();
  });

  it('refuses a lock from another host (it cannot check that pid) and a file it did not write, saying what to do', () => {
    const dir = fresh();
    const path = join(dir, LOCK_FILE);
    writeFileSync(path, lockOf(deadPid(), 'other-machine'));
    expect(() => RunLock.acquire(dir, () => {})).toThrow(`${dir} is in use by pid`);
    expect(() => RunLock.acquire(dir, () => {})).toThrow(
      `on host other-machine (since 2026-11-25T10:00:00.000Z); this host cannot check that process, so if it no longer runs, delete ${path}`,
    );
    writeFileSync(path, '');
    expect(() => RunLock.acquire(dir, () => {})).toThrow(
      `${path} exists but is not a lock this program wrote; if no trainer is using ${dir}, delete ${path}`,
    );
  });

  it('release leaves a lock that another process has taken since', () => {
    const dir = fresh();
    const lock = RunLock.acquire(dir, () => {});
    writeFileSync(join(dir, LOCK_FILE), lockOf(1));
    lock.release();
    expect(JSON.parse(readFileSync(join(dir, LOCK_FILE), 'utf8')).pid).toBe(1);
  });

  it('a process that exits without releasing leaves no lock behind', () => {
    const dir = fresh();
    const script = `import { RunLock } from ${JSON.stringify(join(import.meta.dirname, 'run-lock.ts'))}; RunLock.acquire(${JSON.stringify(dir)}, () => {}); process.exit(3);`;
    const r = spawnSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], { encoding: 'utf8' });
    expect(r.stderr).toBe('');
    expect(r.status).toBe(3);
    expect(existsSync(join(dir, LOCK_FILE))).toBe(false);
  });
});
