/**
 * Ctrl-C as a terminal sends it. The first makes the trainer finish the iteration, save a checkpoint
 * and exit with 130; a second exits at once, with the last complete checkpoint as it was. Checked by
 * order, never by a clock, so that a loaded machine cannot change the outcome: a signal is sent in
 * answer to a line the process printed, or while the test holds the process where it wants it.
 *   - test/support/interrupt-child.ts runs InterruptHandling around calls that hold the thread until
 *     the test writes a line to its stdin: a signal sent then lands inside a call by construction.
 *   - Real `empo2 train` children get SIGINT on their process group. Where a Ctrl-C must land in the
 *     middle of an iteration, the rollouts go through an `empo2 serve` that the test stopped
 *     (SIGSTOP) before the run started: the iteration cannot end until the test lets it. The one
 *     run without a server (an in-process iteration must see Ctrl-C at all) gets it as iteration 2
 *     starts; only a test process kept off the CPU for that whole iteration could miss it.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import pidtree from 'pidtree';
import { loadConfig } from '../config/load.ts';
import { environmentCorpus } from '../envs/index.ts';
import { pythonGate, REPO_ROOT } from '../../test/support/python.ts';
import { TINY_MODEL } from '../../test/support/tiny.ts';
import { loadTrainerState } from './trainer-state.ts';

const BIN = resolve(import.meta.dirname, '..', '..', 'bin', 'empo2.js');
const CHILD = join(REPO_ROOT, 'test', 'support', 'interrupt-child.ts');
const root = mkdtempSync(join(tmpdir(), 'empo2-interrupt-'));
/** Processes this file started, ended (if still there) when it is done, whatever failed. */
const started = new Set<ChildProcess>();
/**
 * Kills what is left, with its process group: the servers and trainers here run detached (their own
 * groups, so a Ctrl-C sent to one does not reach the others), so nothing else would end a server the
 * test had stopped (SIGSTOP) if the worker exits without running afterAll (a run cut short for time).
 */
function endStarted(): void {
  for (const c of started) {
    if (c.exitCode !== null || c.signalCode !== null) continue;
    try {
      process.kill(-c.pid!, 'SIGKILL');
    } catch {
      c.kill('SIGKILL');
    }
  }
}
process.once('exit', endStarted);
afterAll(() => {
  endStarted();
  rmSync(root, { recursive: true, force: true });
});

const ACK =
  'interrupt: finishing this iteration, saving a checkpoint, then stopping (one past train.partial_save_minutes stops at its next part-way save; Ctrl-C again to exit at once)';
const SECOND = 'second interrupt: exiting now (the last complete checkpoint is intact)';

/** Iterations of 8 episodes of up to 30 steps: ~240 policy calls each, seconds even on a fast machine. */
const RUN_SETTINGS = [
  'env.tasks=[fetch]',
  'env.eval_variations=1',
  'env.max_steps=30',
  'rollout.tasks_per_batch=2',
  'rollout.group_size=4',
  'train.checkpoint_every=1',
  'train.eval_every=0',
];
const SETTINGS = [...TINY_MODEL, ...RUN_SETTINGS];

interface Watched {
  child: ChildProcess;
  lines: string[];
  /** Resolves when a line matching `pattern` has been printed; rejects if the process exits first. */
  waitFor(pattern: RegExp): Promise<void>;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

function watch(child: ChildProcess): Watched {
  started.add(child);
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
  child.stdout?.on('data', take);
  child.stderr?.on('data', take);
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((r) =>
    child.on('exit', (code, signal) => r({ code, signal })),
  );
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
              throw new Error(`the process exited (${code ?? signal}) before printing ${pattern}:\n${lines.join('\n')}`);
            }),
          ]),
  };
}

interface Trainer extends Watched {
  /** Ctrl-C in a terminal: SIGINT to every process of the foreground group. */
  ctrlC(): void;
}

function startTrainer(runDir: string, o: { iterations?: number; settings?: string[]; flags?: string[] } = {}): Trainer {
  const args = [
    BIN,
    'train',
    '--run-dir',
    runDir,
    '--iterations',
    String(o.iterations ?? 6),
    ...(o.flags ?? []),
    ...(o.settings ?? SETTINGS).flatMap((s) => ['--set', s]),
  ];
  // Its own process group, as a shell gives a foreground job.
  const child = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'pipe'], detached: true });
  return { ...watch(child), ctrlC: () => process.kill(-child.pid!, 'SIGINT') };
}

interface Child extends Watched {
  /** A line on its stdin: the call that holds the thread (EMPO2_CALLS=stdin) returns. */
  release(): void;
  /** The end of its stdin: a process still there ends its loop, prints `finished` and exits with 0. */
  endInput(): void;
}

function startChild(env: Record<string, string>): Child {
  const child = spawn(process.execPath, ['--import', 'tsx', CHILD], {
    cwd: REPO_ROOT,
    stdio: ['pipe', 'pipe', 'inherit'],
    env: { ...process.env, ...env },
  });
  child.stdin!.on('error', () => {}); // EPIPE when it is already gone, as it should be
  return { ...watch(child), release: () => child.stdin!.write('\n'), endInput: () => child.stdin!.end() };
}

/**
 * Resolves once no SIGINT is pending for `pid`: the kernel has handed it over (to Node's handler,
 * which queues it for the event loop, or to the default action). A wait on a state, not a delay.
 */
async function sigintDelivered(pid: number): Promise<void> {
  const SIGINT_BIT = 1n << 1n;
  for (;;) {
    let status: string;
    try {
      status = readFileSync(`/proc/${pid}/status`, 'utf8');
    } catch {
      return; // gone
    }
    const pending = [...status.matchAll(/^(?:SigPnd|ShdPnd):\s*([0-9a-f]+)$/gm)].some((m) => (BigInt(`0x${m[1]}`) & SIGINT_BIT) !== 0n);
    if (!pending) return;
    await sleep(5);
  }
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

describe('InterruptHandling in a process whose policy calls hold the thread (test/support/interrupt-child.ts)', () => {
  it('a second Ctrl-C sent as soon as the first is acknowledged ends the process, every time (12 runs, calls of 1 ms)', async () => {
    // Before: the acknowledgement came before the listener was removed around the next call, and a
    // signal arriving in between was dropped with that listener: the process went on.
    const outcomes: string[] = [];
    for (let run = 1; run <= 12; run++) {
      const c = startChild({ EMPO2_CALLS: 'spin:1' });
      await c.waitFor(/^busy 3$/);
      c.child.kill('SIGINT');
      await c.waitFor(/^interrupt: /);
      c.child.kill('SIGINT');
      // When kill() returns, a process under SIGINT's default action is already being ended: it can
      // no longer see this. One that dropped the signal finishes normally.
      c.endInput();
      const { code, signal } = await c.exited;
      outcomes.push(signal ?? `exit ${code}${c.lines.includes('finished') ? ', finished normally' : ''}`);
    }
    expect(outcomes).toEqual(Array(12).fill('SIGINT'));
  }, 120_000);

  it('the first is acknowledged before the next call; a second one while a call holds the thread ends the process before that call returns', async () => {
    const c = startChild({ EMPO2_CALLS: 'stdin' });
    await c.waitFor(/^busy 1$/);
    c.child.kill('SIGINT');
    await sigintDelivered(c.child.pid!);
    c.release(); // call 1 returns; the loop turns before call 2
    await c.waitFor(/^busy 2$/);
    expect(c.lines.indexOf(ACK), c.lines.join('\n')).toBeGreaterThan(-1);
    expect(c.lines.indexOf(ACK)).toBeLessThan(c.lines.indexOf('busy 2'));
    c.child.kill('SIGINT'); // call 2 holds the thread: no handler can run now
    c.release(); // would let call 2 return
    c.endInput();
    const { code, signal } = await c.exited;
    expect({ code, signal }, c.lines.join('\n')).toEqual({ code: null, signal: 'SIGINT' });
    expect(c.lines).not.toContain('done 2');
  }, 60_000);

  it('two Ctrl-Cs during one call that holds the thread: the second is handed over too, and exits with 130 after the clean-up', async () => {
    const c = startChild({ EMPO2_CALLS: 'stdin' });
    await c.waitFor(/^busy 1$/);
    c.child.kill('SIGINT');
    await sigintDelivered(c.child.pid!);
    c.child.kill('SIGINT');
    await sigintDelivered(c.child.pid!);
    c.release(); // both reach the handler at the next turn of the loop, before call 2
    const { code } = await c.exited;
    expect(code, c.lines.join('\n')).toBe(130);
    expect(c.lines).toEqual(expect.arrayContaining([SECOND, 'cleanup']));
    expect(c.lines).not.toContain('busy 2');
  }, 60_000);

  it('calls that wait on another process: a second Ctrl-C exits with 130 after the clean-up, also after the loop is over', async () => {
    const c = startChild({ EMPO2_CALLS: 'wait:5', EMPO2_DISPOSE_WHEN_STOPPING: '1' });
    await c.waitFor(/^busy 1$/);
    c.child.kill('SIGINT');
    await c.waitFor(/^disposed$/);
    expect(c.lines).toContain(ACK);
    c.child.kill('SIGINT');
    const { code, signal } = await c.exited;
    expect({ code, signal }, c.lines.join('\n')).toEqual({ code: 130, signal: null });
    expect(c.lines).toEqual(expect.arrayContaining([SECOND, 'cleanup']));
  }, 60_000);
});

interface Serve {
  url: string;
  modelDir: string;
  /** SIGSTOP: every request it gets is held, unanswered, until `go`. */
  stop(): void;
  go(): void;
}

/** `empo2 serve` on a new tiny model, in its own process group (the trainers' Ctrl-C does not reach it). */
async function startServe(name: string): Promise<Serve> {
  const [{ initBackend }, { createEngine }] = await Promise.all([
    import('../policy/tfjs/backend.ts'),
    import('../policy/create-engine.ts'),
  ]);
  await initBackend();
  const modelDir = join(root, name);
  const cfg = loadConfig(null, [`run_dir=${join(root, `${name}-unused`)}`, 'seed=3', ...TINY_MODEL, 'env.tasks=[fetch]']);
  const { engine } = await createEngine(cfg, 'fresh', () => environmentCorpus(cfg.env));
  await engine.save(modelDir);
  engine.dispose();
  const child = spawn(process.execPath, [BIN, 'serve', modelDir, '--port', '0', '--served-model-name', 'tiny'], {
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
  });
  const served = watch(child);
  await served.waitFor(/^serving .* at http:\/\/\S+\/v1 /);
  const url = /at (http:\/\/\S+)\/v1 /.exec(served.lines.find((l) => l.startsWith('serving '))!)![1];
  return { url, modelDir, stop: () => process.kill(child.pid!, 'SIGSTOP'), go: () => process.kill(child.pid!, 'SIGCONT') };
}

/** A run on `serve`'s model whose rollouts it generates (not kept in step with the training: no matter here). */
const servedRun = (serve: Serve, extra: string[] = []) => [
  `model.path=${serve.modelDir}`,
  ...RUN_SETTINGS,
  `rollout.remote={base_url: "${serve.url}", model: tiny, sync: none, timeout_s: 600, retries: 0}`,
  ...extra,
];
describe('Ctrl-C during `empo2 train` (real process, real signals)', () => {
  it('the first stops after the current iteration with a checkpoint, and is seen while that iteration runs', async () => {
    const runDir = join(root, 'once');
    const t = startTrainer(runDir);
    // Sent at the start of iteration 2, whose ~240 policy calls follow: it is seen at the first.
    await t.waitFor(/^checkpoint .*iter-000001$/);
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

  it('during the first or the final evaluation, the first stops the evaluation; --resume makes the final one', async () => {
    // One episode at a time over 40 variations: about a thousand policy calls per evaluation.
    const settings = [...SETTINGS.filter((x) => !x.startsWith('env.eval_variations')), 'env.eval_variations=40', 'env.max_instances=1'];
    const runDir = join(root, 'evaluations');
    const before = startTrainer(runDir, { iterations: 1, settings });
    await before.waitFor(/^evaluating before training/);
    before.ctrlC();
    let { code } = await before.exited;
    let output = before.lines.join('\n');
    expect(code, output).toBe(130);
    expect(output).toContain('interrupt: stopping this evaluation');
    expect(output).toContain(`stopped before iteration 1, with no checkpoint; start again with: empo2 train --run-dir ${runDir}`);
    expect(existsSync(join(runDir, 'checkpoints', 'latest.json'))).toBe(false);

    const final = startTrainer(runDir, { iterations: 1, settings });
    await final.waitFor(/^final evaluation at iteration 1 /);
    final.ctrlC();
    ({ code } = await final.exited);
    output = final.lines.join('\n');
    expect(code, output).toBe(130);
    expect(output).toContain('stopped the evaluation at iteration 1; nothing of it was kept');
    expect(output).toContain(`stopped at iteration 1; continue with: empo2 train --run-dir ${runDir} --resume`);
    expectCompleteLatest(runDir, 1);
    expect(existsSync(join(runDir, 'eval.md'))).toBe(false);

    const resumed = startTrainer(runDir, { iterations: 1, settings, flags: ['--resume'] });
    ({ code } = await resumed.exited);
    output = resumed.lines.join('\n');
    expect(code, output).toBe(0);
    expect(existsSync(join(runDir, 'eval.md'))).toBe(true);
    const evals = readFileSync(join(runDir, 'metrics.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { type: string; iteration: number })
      .filter((m) => m.type === 'eval');
    expect(evals.map((e) => e.iteration)).toEqual([0, 1]);
  }, 240_000);

  it('a second exits at once, in the middle of the iteration, leaving the last complete checkpoint', async () => {
    const runDir = join(root, 'twice');
    const serve = await startServe('twice-model');
    const settings = servedRun(serve);
    const first = startTrainer(runDir, { iterations: 1, settings });
    expect((await first.exited).code, first.lines.join('\n')).toBe(0);
    expectCompleteLatest(runDir, 1);
    // No rollout step is answered from now on: iteration 2 cannot end before the test lets it.
    serve.stop();
    const t = startTrainer(runDir, { settings, flags: ['--resume'] });
    await t.waitFor(/^rollouts through /); // printed after the handler is installed
    t.ctrlC();
    await t.waitFor(/^interrupt: /);
    t.ctrlC();
    const { code, signal } = await t.exited;
    const output = t.lines.join('\n');
    // A run whose engine holds the thread (TensorFlow.js) leaves the second to SIGINT's default action.
    expect({ code, signal }, output).toEqual({ code: null, signal: 'SIGINT' });
    expect(indexOf(t.lines, /^iter 2\//), output).toBe(-1); // iteration 2 never finished
    expectCompleteLatest(runDir, 1);
  }, 240_000);
});
const torchGate = pythonGate(['torch', 'transformers']);

describe.skipIf(!torchGate.available)(`Ctrl-C with the PyTorch worker (${torchGate.label})`, () => {
  it("the worker does not get the terminal's Ctrl-C: the trainer finishes the iteration through it; a second Ctrl-C ends the worker with the trainer", async () => {
    const runDir = join(root, 'torch');
    const serve = await startServe('torch-model');
    // Each resumed run is held in its first iteration by the stopped server, for as long as the test needs.
    const settings = servedRun(serve, ['model.engine=torch', 'model.torch.device=cpu', 'model.torch.threads=1']);
    const zero = startTrainer(runDir, { iterations: 1, settings });
    expect((await zero.exited).code, zero.lines.join('\n')).toBe(0);

    // Interrupted once, in iteration 2.
    serve.stop();
    const first = startTrainer(runDir, { settings, flags: ['--resume'] });
    await first.waitFor(/^rollouts through /);
    const workers = await torchWorkers(first.child.pid!);
    expect(workers).toHaveLength(1);
    first.ctrlC();
    await first.waitFor(/^interrupt: /);
    serve.go();
    const { code } = await first.exited;
    let output = first.lines.join('\n');
    expect(code, output).toBe(130);
    expect(indexOf(first.lines, /^checkpoint .*iter-000002$/), output).toBeGreaterThan(indexOf(first.lines, /^interrupt: /));
    expectCompleteLatest(runDir, 2);
    await waitUntilGone(workers);

    // Interrupted twice, in iteration 3.
    serve.stop();
    const second = startTrainer(runDir, { settings, flags: ['--resume'] });
    await second.waitFor(/^rollouts through /);
    const resumedWorkers = await torchWorkers(second.child.pid!);
    expect(resumedWorkers).toHaveLength(1);
    second.ctrlC();
    await second.waitFor(/^interrupt: /);
    expect(resumedWorkers.filter(isAlive)).toEqual(resumedWorkers);
    second.ctrlC();
    const again = await second.exited;
    output = second.lines.join('\n');
    expect(again.code, output).toBe(130);
    expect(second.lines, output).toContain(SECOND);
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
