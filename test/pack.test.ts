/**
 * The package as a user gets it: `npm pack` here, the tarball installed into a fresh project
 * in the system's temporary folder (outside this repository, so nothing resolves to its src/ or its
 * node_modules) with the runtime dependencies only (no tsx: a dev dependency), examples/custom-env
 * compiled there with tsc against the installed `.d.ts` with `skipLibCheck: false` (the package's types
 * must not pull in TensorFlow.js's, which fail TypeScript's checks), and run with plain `node` (no tsx,
 * no loader): an environment in its own file, trained for 2 iterations, the result read back; and
 * `npx empo2 --help`. Offline: the project's dependencies come from npm's cache (see installOffline).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, realpathSync, writeFileSync } from 'node:fs';
import { builtinModules } from 'node:module';
import { rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { delimiter, dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const ROOT = resolve(import.meta.dirname, '..');
const work = mkdtempSync(join(tmpdir(), 'empo2-pack-'));
const project = join(work, 'project');
const running = new Set<ChildProcess>();
// A step cut off by a time-out is ended first: npm still writing into the folder would make the removal fail.
// Asynchronously: removing some 400 installed packages holds a worker for minutes on a busy machine.
afterAll(async () => {
  await Promise.all([...running].map((child) => new Promise((ended) => child.once('close', ended).kill())));
  await rm(work, { recursive: true, force: true });
}, 600_000);

// Plain Node first on PATH (npm's scripts and the `empo2` bin's shebang find it); no loader options inherited.
const ENV = { ...process.env, PATH: `${dirname(process.execPath)}${delimiter}${process.env.PATH}`, NODE_OPTIONS: '', NO_COLOR: '1' };

/**
 * Runs a command to its end (asynchronously: a blocked test worker misses vitest's calls); a failure
 * throws with the command, its exit and the end of its output.
 */
function run(command: string, args: string[], cwd: string): Promise<string> {
  return new Promise((done, fail) => {
    const child = spawn(command, args, { cwd, env: ENV, stdio: ['ignore', 'pipe', 'pipe'] });
    running.add(child);
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.on('error', fail);
    child.on('close', (code, signal) => {
      running.delete(child);
      if (code === 0) return done(stdout);
      const output = `${stdout}\n${stderr}`.slice(-4000);
      fail(new Error(`${command} ${args.join(' ')} (in ${cwd}) failed: exit ${code ?? signal}\n${output}`));
    });
  });
}

/**
 * Installs the tarball with `npm ci --offline`. Resolving the dependencies' ranges would need the
 * registry's package documents, which npm's cache does not keep in a form `--offline` accepts; a lockfile
 * does not need them. So the project's lockfile is the repository's own (the versions this repository is
 * tested with; only its dev-only entries left out) with empo2 itself as the tarball, and npm takes every
 * package from its cache by version and integrity. A missing one fails with ENOTCACHED: run `npm ci` in
 * the repository once with the network to fill the cache.
 */
async function installOffline(tarball: string): Promise<void> {
  const lock = JSON.parse(readFileSync(join(ROOT, 'package-lock.json'), 'utf8'));
  const own = lock.packages[''];
  const spec = `file:../${tarball}`;
  const packages: Record<string, unknown> = {
    '': { name: 'user-project', dependencies: { empo2: spec } },
    'node_modules/empo2': {
      version: own.version,
      resolved: spec,
      license: own.license,
      dependencies: own.dependencies,
      bin: own.bin,
      engines: own.engines,
    },
  };
  for (const [path, entry] of Object.entries<{ dev?: boolean }>(lock.packages)) if (path && !entry.dev) packages[path] = entry;
  mkdirSync(project);
  writeFileSync(
    join(project, 'package.json'),
    JSON.stringify({ name: 'user-project', private: true, type: 'module', dependencies: { empo2: spec } }, null, 2),
  );
  writeFileSync(
    join(project, 'package-lock.json'),
    JSON.stringify({ name: 'user-project', lockfileVersion: 3, requires: true, packages }, null, 2),
  );
  // No install scripts: what the package needs must work without them (npm 11 runs none unless approved).
  await run('npm', ['ci', '--offline', '--ignore-scripts', '--no-audit', '--no-fund'], project);
}

/** The user's program beside the example: every name the issue asks for, and the returned result written out. */
const MAIN = `import { ConfigError, loadConfig, registerEnv, train, type Env, type TrainLine } from 'empo2';
import { DoorsEnv, doors } from './doors-env.js';

// The example's class is checked against the package's Env type, as a user's would be.
const env: Env = new DoorsEnv(4);
registerEnv('doors', doors);
const config = loadConfig({
  run_dir: process.argv[2],
  seed: 1,
  env: { name: 'doors', max_steps: 4, eval_variations: 1 },
  model: { hidden_size: 32, intermediate_size: 64, num_hidden_layers: 1, vocab_size: 300 },
  rollout: { tasks_per_batch: 2, group_size: 2 },
  train: { iterations: 2, eval_every: 0 },
});
const lines: TrainLine[] = [];
const result = await train({ config, log: () => {}, onIteration: (line) => lines.push(line) });
const unknown = await train({ config: { env: { name: 'dors' } } }).catch((e: Error) => e);
console.log(
  JSON.stringify({
    resolved: import.meta.resolve('empo2'),
    envName: env.name,
    lines: lines.map((l) => l.iteration),
    result: { ...result, config: undefined },
    unknown: { configError: unknown instanceof ConfigError, message: (unknown as Error).message },
  }),
);
`;

let packed: { filename: string; files: { path: string }[] };

beforeAll(async () => {
  expect(realpathSync(work).startsWith(realpathSync(ROOT))).toBe(false);
  // prepack builds dist/ (npm run build), as a publish would.
  // prepack's own lines come first on stdout, then npm's JSON.
  const stdout = await run('npm', ['pack', '--json', '--pack-destination', work], ROOT);
  [packed] = JSON.parse(stdout.slice(stdout.search(/^\[$/m)));
  await installOffline(packed.filename);
  mkdirSync(join(project, 'src'));
  for (const file of ['doors-env.ts', 'train.ts']) copyFileSync(join(ROOT, 'examples/custom-env', file), join(project, 'src', file));
  writeFileSync(join(project, 'src/main.ts'), MAIN);
  // The user's own dev tools, not the package's dependencies: this repository's TypeScript and Node types.
  const compilerOptions = {
    target: 'ES2022',
    module: 'NodeNext',
    moduleResolution: 'NodeNext',
    strict: true,
    rootDir: 'src',
    outDir: 'out',
    types: ['node'],
    // Every .d.ts the program reaches is checked: TensorFlow.js's own do not pass TypeScript 5.9's checks,
    // so this fails if the package's public types name TensorFlow.js's (docs/API.md, "Types").
    skipLibCheck: false,
    typeRoots: [join(ROOT, 'node_modules/@types')],
  };
  writeFileSync(join(project, 'tsconfig.json'), JSON.stringify({ compilerOptions, include: ['src'] }, null, 2));
  await run(process.execPath, [join(ROOT, 'node_modules/typescript/bin/tsc'), '-p', project], project);
  // Minutes on an idle machine (build, install, compile); far more when the machine is shared.
}, 1_800_000);

describe('the packed package in a project of its own', () => {
  it('holds the built JavaScript with its types, the bin, the worker and docs/API.md, and no TypeScript sources', () => {
    const files = packed.files.map((f) => f.path);
    for (const f of ['dist/index.js', 'dist/index.d.ts', 'dist/internals.js', 'bin/empo2.js', 'docs/API.md', 'workers/torch/worker.py'])
      expect(files).toContain(f);
    expect(files).toContain('dist/envs/scienceworld/catalog.json');
    expect(files.filter((f) => f.startsWith('src/') || f.endsWith('.test.js') || (f.endsWith('.ts') && !f.endsWith('.d.ts')))).toEqual([]);
  });

  it('trains an environment defined in its own file for 2 iterations under plain node and reads the result', async () => {
    const runDir = join(work, 'main-run');
    const out = JSON.parse((await run(process.execPath, ['out/main.js', runDir], project)).trim().split('\n').at(-1)!);
    expect(out.resolved).toBe(`file://${realpathSync(project)}/node_modules/empo2/dist/index.js`);
    expect(out.envName).toBe('doors');
    expect(out.lines).toEqual([1, 2]);
    expect(out.result).toMatchObject({ runDir, iterations: 2, interrupted: false });
    expect(out.result.initialEval.iteration).toBe(0);
    expect(out.result.finalEval.iteration).toBe(2);
    expect(out.result.finalEval.perTask.map((t: { task: string }) => t.task).sort()).toEqual(['hidden-note', 'note']);
    expect(out.result.evalTable).toMatch(/\| \*\*all\*\* \| 2 \|/);
    expect(readFileSync(join(runDir, 'eval.md'), 'utf8')).toBe(`${out.result.evalTable}\n`);
    expect(existsSync(join(runDir, 'checkpoints', 'iter-000002'))).toBe(true);
    expect(out.unknown).toEqual({
      configError: true,
      message: 'env.name: no environment is registered as "dors" (known: builtin, scienceworld, webshop, http, doors)',
    });
  }, 600_000);

  it('runs examples/custom-env/train.ts as compiled there', async () => {
    const runDir = join(work, 'example-run');
    const stdout = await run(process.execPath, ['out/train.js', '--iterations', '2', '--run-dir', runDir], project);
    expect(stdout).toMatch(/^iteration 1: mean score [\d.]+, loss -?[\d.]+, \d+ env steps$/m);
    expect(stdout).toMatch(/^iteration 2: /m);
    expect(stdout).toContain('| task | episodes | score (iter 0) | score (iter 2) |');
    expect(stdout).toContain(`run folder: ${runDir} (final mean score `);
  }, 600_000);

  it('keeps the empo2 command: `npx empo2` runs dist/ with plain node, without tsx', async () => {
    expect(existsSync(join(project, 'node_modules/tsx'))).toBe(false);
    const help = await run('npx', ['--offline', 'empo2', '--help'], project);
    expect(help).toMatch(/^Usage: empo2 /m);
    expect(help).toMatch(/^\s+train\b/m);
    expect(existsSync(join(project, 'node_modules/empo2/src'))).toBe(false);
  });

  it('imports at run time only its dependencies (its optional ones, and the optional tfjs-node it tries)', () => {
    const installed = join(project, 'node_modules/empo2');
    const manifest = JSON.parse(readFileSync(join(installed, 'package.json'), 'utf8')) as Record<string, Record<string, string>>;
    // Optional: better-sqlite3, which only the memory proxy loads, when it opens its database (src/memory-proxy/sqlite.ts).
    const dependencies = [...Object.keys(manifest.dependencies), ...Object.keys(manifest.optionalDependencies ?? {})];
    const allowed = new Set([...dependencies, '@tensorflow/tfjs-node', ...builtinModules]);
    const outside: string[] = [];
    for (const file of jsFiles(join(installed, 'dist')))
      for (const name of runtimeImports(readFileSync(file, 'utf8'))) {
        if (name.startsWith('.') || name.startsWith('node:')) continue;
        const pkg = name.startsWith('@') ? name.split('/').slice(0, 2).join('/') : name.split('/')[0];
        if (!allowed.has(pkg)) outside.push(`${relative(installed, file)}: ${name}`);
      }
    expect(outside).toEqual([]);
  });

  it('finds the files its modules read beside themselves: the worker, the simulator bridge, the dashboard page', async () => {
    const installed = join(project, 'node_modules/empo2');
    const missing: string[] = [];
    // Every `new URL('…', import.meta.url)` but the project's Python environment, which the user makes.
    for (const file of jsFiles(join(installed, 'dist')))
      for (const [, path] of readFileSync(file, 'utf8').matchAll(/new URL\('([^']+)', import\.meta\.url\)/g))
        if (!path.includes('.venv') && !existsSync(fileURLToPath(new URL(path, pathToFileURL(file)))))
          missing.push(`${relative(installed, file)}: ${path}`);
    expect(missing).toEqual([]);
    // In a process of the project's own, as the package's code runs there.
    const module = pathToFileURL(join(installed, 'dist/policy/torch/python.js')).href;
    const script = `const { TORCH_WORKER_SCRIPT } = await import(${JSON.stringify(module)}); console.log(TORCH_WORKER_SCRIPT);`;
    const worker = (await run(process.execPath, ['--input-type=module', '-e', script], project)).trim();
    expect(worker).toBe(join(realpathSync(installed), 'workers/torch/worker.py'));
    expect(existsSync(worker)).toBe(true);
  });
});

/** The .js files under a folder, at any depth. */
function jsFiles(dir: string): string[] {
  return readdirSync(dir, { recursive: true, encoding: 'utf8' })
    .filter((f) => f.endsWith('.js'))
    .map((f) => join(dir, f));
}

/**
 * What a compiled module loads by name: static imports and re-exports, side-effect imports, dynamic
 * imports, and require()/require.resolve() through createRequire (as tsc writes them from src/).
 */
const IMPORTS = [
  /^\s*(?:import|export)\b[^;]*?\bfrom\s*['"]([^'"]+)['"];/gm,
  /^\s*import\s*['"]([^'"]+)['"];/gm,
  /\bimport\(\s*(?:__rewriteRelativeImportExtension\()?['"]([^'"]+)['"]/g,
  /(?<![\w.])(?:require|requireLazily)(?:\.resolve)?\(\s*['"]([^'"]+)['"]\s*\)/g,
  /\bcreateRequire\([^)]*\)\(\s*['"]([^'"]+)['"]\s*\)/g,
];
function runtimeImports(text: string): string[] {
  return IMPORTS.flatMap((re) => [...text.matchAll(re)].map((m) => m[1]));
}
