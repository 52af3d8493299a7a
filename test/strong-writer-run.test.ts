/**
 * results/strong-writer/run.sh's own logic, with a stub trainer in bin/empo2.js's place
 * (test/support/stub-trainer.mjs) and the real stand-in writer and report.ts: the writer is started before
 * the runs and answers them, and is stopped at the end; a SIGTERM stops the trainer at its next save (one
 * SIGINT passed on) and leaves no process behind; the next run.sh resumes that run with --resume; each job's
 * small files reach the archive without weights or trajectories; finished work is skipped, also when only the
 * archive holds it; log lines carry timestamps.
 */
import { describe, expect, it } from 'vitest';
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const REPO = join(import.meta.dirname, '..');
const SCRIPT = join(REPO, 'results', 'strong-writer', 'run.sh');
const STUB = join(REPO, 'test', 'support', 'stub-trainer.mjs');

function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const s = createServer();
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as { port: number };
      s.close(() => resolve(port));
    });
  });
}

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

const answers = (port: number) =>
  fetch(`http://127.0.0.1:${port}/v1/models`).then(
    () => true,
    () => false,
  );

async function until(what: string, ok: () => boolean, ms = 60_000) {
  const t0 = Date.now();
  while (!ok()) {
    if (Date.now() - t0 > ms) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

function start(env: Record<string, string>): { child: ChildProcess; done: Promise<{ code: number | null; out: string }> } {
  const child = spawn('bash', [SCRIPT], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (out += d.toString()));
  const done = new Promise<{ code: number | null; out: string }>((resolve) => child.on('exit', (code) => resolve({ code, out })));
  return { child, done };
}

/** The files under `dir`, as paths relative to it. */
const files = (dir: string): string[] =>
  existsSync(dir) ? (readdirSync(dir, { recursive: true }) as string[]).filter((f) => statSync(join(dir, f)).isFile()) : [];

describe('results/strong-writer/run.sh', () => {
  it('runs, stops on SIGTERM, resumes, archives the small files and skips finished work, with the writer up only while it runs', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'strong-writer-run-'));
    const port = await freePort();
    const env = {
      STUDY: REPO,
      OUT: join(dir, 'out'),
      ARCHIVE: join(dir, 'archive'),
      PORT: String(port),
      SEEDS: '0 1',
      EMPO2: STUB,
      STUB_WRITER: `http://127.0.0.1:${port}/v1`,
      STUB_ITERS: '8',
      STUB_ITER_MS: '700',
    };
    const run0 = join(dir, 'out', 'empo2', 'seed0');
    try {
      // First: stopped by SIGTERM during seed 0's training.
      const first = start(env);
      await until('seed 0 to train a few iterations', () => existsSync(join(run0, 'checkpoints', 'iter-000002')));
      const trainer = Number(readFileSync(join(run0, 'pid'), 'utf8'));
      expect(await answers(port)).toBe(true);
      first.child.kill('SIGTERM');
      const r1 = await first.done;
      expect(r1.out).toMatch(/\[strong-writer \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ main\] asked to stop/);
      expect(r1.out).toContain('seed 0 stopped on request');
      expect(r1.code).toBe(130);
      expect(alive(trainer)).toBe(false);
      expect(await answers(port)).toBe(false);
      expect(r1.out).toMatch(/stand-in writer \(pid \d+\) stopped/);
      const calls0 = readFileSync(join(run0, 'calls.log'), 'utf8');
      expect(calls0).toMatch(/^train writer=ok\nstopped at \d\n$/);
      expect(existsSync(join(dir, 'out', 'empo2', 'seed1'))).toBe(false);
      // What is archived after the stop: small files, no weights, no trajectories.
      const archived0 = files(join(dir, 'archive', 'empo2', 'seed0'));
      expect(archived0).toContain('metrics.jsonl');
      expect(archived0).toContain('external-cache.jsonl');
      expect(archived0).toContain(join('checkpoints', 'iter-000002', 'trainer_state.json'));
      expect(archived0.filter((f) => /adapter|trajectories|memory\.json/.test(f))).toEqual([]);

      // Second: resumes seed 0, then runs seed 1; each evaluated at iter-000006 and summarised.
      const second = await start(env).done;
      expect(second.code, second.out).toBe(0);
      expect(second.out).toContain('train seed 0 --resume');
      expect(second.out).toContain('evaluate seed 0 iter-000006 on 34 variations per task');
      expect(second.out).toContain('seed 1 done');
      expect(readFileSync(join(run0, 'calls.log'), 'utf8')).toMatch(/^train writer=ok\nstopped at \d\ntrain --resume writer=ok\neval /);
      const metrics0 = readFileSync(join(run0, 'metrics.jsonl'), 'utf8').trim().split('\n');
      expect(metrics0.map((l) => JSON.parse(l).iteration)).toEqual([1, 2, 3, 4, 5, 6, 7, 8]);
      for (const seed of [0, 1]) {
        const a = join(dir, 'archive', 'empo2', `seed${seed}`);
        const got = files(a);
        for (const f of ['eval.md', 'config.yaml', 'metrics.jsonl', 'tip-following.json', join('checkpoint-evals', 'iter-000006.json')])
          expect(got, `seed ${seed}: ${f}`).toContain(f);
        // The final memory.json (the tips as stored) is kept; no other checkpoint's, no weights, no trajectories.
        expect(got.filter((f) => /memory\.json/.test(f))).toEqual([join('checkpoints', 'iter-000008', 'memory.json')]);
        expect(got.filter((f) => /adapter|trajectories/.test(f))).toEqual([]);
        const tips = JSON.parse(readFileSync(join(a, 'tip-following.json'), 'utf8')).iterations;
        expect(tips).toHaveLength(8);
        expect(tips[0]).toEqual({
          iteration: 1,
          episodes: 1,
          memory_episodes: 1,
          memory_steps: 3,
          tipped_steps: 2,
          named_steps: 2,
          followed_steps: 1,
        });
      }
      expect(await answers(port)).toBe(false);

      // Third, with the run folders gone (a lost machine): everything is in the archive, nothing runs.
      rmSync(join(dir, 'out', 'empo2'), { recursive: true });
      const third = await start(env).done;
      expect(third.code, third.out).toBe(0);
      expect(third.out).toContain('seed 0: finished in the archive');
      expect(third.out).toContain('seed 1: finished in the archive');
      expect(third.out).not.toContain('train seed');
      expect(await answers(port)).toBe(false);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 240_000);
});
