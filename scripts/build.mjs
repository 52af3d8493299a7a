// `npm run build` (and `npm pack`'s prepack): dist/ from src/ for Node without tsx, JavaScript and
// .d.ts side by side (tsconfig.build.json), plus the files the code reads beside itself at run time.
import { spawnSync } from 'node:child_process';
import { cpSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
// Files read through `new URL('./…', import.meta.url)`: dist/ keeps src/'s layout, so each goes to the same place.
const ASSETS = [
  'envs/scienceworld/catalog.json', // the tasks and their splits
  'envs/scienceworld/corpus.json', // the tiny model's tokenizer text
  'envs/scienceworld/bridge.py', // the simulator's Python side
  'dashboard/page', // `empo2 dashboard`'s page
  'util/http-front-worker.mjs', // the HTTP front's thread (a Worker loads the file by its path)
];

// A stale file of a source removed since the last build would still be importable.
rmSync(join(root, 'dist'), { recursive: true, force: true });
const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
const built = spawnSync(process.execPath, [tsc, '-p', join(root, 'tsconfig.build.json')], { stdio: 'inherit' });
if (built.status !== 0) process.exit(built.status ?? 1);
for (const asset of ASSETS) cpSync(join(root, 'src', asset), join(root, 'dist', asset), { recursive: true });
console.log(`built dist/ (and copied ${ASSETS.join(', ')})`);
