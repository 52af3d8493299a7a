/**
 * Imports of src/ by path from bench/, scripts/, results/ and examples/ (docs/API.md): everything there
 * goes through the package's entries, src/index.ts (the public API) or src/internals.ts (the declared,
 * unstable rest). A deep import stays only with its reason in a comment on the line above that says
 * "deep" (test/public-api.test.ts checks there is none without one).
 *   npx tsx scripts/deep-imports.ts [root]   # root: a checkout (default: this one)
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';

const FOLDERS = ['bench', 'scripts', 'results', 'examples'];
const ENTRIES = ['src/index.ts', 'src/internals.ts'];

export interface DeepImport {
  file: string;
  line: number;
  /** The src/ path imported. */
  target: string;
  /** The comment above it says why it is deep. */
  justified: boolean;
}

function codeFiles(dir: string): string[] {
  if (!existsSync(dir)) return [];
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const path = join(dir, e.name);
    if (e.isDirectory()) return e.name === 'node_modules' ? [] : codeFiles(path);
    return /\.(ts|mts|js|mjs)$/.test(e.name) ? [path] : [];
  });
}

/** Every import of a src/ file other than the entries, static or `import('…')` with a literal path. */
export function deepImports(root: string): DeepImport[] {
  const out: DeepImport[] = [];
  for (const file of FOLDERS.flatMap((f) => codeFiles(join(root, f)))) {
    const lines = readFileSync(file, 'utf8').split('\n');
    lines.forEach((text, i) => {
      for (const m of text.matchAll(/(?:\bfrom\s+|\bimport\s*\(\s*|^\s*import\s+)['"](\.[^'"]*)['"]/g)) {
        const target = relative(root, resolve(dirname(file), m[1]));
        if (!target.startsWith('src/') || ENTRIES.includes(target)) continue;
        out.push({ file: relative(root, file), line: i + 1, target, justified: /^\s*\/\/.*\bdeep\b/i.test(lines[i - 1] ?? '') });
      }
    });
  }
  return out;
}

if (import.meta.filename === resolve(process.argv[1] ?? '')) {
  const root = resolve(process.argv[2] ?? join(import.meta.dirname, '..'));
  const found = deepImports(root);
  for (const d of found) console.log(`${d.file}:${d.line} ${d.target}${d.justified ? ' (justified above it)' : ''}`);
  const paths = new Set(found.map((d) => d.target));
  console.log(`${found.length} deep imports of ${paths.size} src/ paths; ${found.filter((d) => !d.justified).length} without a reason`);
}
