/**
 * Same runs, same files: the check that a refactor keeps behaviour. It plays a fixed set of tiny runs
 * with the `empo2` command line of one tree (a git revision or a checkout), then compares every file two
 * such sets wrote, with wall-clock fields masked and the weights compared byte for byte.
 *
 *   npx tsx scripts/same-runs.ts run <revision|checkout> <out>     play the set into <out> (a revision is exported there first)
 *   npx tsx scripts/same-runs.ts compare <outA> <outB>             list what differs; exit status 1 when anything does
 *   npx tsx scripts/same-runs.ts both <revA> <revB> <out>          run both into <out>/a and <out>/b, then compare
 *
 * The set: GRPO; EMPO² with a mode drawn per iteration, tips on- and off-policy both occurring; EMPO² with
 * a mode per task group and the decoupled ratio; GiGPO; a run stopped after 2 iterations and resumed to
 * 4; a run stopped inside an iteration saved part-way (deterministically, after its first optimiser
 * step) and resumed; one stopped there by SIGINT through the command line and resumed (only its final
 * folder is compared: where the signal lands varies); a tip warm-up with rehearsal; EMPO² on the PyTorch
 * worker (the repository's .venv); then `eval` (with and
 * without memory), `adapt` (tips and Reflexion), `memory show` and `compare` of those runs.
 * What each command printed is compared too (stdout and stderr apart), with durations and rates masked.
 */
import { spawn, spawnSync } from 'node:child_process';
import {
  cpSync,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  realpathSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { join, relative, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { TINY_RUN } from '../test/support/tiny.ts';

const REPO = resolve(import.meta.dirname, '..');

/** test/support/tiny.ts TINY_RUN, plus a checkpoint every iteration (all kept) and an evaluation every 2. */
const TINY = [...TINY_RUN, 'train.checkpoint_every=1', 'train.keep_checkpoints=10', 'train.eval_every=2'];
const EMPO2_TASK = ['algo.name=empo2', 'algo.p=0.5', 'algo.mode_draw=task', 'algo.minibatches=2', 'algo.epochs=2'];

type Step =
  | { name: string; args: string[]; snapshot?: string; skipLogs?: boolean }
  | { name: string; stopPartWay: { runDir: string; iteration: number; save: number; sets: string[] }; snapshot: string }
  | { name: string; sigintOn: RegExp; args: string[] }
  | { name: string; file: string; text: string };

const train = (dir: string, ...sets: string[]) => ['train', '--run-dir', dir, ...[...TINY, ...sets].flatMap((s) => ['--set', s])];
const sets = (...s: string[]) => s.flatMap((x) => ['--set', x]);

const STEPS: Step[] = [
  { name: 'grpo', args: train('grpo', 'train.iterations=4') },
  { name: 'empo2', args: train('empo2', 'algo.name=empo2', 'algo.p=1', 'algo.q=0.5', 'train.iterations=4') },
  { name: 'empo2-task', args: train('empo2-task', ...EMPO2_TASK, 'experimental.off_policy_ratio=decoupled', 'train.iterations=3') },
  { name: 'gigpo', args: train('gigpo', 'algo.name=gigpo', 'train.iterations=3') },
  { name: 'resume-1', args: train('resume', ...EMPO2_TASK, 'train.iterations=2'), snapshot: 'resume' },
  { name: 'resume-2', args: ['train', '--run-dir', 'resume', '--resume', ...sets('train.iterations=4')] },
  {
    name: 'partway-1',
    stopPartWay: {
      runDir: 'partway',
      iteration: 2,
      save: 2,
      sets: [...TINY, ...EMPO2_TASK, 'train.iterations=3', 'train.partial_save_minutes=0'],
    },
    snapshot: 'partway',
  },
  { name: 'partway-2', args: ['train', '--run-dir', 'partway', '--resume'] },
  {
    name: 'sigint-1',
    sigintOn: /^iter 2: saved part-way .*\(rollouts done\)$/,
    args: train('sigint', ...EMPO2_TASK, 'train.iterations=3', 'train.partial_save_minutes=0.000001'),
  },
  { name: 'sigint-2', args: ['train', '--run-dir', 'sigint', '--resume'], skipLogs: true },
  {
    name: 'warmup-run',
    args: train(
      'warmup-run',
      'algo.name=empo2',
      'algo.p=0.5',
      'experimental.tip_warmup_examples=64',
      'experimental.tip_warmup_epochs=1',
      'experimental.tip_rehearsal=4',
      'train.iterations=2',
    ),
  },
  {
    name: 'torch',
    args: train('torch', 'model.engine=torch', 'model.torch.threads=1', 'algo.name=empo2', 'algo.p=1', 'algo.q=0.5', 'train.iterations=2'),
  },
  { name: 'eval', args: ['eval', 'empo2', '--json', 'eval-empo2.json'] },
  {
    name: 'eval-memory',
    args: ['eval', 'empo2', '--json', 'eval-memory.json', '--trajectories', 'eval-memory.jsonl', ...sets('train.eval_with_memory=true')],
  },
  {
    name: 'adapt',
    args: ['adapt', '--checkpoint', 'empo2', '--task', 'fetch', '--trials', '2', '--variations', '2', '--out', 'adapt-fetch'],
  },
  {
    name: 'adapt-reflexion',
    args: [
      'adapt',
      '--checkpoint',
      'grpo',
      '--task',
      'clue',
      '--method',
      'reflexion',
      '--trials',
      '2',
      '--variations',
      '2',
      '--out',
      'reflexion-clue',
    ],
  },
  { name: 'memory-show', args: ['memory', 'show', 'empo2', '--limit', '3'] },
  { name: 'compare-grpo', file: 'grpo.yaml', text: 'algo:\n  name: grpo' },
  { name: 'compare-empo2', file: 'empo2.yaml', text: 'algo:\n  name: empo2\n  p: 0.5' },
  {
    name: 'compare',
    args: [
      'compare',
      ...['-c', 'grpo.yaml', '-c', 'empo2.yaml', '--seeds', '0,1', '--out', 'cmp', '--final-eval', '1'],
      ...sets(...TINY.filter((s) => !s.startsWith('seed=')), 'train.iterations=2'),
    ],
  },
];

/** The tree to run: a checkout as it is, or a revision exported into `<out>/tree` with this repository's node_modules and .venv. */
function treeOf(what: string, out: string): string {
  if (existsSync(join(what, 'bin', 'empo2.js'))) return resolve(what);
  const tree = join(out, 'tree');
  rmSync(tree, { recursive: true, force: true });
  mkdirSync(tree, { recursive: true });
  const archive = spawnSync('git', ['-C', REPO, 'archive', '--format=tar', what], { maxBuffer: 1 << 30 });
  if (archive.status !== 0) throw new Error(`git archive ${what}: ${archive.stderr.toString()}`);
  const untar = spawnSync('tar', ['-x', '-C', tree], { input: archive.stdout });
  if (untar.status !== 0) throw new Error(`tar: ${untar.stderr.toString()}`);
  symlinkSync(realpathSync(join(REPO, 'node_modules')), join(tree, 'node_modules'));
  if (existsSync(join(REPO, '.venv'))) symlinkSync(realpathSync(join(REPO, '.venv')), join(tree, '.venv'));
  return tree;
}

async function play(what: string, outArg: string): Promise<void> {
  const out = resolve(outArg);
  const tree = treeOf(what, out);
  const runs = join(out, 'runs');
  const logs = join(out, 'logs');
  rmSync(runs, { recursive: true, force: true });
  rmSync(logs, { recursive: true, force: true });
  mkdirSync(runs, { recursive: true });
  mkdirSync(logs, { recursive: true });
  const env = { ...process.env, OMP_NUM_THREADS: '1', FORCE_COLOR: '0' };
  for (const step of STEPS) {
    const t0 = performance.now();
    let code: number | null;
    if ('file' in step) {
      writeFileSync(join(runs, step.file), step.text + '\n');
      continue;
    } else if ('stopPartWay' in step) {
      const s = step.stopPartWay;
      const args = [
        join(REPO, 'node_modules', '.bin', 'tsx'),
        import.meta.filename,
        'stop-part-way',
        tree,
        s.runDir,
        String(s.iteration),
        String(s.save),
        ...s.sets,
      ];
      code = await capture(args, runs, env, join(logs, step.name));
    } else {
      const args = [join(tree, 'bin', 'empo2.js'), ...step.args];
      code = await capture(args, runs, env, join(logs, step.name), 'sigintOn' in step ? step.sigintOn : undefined);
      if (('skipLogs' in step && step.skipLogs) || 'sigintOn' in step)
        for (const f of ['stdout', 'stderr']) rmSync(join(logs, `${step.name}.${f}`), { force: true });
    }
    writeFileSync(join(logs, `${step.name}.code`), `${code}\n`);
    if ('snapshot' in step && step.snapshot) cpSync(join(runs, step.snapshot), join(runs, `${step.snapshot}.stopped`), { recursive: true });
    console.log(`${step.name}: exit ${code}, ${((performance.now() - t0) / 1000).toFixed(1)} s`);
  }
}

/** Runs `node args` in `cwd`, its stdout and stderr into `<base>.stdout` / `.stderr`; with `sigintOn`, sends SIGINT once a stdout line matches. */
function capture(args: string[], cwd: string, env: NodeJS.ProcessEnv, base: string, sigintOn?: RegExp): Promise<number | null> {
  const child = spawn(process.execPath, args, { cwd, env, stdio: ['ignore', 'pipe', 'pipe'] });
  const text = { stdout: '', stderr: '' };
  let sent = false;
  child.stdout.on('data', (d: Buffer) => {
    text.stdout += d.toString('utf8');
    if (sigintOn && !sent && text.stdout.split('\n').some((l) => sigintOn.test(l))) {
      sent = true;
      child.kill('SIGINT');
    }
  });
  child.stderr.on('data', (d: Buffer) => (text.stderr += d.toString('utf8')));
  return new Promise((done) =>
    child.on('close', (code) => {
      writeFileSync(`${base}.stdout`, text.stdout);
      writeFileSync(`${base}.stderr`, text.stderr);
      done(code);
    }),
  );
}

/** `train` stopped by an exception at the `save`-th part-way save of `iteration`, as src/trainer/empo2.test.ts stops it. */
async function stopPartWay(tree: string, runDir: string, iteration: number, save: number, settings: string[]): Promise<void> {
  // Deep paths on purpose: `tree` is any revision, older ones included, which have no public entry; and the
  // part-way stop needs the trainer's onPartialSave, which the public train() does not offer.
  const { loadConfig } = await import(pathToFileURL(join(tree, 'src', 'config', 'load.ts')).href);
  const { train } = await import(pathToFileURL(join(tree, 'src', 'trainer', 'trainer.ts')).href);
  const cfg = loadConfig(null, [...settings, `run_dir=${runDir}`]);
  const name = `partial-iter-${String(iteration).padStart(6, '0')}`;
  let saves = 0;
  const onPartialSave = (dir: string) => {
    if (dir.endsWith(name) && ++saves === save) throw new Error(`stopped at part-way save ${save} of iteration ${iteration}`);
  };
  try {
    await train(cfg, { resume: false, log: (l: string) => console.log(l), onPartialSave });
    throw new Error('the run was not stopped');
  } catch (e) {
    console.log((e as Error).message);
  }
}

// ---- comparison ----

/** Fields that hold wall-clock times or rates, masked before comparing. */
const TIMING_KEY = /^(time|seconds)$|_seconds$|Seconds$|_per_s$|_at$|^memory_share_of_rollout$/;

function maskJson(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(maskJson);
  if (value && typeof value === 'object')
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, TIMING_KEY.test(k) ? '<time>' : maskJson(v)]));
  return value;
}

/** Durations ("0.4 s", "12s", "1m05s"), rates ("(12901 tok/s)") and the ETA in what a command printed. */
function maskLog(text: string): string {
  return text
    .replace(/\(\d+(\.\d+)? (resp )?tok\/s\)/g, '(<rate>)')
    .replace(/\b\d+h\d{2}m\b|\b\d+m\d{2}s\b|\b\d+(\.\d+)?( ?(ms|s))\b/g, '<t>')
    .replace(/\bETA \S+/g, 'ETA <t>');
}

/** A file as compared: JSON with its timing fields masked, logs and tables with their durations masked, the rest as bytes. */
function normalised(path: string, root: string): string | Buffer {
  const bytes = readFileSync(path);
  const name = path.split('/').pop()!;
  if (!/\.(jsonl?|stdout|stderr|log|md|csv|yaml|txt)$/.test(name)) return bytes;
  // compare records the absolute paths of its runs, and when it started each.
  const text = bytes
    .toString('utf8')
    .split(root)
    .join('<out>')
    .replace(/\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z\b/g, '<date>');
  if (name.endsWith('.jsonl'))
    return text
      .split('\n')
      .map((l) => (l.trim() ? JSON.stringify(maskJson(JSON.parse(l))) : l))
      .join('\n');
  if (name.endsWith('.json')) return JSON.stringify(maskJson(JSON.parse(text)), null, 1);
  if (name.endsWith('.csv')) return maskCsv(text);
  if (/\.(stdout|stderr|log|md)$/.test(name)) return maskLog(text).replace(/<t> ± [\d.]+/g, '<t> ± <t>');
  return text;
}

/** compare's tables: the columns of wall times masked. */
function maskCsv(text: string): string {
  const rows = text.split('\n').map((r) => r.split(','));
  const timed = rows[0].map((h) => /seconds|wall/.test(h));
  return rows.map((r) => r.map((c, i) => (timed[i] ? '<time>' : c)).join(',')).join('\n');
}

function filesUnder(root: string): string[] {
  if (!existsSync(root)) return [];
  return readdirSync(root, { recursive: true, encoding: 'utf8' })
    .filter((f) => statSync(join(root, f)).isFile())
    .sort();
}

function firstDifference(a: string, b: string): string {
  const la = a.split('\n');
  const lb = b.split('\n');
  for (let i = 0; i < Math.max(la.length, lb.length); i++) {
    if (la[i] !== lb[i]) return `line ${i + 1}:\n    - ${(la[i] ?? '<none>').slice(0, 300)}\n    + ${(lb[i] ?? '<none>').slice(0, 300)}`;
  }
  return '';
}

function compare(aArg: string, bArg: string): number {
  const differences: string[] = [];
  let compared = 0;
  for (const part of ['runs', 'logs']) {
    const a = join(resolve(aArg), part);
    const b = join(resolve(bArg), part);
    const names = [...new Set([...filesUnder(a), ...filesUnder(b)])].sort();
    for (const name of names) {
      const where = `${part}/${name}`;
      if (!existsSync(join(a, name)) || !existsSync(join(b, name))) {
        differences.push(`${where}: only in ${existsSync(join(a, name)) ? aArg : bArg}`);
        continue;
      }
      compared++;
      const x = normalised(join(a, name), resolve(aArg));
      const y = normalised(join(b, name), resolve(bArg));
      if (typeof x === 'string' && typeof y === 'string') {
        if (x !== y) differences.push(`${where}: ${firstDifference(x, y)}`);
      } else if (!Buffer.from(x).equals(Buffer.from(y))) differences.push(`${where}: the bytes differ`);
    }
  }
  for (const d of differences) console.log(d);
  console.log(
    `${differences.length} differences in ${compared} files compared (${relative(process.cwd(), resolve(aArg)) || '.'} vs ${relative(process.cwd(), resolve(bArg)) || '.'})`,
  );
  return differences.length ? 1 : 0;
}

const [command, ...rest] = process.argv.slice(2);
if (command === 'run' && rest.length === 2) await play(rest[0], rest[1]);
else if (command === 'compare' && rest.length === 2) process.exitCode = compare(rest[0], rest[1]);
else if (command === 'both' && rest.length === 3) {
  await play(rest[0], join(rest[2], 'a'));
  await play(rest[1], join(rest[2], 'b'));
  process.exitCode = compare(join(rest[2], 'a'), join(rest[2], 'b'));
} else if (command === 'stop-part-way') {
  const [tree, runDir, iteration, save, ...settings] = rest;
  await stopPartWay(tree, runDir, Number(iteration), Number(save), settings);
} else {
  console.error('usage: same-runs.ts run <revision|checkout> <out> | compare <outA> <outB> | both <revA> <revB> <out>');
  process.exitCode = 2;
}
