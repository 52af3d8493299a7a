/**
 * How quickly `empo2 train` reacts to Ctrl-C: a real child process, real SIGINTs, in the middle of
 * an iteration. Prints, for each scenario, the seconds from a signal to what it should cause.
 *   one:  one SIGINT `--delay` s after the "iter 1/" line: time until the trainer says it will stop,
 *         and until it exits (after finishing the iteration and saving a checkpoint);
 *   two:  a second SIGINT 1 s after the first: time from the second until the process is gone.
 * Each scenario ends by checking that latest.json names a complete checkpoint and no temporary
 * checkpoint folder is left. Asserts nothing else.
 *   --blocked: instead, one iteration of `empo2 train` with the longest stretch in which its event
 *         loop could not turn (no signal handler can run then): the bound on the first latency.
 *
 *   npx tsx bench/interrupt-latency.ts [--delay 3] [--blocked] [--set key=value ...]   # default config otherwise
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

const args = process.argv.slice(2);
const delay = Number(args[args.indexOf('--delay') + 1] || 3);
const sets = args.flatMap((a, i) => (args[i - 1] === '--set' ? ['--set', a] : []));
const BIN = resolve(import.meta.dirname, '..', 'bin', 'empo2.js');

interface Outcome {
  acknowledged: number | null;
  exited: number;
  code: number | null;
  signal: string | null;
  checkpoint: string;
  leftovers: string[];
}

async function scenario(signals: 1 | 2): Promise<Outcome> {
  const runDir = mkdtempSync(join(tmpdir(), 'empo2-interrupt-'));
  const child = spawn(process.execPath, [BIN, 'train', '--run-dir', runDir, '--iterations', '5', ...sets], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  let buffer = '';
  let sentAt = 0;
  let acknowledged: number | null = null;
  const started = new Promise<void>((resolveStarted) => {
    child.stdout.on('data', (d: Buffer) => {
      buffer += d.toString('utf8');
      let nl: number;
      while ((nl = buffer.indexOf('\n')) >= 0) {
        const line = buffer.slice(0, nl);
        buffer = buffer.slice(nl + 1);
        console.log(`  | ${line.slice(0, 140)}`);
        if (/^iter 1\//.test(line)) resolveStarted();
        if (/^interrupt/.test(line) && acknowledged === null) acknowledged = (performance.now() - sentAt) / 1000;
      }
    });
  });
  const exited = new Promise<[number | null, string | null]>((r) => child.on('exit', (code, signal) => r([code, signal])));
  await started;
  await new Promise((r) => setTimeout(r, delay * 1000));
  sentAt = performance.now();
  child.kill('SIGINT');
  let lastSignal = sentAt;
  if (signals === 2) {
    await new Promise((r) => setTimeout(r, 1000));
    lastSignal = performance.now();
    child.kill('SIGINT');
  }
  const [code, signal] = await exited;
  const seconds = (performance.now() - lastSignal) / 1000;
  const root = join(runDir, 'checkpoints');
  const pointer = join(root, 'latest.json');
  const name = existsSync(pointer) ? (JSON.parse(readFileSync(pointer, 'utf8')) as { checkpoint: string }).checkpoint : null;
  const complete =
    name === null || (existsSync(join(root, name, 'trainer_state.json')) && existsSync(join(root, name, 'model.safetensors')));
  const leftovers = existsSync(root) ? readdirSync(root).filter((n) => n.includes('.tmp-')) : [];
  rmSync(runDir, { recursive: true, force: true });
  return { acknowledged, exited: seconds, code, signal, checkpoint: `${name ?? 'none yet'}${complete ? '' : ' (INCOMPLETE)'}`, leftovers };
}

if (args.includes('--blocked')) {
  // A module loaded before the CLI that times the gaps between turns of the event loop.
  const dir = mkdtempSync(join(tmpdir(), 'empo2-blocked-'));
  const monitor = join(dir, 'monitor.mjs');
  writeFileSync(
    monitor,
    `import { monitorEventLoopDelay } from 'node:perf_hooks';
const h = monitorEventLoopDelay({ resolution: 10 });
h.enable();
process.on('exit', () => process.stderr.write('longest stretch without an event-loop turn: ' + (h.max / 1e9).toFixed(2) + ' s (p99 ' + (h.percentile(99) / 1e9).toFixed(3) + ' s)\\n'));
`,
  );
  const t0 = performance.now();
  const child = spawn(
    process.execPath,
    [
      '--import',
      monitor,
      BIN,
      'train',
      '--run-dir',
      join(dir, 'run'),
      '--iterations',
      '1',
      '--set',
      'train.eval_every=0',
      '--set',
      'env.eval_variations=1',
      ...sets,
    ],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let err = '';
  child.stdout.on('data', (d: Buffer) =>
    d
      .toString('utf8')
      .split('\n')
      .filter((l) => /^iter /.test(l))
      .forEach((l) => console.log(`  | ${l.slice(0, 140)}`)),
  );
  child.stderr.on('data', (d: Buffer) => (err += d.toString('utf8')));
  await new Promise((r) => child.on('exit', r));
  console.log(
    `=> blocked: one iteration and two 6-episode evaluations in ${((performance.now() - t0) / 1000).toFixed(1)} s; ${err.trim().split('\n').at(-1)}`,
  );
  rmSync(dir, { recursive: true, force: true });
  process.exit(0);
}

for (const n of [1, 2] as const) {
  console.log(`scenario: ${n === 1 ? 'one SIGINT' : 'two SIGINTs 1 s apart'}, first ${delay} s after "iter 1/"`);
  const o = await scenario(n);
  console.log(
    `=> ${n === 1 ? 'one' : 'two'}: acknowledged after ${o.acknowledged?.toFixed(2) ?? 'never'} s; exited ${o.exited.toFixed(2)} s after the ${n === 1 ? 'signal' : 'second signal'} ` +
      `(code ${o.code}, signal ${o.signal}); latest checkpoint ${o.checkpoint}; temporary folders left: ${o.leftovers.length}`,
  );
}
