/**
 * Ctrl-C as a terminal sends it: SIGINT to the whole process group of a real `empo2 train` child,
 * in the middle of an iteration (half a second after iteration 1's checkpoint). The first makes the
 * trainer finish that iteration, save a checkpoint and exit with 130; a second exits at once, with
 * the last complete checkpoint as it was. "At once" is checked by order, not by a clock: the
 * iteration in progress must never log its line.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import pidtree from 'pidtree';
import { pythonGate, REPO_ROOT } from '../../test/support/python.ts';
import { TINY_MODEL } from '../../test/support/tiny.ts';
import { loadTrainerState } from './trainer-state.ts';

const BIN = resolve(import.meta.dirname, '..', '..', 'bin', 'empo2.js');
const root = mkdtempSync(join(tmpdir(), 'empo2-interrupt-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

/** Iterations of 8 episodes of up to 30 steps: ~240 policy calls each, seconds even on a fast machine. */
const SETTINGS = [...TINY_MODEL, 'env.tasks=[fetch]', 'env.eval_variations=1', 'env.max_steps=30', 'rollout.tasks_per_batch=2', 'rollout.group_size=4', 'train.checkpoint_every=1', 'train.eval_every=0'];

interface Trainer {
  child: ChildProcess;
  lines: string[];
  /** Resolves when a line matching `pattern` has been printed. */
  waitFor(pattern: RegExp): Promise<void>;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** Ctrl-C in a terminal: SIGINT to every process of the foreground group. */
  ctrlC(): void;
}

function startTrainer(runDir: string, extra: string[] = [], flags: string[] = []): Trainer {
  const args = [BIN, 'train', '--run-dir', runDir, '--iterations', '6', ...flags, ...[...SETTINGS, ...extra].flatMap((s) => ['--set', s])];
  // Its own process group, as a shell gives a foreground job.
  const child = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'pipe'], detached: true });
  const lines: string[] = [];
  const waiters: { pattern: RegExp; resolve: () => void }[] = [];
  let buffer = '';
  const take = (d: Buffer) => {
    buffer += d.toString('utf8');
    let nl: number;
    while ((nl = buffer.indexOf('\n')) >= 0) {
      const line = buffer.slice(0, nl);
      buffer = buffer.slice(nl + 1);
      lines.push(line);
      for (const w of waiters.filter((x) => x.pattern.test(line))) w.resolve();
    }
  };
  child.stdout!.on('data', take);
  child.stderr!.on('data', take);
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((r) => child.on('exit', (code, signal) => r({ code, signal })));
  return {
    child,
    lines,
    exited,
    waitFor: (pattern) =>
      lines.some((l) => pattern.test(l))
        ? Promise.resolve()
        : Promise.race([
            new Promise<void>((r) => waiters.push({ pattern, resolve: r })),
            exited.then(({ code, signal }) => {
              throw new Error(`the trainer exited (${code ?? signal}) before printing ${pattern}:\n${lines.join('\n')}`);
            }),
          ]),
    ctrlC: () => process.kill(-child.pid!, 'SIGINT'),
  };
}

const indexOf = (lines: string[], pattern: RegExp) => lines.findIndex((l) => pattern.test(l));
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function expectCompleteLatest(runDir: string, iteration: number): void {
  const checkpoints = join(runDir, 'checkpoints');
  const name = (JSON.parse(readFileSync(join(checkpoints, 'latest.json'), 'utf8')) as { checkpoint: string }).checkpoint;
  expect(name).toBe(`iter-${String(iteration).padStart(6, '0')}`);
  expect(loadTrainerState(join(checkpoints, name)).iteration).toBe(iteration);
  expect(existsSync(join(checkpoints, name, 'model.safetensors'))).toBe(true);
  expect(readdirSync(checkpoints).filter((n) => n.includes('.tmp-'))).toEqual([]);
}

describe('Ctrl-C during `empo2 train` (real process, real signals)', () => {
  it('the first stops after the current iteration with a checkpoint, and is seen while that iteration runs', async () => {
    const runDir = join(root, 'once');
    const t = startTrainer(runDir);
    await t.waitFor(/^checkpoint .*iter-000001$/);
    await sleep(500);
    t.ctrlC();
    const { code } = await t.exited;
    const output = t.lines.join('\n');
    expect(code, output).toBe(130);
    const acknowledged = indexOf(t.lines, /^interrupt: finishing this iteration, saving a checkpoint, then stopping/);
    const iteration2 = indexOf(t.lines, /^iter 2\/6 \|/);
    expect(acknowledged, output).toBeGreaterThan(-1);
    // Seen during iteration 2, not when it ended.
    expect(acknowledged, output).toBeLessThan(iteration2);
    expect(indexOf(t.lines, /^checkpoint .*iter-000002$/)).toBeGreaterThan(iteration2);
    expect(indexOf(t.lines, /^iter 3\//)).toBe(-1);
    expect(output).toContain(`stopped at iteration 2; continue with: empo2 train --run-dir ${runDir} --resume`);
    expectCompleteLatest(runDir, 2);
  }, 180_000);

  it('a second exits at once, in the middle of the iteration, leaving the last complete checkpoint', async () => {
    const runDir = join(root, 'twice');
    const t = startTrainer(runDir);
    await t.waitFor(/^checkpoint .*iter-000001$/);
    await sleep(500);
    t.ctrlC();
    await t.waitFor(/^interrupt: /);
    t.ctrlC();
    const { code, signal } = await t.exited;
    const output = t.lines.join('\n');
    // Between policy calls the handler exits (130); inside one, SIGINT's default action does.
    if (signal === null) {
      expect(code, output).toBe(130);
      expect(output).toContain('second interrupt: exiting now (the last complete checkpoint is intact)');
    } else expect(signal, output).toBe('SIGINT');
    expect(indexOf(t.lines, /^iter 2\//), output).toBe(-1); // iteration 2 never finished
    expectCompleteLatest(runDir, 1);
  }, 180_000);

  it('a second one in the middle of a policy call that holds the thread for 10 s ends the process at once', async () => {
    const child = spawn(process.execPath, ['--import', 'tsx', join(REPO_ROOT, 'test', 'support', 'interrupt-child.ts')], { cwd: REPO_ROOT, stdio: ['ignore', 'pipe', 'inherit'], env: { ...process.env, EMPO2_BUSY_MS: '10000' } });
    const lines: string[] = [];
    const seen = (pattern: RegExp) =>
      new Promise<void>((r) => {
        const check = () => (lines.some((l) => pattern.test(l)) ? r() : setTimeout(check, 20));
        check();
      });
    child.stdout!.on('data', (d: Buffer) => lines.push(...d.toString('utf8').split('\n').filter(Boolean)));
    const exited = new Promise<NodeJS.Signals | number | null>((r) => child.on('exit', (code, signal) => r(signal ?? code)));
    await seen(/^busy 1$/);
    child.kill('SIGINT'); // seen when call 1 returns
    await seen(/^busy 2$/);
    expect(lines).toContain('interrupt: finishing this iteration, saving a checkpoint, then stopping (Ctrl-C again to exit at once)');
    const sent = performance.now();
    child.kill('SIGINT');
    expect(await exited).toBe('SIGINT');
    expect(performance.now() - sent).toBeLessThan(5000); // not the 10 s the call holds the thread
    expect(lines).not.toContain('done 2');
  }, 60_000);
});

const torchGate = pythonGate(['torch', 'transformers']);

describe.skipIf(!torchGate.available)(`Ctrl-C with the PyTorch worker (${torchGate.label})`, () => {
  it("the worker does not get the terminal's Ctrl-C: the trainer finishes the iteration through it; a second Ctrl-C ends the worker with the trainer", async () => {
    const runDir = join(root, 'torch');
    const torch = ['model.engine=torch', 'model.torch.device=cpu', 'model.torch.threads=1'];
    const first = startTrainer(runDir, torch);
    await first.waitFor(/^checkpoint .*iter-000001$/);
    const workers = await torchWorkers(first.child.pid!);
    expect(workers).toHaveLength(1);
    await sleep(500);
    first.ctrlC();
    const { code } = await first.exited;
    let output = first.lines.join('\n');
    expect(code, output).toBe(130);
    expect(indexOf(first.lines, /^checkpoint .*iter-000002$/), output).toBeGreaterThan(indexOf(first.lines, /^interrupt: /));
    expectCompleteLatest(runDir, 2);
    await waitUntilGone(workers);

    // Resumed; interrupted twice in iteration 3.
    const second = startTrainer(runDir, torch, ['--resume']);
    await second.waitFor(/^env builtin: .*resuming from/);
    const resumedWorkers = await torchWorkers(second.child.pid!);
    expect(resumedWorkers).toHaveLength(1);
    await sleep(500);
    second.ctrlC();
    await second.waitFor(/^interrupt: /);
    expect(resumedWorkers.filter(isAlive)).toEqual(resumedWorkers);
    second.ctrlC();
    const again = await second.exited;
    output = second.lines.join('\n');
    expect(again.code, output).toBe(130);
    expect(indexOf(second.lines, /^iter 3\//), output).toBe(-1);
    expectCompleteLatest(runDir, 2);
    await waitUntilGone(resumedWorkers);
  }, 300_000);
});

async function torchWorkers(trainerPid: number): Promise<number[]> {
  return (await pidtree(trainerPid)).filter((pid) => commandLine(pid).includes('workers/torch/worker.py'));
}

async function waitUntilGone(pids: number[]): Promise<void> {
  for (let i = 0; i < 100 && pids.some(isAlive); i++) await sleep(100);
  expect(pids.filter(isAlive)).toEqual([]);
}

function commandLine(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').replace(/\0/g, ' ');
  } catch {
    return '';
  }
}

/** Running, and not a zombie waiting to be reaped (a container's init may never reap it). */
function isAlive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2)[0] !== 'Z';
  } catch {
    return false;
  }
}
