/**
 * The `empo2` command as a user runs it: `node bin/empo2.js ...` in a child process from the
 * repository root. The training runs use a tiny model (hidden 32, one layer, vocabulary 300) on one
 * built-in task with short episodes, so each takes a few seconds.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawn, type ChildProcess } from 'node:child_process';
import { request as httpRequest } from 'node:http';
import { mkdirSync, mkdtempSync, rmSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { initBackend } from '../src/policy/tfjs/backend.ts';
import { latestCheckpoint, loadTrainerState } from '../src/run/checkpoint.ts';
import { loadTrainingPolicy } from '../src/policy/tfjs/checkpoint.ts';
import { TINY_MODEL } from './support/tiny.ts';
import { TestEnvServer } from './support/http-env-server.ts';

const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const bin = join(repoRoot, 'bin', 'empo2.js');
const root = mkdtempSync(join(tmpdir(), 'empo2-cli-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

interface Finished {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

function start(args: string[]): { child: ChildProcess; done: Promise<Finished>; stdout: () => string } {
  const child = spawn(process.execPath, [bin, ...args], {
    cwd: repoRoot,
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, NO_COLOR: '1' },
  });
  let stdout = '';
  let stderr = '';
  child.stdout!.on('data', (d: Buffer) => (stdout += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
  const done = new Promise<Finished>((resolvePromise, reject) => {
    child.on('error', reject);
    child.on('close', (code, signal) => resolvePromise({ code, signal, stdout, stderr }));
  });
  return { child, done, stdout: () => stdout };
}

const run = (args: string[]) => start(args).done;

/** Tiny training settings as --set overrides. */
const TINY = [
  ...TINY_MODEL,
  'env.tasks=[fetch]',
  'env.eval_variations=1',
  'env.max_steps=4',
  'rollout.tasks_per_batch=1',
  'rollout.group_size=2',
  'train.eval_every=0',
  // Only the interrupt (or the end) writes a checkpoint, so the test sees the interrupt path save.
  'train.checkpoint_every=1000',
].flatMap((s) => ['--set', s]);

describe('empo2 CLI', () => {
  beforeAll(async () => {
    await initBackend();
  });

  it('train --help lists every option with its default', async () => {
    const r = await run(['train', '--help']);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('--resume');
    expect(r.stdout).toMatch(/rollout\.group_size\s+4\s/);
    expect(r.stdout).toMatch(/algo\.clip_high\s+0\.3\s/);
    expect(r.stdout).toMatch(/run_dir\s+"runs\/default"/);
  });

  it('an unknown config key exits non-zero naming the key and the likely option', async () => {
    const r = await run(['train', '--set', 'rollout.group_sise=3', '--run-dir', join(root, 'never')]);
    expect(r.code).not.toBe(0);
    expect(r.stderr).toContain('rollout.group_sise');
    expect(r.stderr).toContain('did you mean "group_size"');
    // A short message, not a stack trace.
    expect(r.stderr).not.toMatch(/\n\s+at /);
  });

  it('a value of the wrong type exits non-zero naming the key', async () => {
    const r = await run(['train', '--set', 'rollout.group_size=many', '--run-dir', join(root, 'never')]);
    expect(r.code).not.toBe(0);
    expect(r.stderr).toMatch(/rollout\.group_size: .*expected number/);
  });

  it('warmup refuses a bad --examples and a missing --out, naming them', async () => {
    const bad = await run(['warmup', '--examples', 'lots', '--out', join(root, 'never-model')]);
    expect(bad.code).not.toBe(0);
    expect(bad.stderr).toContain('--examples: expected a positive integer, got "lots"');
    expect(bad.stderr).not.toMatch(/\n\s+at /);
    const noOut = await run(['warmup']);
    expect(noOut.code).not.toBe(0);
    expect(noOut.stderr).toMatch(/--out/);
  });

  it('eval on a missing path exits non-zero with a clear message', async () => {
    const missing = join(root, 'no-such-run');
    const r = await run(['eval', missing]);
    expect(r.code).not.toBe(0);
    expect(r.stderr).toContain(`model directory not found: ${missing}`);
    expect(r.stderr).not.toMatch(/\n\s+at /);
  });

  it('--resume without a checkpoint exits non-zero saying so', async () => {
    const dir = join(root, 'nothing-here');
    const r = await run(['train', '--run-dir', dir, '--resume', ...TINY]);
    expect(r.code).not.toBe(0);
    expect(r.stderr).toContain(`--resume: no checkpoint in ${join(dir, 'checkpoints')}`);
  });

  it('train exits with status 1 when every episode of an iteration failed (an environment answering 100 KB observations)', async () => {
    const server = await TestEnvServer.start({ hugeBytes: 100_000, faults: (_m, path) => (path === '/reset' ? 'huge' : null) });
    try {
      const options = `{base_url: "${server.url}", tasks: [find], variations: {train: "0-9", test: "20-29"}, max_steps: 4}`;
      const r = await run([
        'train',
        '--run-dir',
        join(root, 'all-failed'),
        ...[
          ...TINY_MODEL,
          'env.name=http',
          `env.options=${options}`,
          'env.eval_variations=1',
          'rollout.tasks_per_batch=1',
          'rollout.group_size=2',
        ]
          .concat(['train.iterations=1', 'train.eval_every=0'])
          .flatMap((o) => ['--set', o]),
      ]);
      expect(r.code).toBe(1);
      expect(r.stdout + r.stderr).toMatch(
        /every episode failed \(environment or engine failures\) in iteration 1: nothing was learned there/,
      );
      expect(r.stderr).toMatch(/empo2: the run finished, but every episode of iteration 1 failed \(see above\); exiting with status 1/);
      expect(server.openInstances).toBe(0);
    } finally {
      await server.stop();
    }
  });

  it('Ctrl-C during training saves a loadable checkpoint and exits; --resume continues with the next iteration', async () => {
    const runDir = join(root, 'interrupted');
    // 50 iterations take ~10 s here: if the interrupt were ignored the run would end on its own and fail below.
    const proc = start(['train', '--run-dir', runDir, '--iterations', '50', ...TINY]);
    // Wait for the first iteration's progress line, then interrupt.
    await new Promise<void>((resolveWait, reject) => {
      const timer = setInterval(() => {
        if (/^iter 1\/50 \|/m.test(proc.stdout())) {
          clearInterval(timer);
          proc.child.kill('SIGINT');
          resolveWait();
        } else if (proc.child.exitCode !== null) {
          clearInterval(timer);
          reject(new Error(`train exited before its first iteration:\n${proc.stdout()}`));
        }
      }, 20);
    });
    const r = await proc.done;
    expect(r.stdout).toContain('interrupt: finishing this iteration, saving a checkpoint, then stopping');
    const stopped = /stopped at iteration (\d+); continue with: empo2 train --run-dir (.+) --resume/.exec(r.stdout);
    expect(stopped, r.stdout + r.stderr).not.toBeNull();
    expect(r.code).toBe(130);
    const stoppedAt = Number(stopped![1]);
    expect(stoppedAt).toBeGreaterThanOrEqual(1);
    expect(stoppedAt).toBeLessThan(50);

    // The checkpoint written on the way out is complete and loads.
    const dir = latestCheckpoint(runDir)!;
    expect(dir).toBe(join(runDir, 'checkpoints', `iter-${String(stoppedAt).padStart(6, '0')}`));
    expect(loadTrainerState(dir).iteration).toBe(stoppedAt);
    const loaded = loadTrainingPolicy(dir);
    expect(loaded.model.config.hidden_size).toBe(32);
    loaded.model.dispose();
    const trainLines = readFileSync(join(runDir, 'metrics.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l))
      .filter((m) => m.type === 'train');
    expect(trainLines.map((m) => m.iteration)).toEqual(Array.from({ length: stoppedAt }, (_, i) => i + 1));

    // Resume for one more iteration: the saved config.yaml supplies the tiny settings.
    const next = stoppedAt + 1;
    const resumed = await run(['train', '--run-dir', runDir, '--resume', '--iterations', String(next)]);
    expect(resumed.code, resumed.stderr).toBe(0);
    const lines = resumed.stdout.split('\n');
    expect(lines.find((l) => l.includes('resuming from'))).toContain(dir);
    const firstIter = lines.find((l) => l.startsWith('iter '));
    expect(firstIter).toMatch(new RegExp(`^iter ${next}/${next} \\|`));
    expect(resumed.stdout).toContain('Held-out evaluation');
    expect(latestCheckpoint(runDir)).toBe(join(runDir, 'checkpoints', `iter-${String(next).padStart(6, '0')}`));

    // `eval` on the run directory evaluates its latest checkpoint with the run's config.
    const evalJson = join(dir, 'final-eval.json');
    const evaluated = await run(['eval', runDir, '--json', evalJson]);
    expect(evaluated.code, evaluated.stderr).toBe(0);
    expect(evaluated.stdout).toContain('score (checkpoint)');
    expect(evaluated.stdout).toMatch(/\| fetch \| 1 \|/);
    // --json saves the same numbers with what was evaluated, so compare can tell a stale file.
    const record = JSON.parse(readFileSync(evalJson, 'utf8'));
    expect(record).toMatchObject({
      checkpoint: `iter-${String(next).padStart(6, '0')}`,
      eval_split: 'test',
      eval_variations: 1,
      episodes: 1,
    });
    expect(evaluated.stdout).toContain(`| **all** | 1 | ${record.mean_score.toFixed(1)} | ${(record.success_rate * 100).toFixed(1)}% |`);
    // ... and records its episodes beside the run's own.
    const recorded = join(runDir, 'trajectories', `eval-iter-${String(next).padStart(6, '0')}.jsonl`);
    expect(evaluated.stdout).toContain(`episodes recorded in ${recorded} (read them with: empo2 dashboard ${runDir})`);
    expect(
      readFileSync(recorded, 'utf8')
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l).task),
    ).toEqual(['fetch']);
  });

  it('dashboard serves the run on loopback until Ctrl-C, and refuses a missing folder and another interface', async () => {
    const runDir = join(root, 'interrupted');
    const proc = start(['dashboard', runDir, '--port', '0']);
    const url = await new Promise<string>((resolveUrl, reject) => {
      const timer = setInterval(() => {
        const m = /^dashboard at (http:\/\/127\.0\.0\.1:\d+) \(1 run; Ctrl-C to stop\)$/m.exec(proc.stdout());
        if (m) {
          clearInterval(timer);
          resolveUrl(m[1]);
        } else if (proc.child.exitCode !== null) {
          clearInterval(timer);
          reject(new Error(`dashboard exited: ${proc.stdout()}`));
        }
      }, 20);
    });
    const sources = (await (await fetch(`${url}/api/sources`)).json()) as { sources: { kind: string; path: string }[] };
    expect(sources.sources.map((s) => [s.kind, s.path])).toEqual([['run', runDir]]);
    proc.child.kill('SIGINT');
    expect((await proc.done).code).toBe(0);

    const missing = await run(['dashboard', join(root, 'no-such-run')]);
    expect([missing.code, missing.stderr.trim()]).toEqual([1, `empo2: ${join(root, 'no-such-run')} does not exist`]);
    const exposed = await run(['dashboard', runDir, '--host', '0.0.0.0']);
    expect(exposed.code).toBe(1);
    expect(exposed.stderr).toMatch(/^empo2: --host 0\.0\.0\.0: .*listens on loopback only/);
  });
});

describe('empo2 adapt --method reflexion', () => {
  const runDir = join(root, 'reflexion-run');

  beforeAll(async () => {
    const trained = await run(['train', '--run-dir', runDir, '--iterations', '1', ...TINY]);
    expect(trained.code, trained.stderr).toBe(0);
  });

  it("plays the trials on a run's latest checkpoint and saves the table next to it", async () => {
    const r = await run([
      'adapt',
      '--method',
      'reflexion',
      '--checkpoint',
      runDir,
      '--task',
      'clue',
      '--trials',
      '2',
      '--variations',
      '2',
      '--reflections',
      '1',
      '--reflection-max-tokens',
      '8',
    ]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain('| trial | mean score | success | variations played | plans per episode | plans written | memory entries |');
    const out = join(latestCheckpoint(runDir)!, 'reflexion-clue');
    expect(r.stdout).toContain(`(saved in ${out}: adapt.json, adapt.md)`);
    const saved = JSON.parse(readFileSync(join(out, 'adapt.json'), 'utf8'));
    expect(saved).toMatchObject({ method: 'reflexion', task: 'clue', reflexion: { window: 1, reflection_max_tokens: 8 } });
    expect(saved.trials).toHaveLength(2);
    // Every variation that failed got a plan, and only those are played again.
    const [first, second] = saved.trials;
    expect(first.reflections).toHaveLength(first.scores.filter((s: number) => s < 100).length);
    expect(second.played).toBe(first.reflections.length);
  });

  it('refuses to overwrite an unfinished adaptation, and --resume refuses one started with other options', async () => {
    const out = join(root, 'reflexion-unfinished');
    mkdirSync(out, { recursive: true });
    writeFileSync(join(out, 'adapt-state.json'), JSON.stringify({ identity: { method: 'tips' }, results: [{ trial: 1 }], carry: {} }));
    const args = [
      'adapt',
      '--method',
      'reflexion',
      '--checkpoint',
      runDir,
      '--task',
      'clue',
      '--trials',
      '2',
      '--variations',
      '2',
      '--out',
      out,
    ];
    const fresh = await run(args);
    expect(fresh.code).toBe(1);
    expect(fresh.stderr).toContain(`${join(out, 'adapt-state.json')} holds an unfinished adaptation; continue it with --resume`);
    const resumed = await run([...args, '--resume']);
    expect(resumed.code).toBe(1);
    expect(resumed.stderr).toMatch(/--resume: .*adapt-state\.json was written by an adaptation with another method, settings, task/);
    expect(resumed.stderr).not.toMatch(/\n\s+at /);
    expect(readFileSync(join(out, 'adapt-state.json'), 'utf8')).toContain('"method":"tips"');
  });

  it('refuses options of the other method, an unknown method and a bad count, naming them', async () => {
    const someDir = join(root, 'some-model');
    mkdirSync(someDir, { recursive: true });
    const cases: [string[], string][] = [
      [['--method', 'reflexions'], "option '--method <name>' argument 'reflexions' is invalid. Allowed choices are tips, reflexion."],
      [['--reflections', '2'], '--reflections is for --method reflexion (this is --method tips)'],
      [['--reflection-max-tokens', '64'], '--reflection-max-tokens is for --method reflexion (this is --method tips)'],
      [['--method', 'reflexion', '--fresh-memory'], '--fresh-memory is for --method tips'],
      [['--method', 'reflexion', '--reflections', 'three'], '--reflections must be a positive integer, got "three"'],
      [['--method', 'reflexion', '--reflection-max-tokens', '0'], '--reflection-max-tokens must be a positive integer, got "0"'],
    ];
    for (const [args, message] of cases) {
      const r = await run(['adapt', '--checkpoint', someDir, '--task', 'clue', ...args]);
      expect(r.code, args.join(' ')).not.toBe(0);
      expect(r.stderr).toContain(message);
      expect(r.stderr).not.toMatch(/\n\s+at /);
    }
  });
});

describe('empo2 webshop serve', () => {
  /** GET `path` with the Host header given (fetch would not send one of another name). */
  const getAs = (url: string, host: string) =>
    new Promise<{ status: number; text: string }>((resolveAnswer, reject) => {
      const req = httpRequest(url, { headers: { Host: host } }, (res) => {
        let text = '';
        res.on('data', (d: Buffer) => (text += d.toString()));
        res.on('end', () => resolveAnswer({ status: res.statusCode ?? 0, text }));
      });
      req.on('error', reject);
      req.end();
    });

  it('--allowed-host names the page may be opened under; another is refused, and the refusal names the flag', async () => {
    const proc = start(['webshop', 'serve', '--port', '0', '--allowed-host', 'shop.test']);
    try {
      const url = await new Promise<string>((resolveUrl, reject) => {
        const timer = setInterval(() => {
          const m = /^WebShop is open at (http:\/\/127\.0\.0\.1:\d+)/m.exec(proc.stdout());
          if (m) {
            clearInterval(timer);
            resolveUrl(m[1]);
          } else if (proc.child.exitCode !== null) {
            clearInterval(timer);
            reject(new Error(`webshop serve exited: ${proc.stdout()}`));
          }
        }, 20);
      });
      const port = new URL(url).port;
      expect((await getAs(url, `shop.test:${port}`)).status).toBe(200);
      const refused = await getAs(url, `other.test:${port}`);
      expect(refused.status).toBe(403);
      expect(refused.text).toMatch(/does not name this server .*or start it with --allowed-host NAME/);
    } finally {
      proc.child.kill('SIGINT');
      await proc.done;
    }
  });
});
