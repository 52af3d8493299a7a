/**
 * The package's declared API: docs/API.md and the entries' exports name the same things,
 * and the repository's own programs (bench/, scripts/, results/, examples/) reach src/ only through
 * those entries (scripts/deep-imports.ts), so the API they need is the one declared.
 */
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { deepImports } from '../scripts/deep-imports.ts';

const ROOT = resolve(import.meta.dirname, '..');

/** The names an entry re-exports (`export { a, type B as C } from '…'`), which is all the entries do. */
export function exportedNames(text: string): string[] {
  const names: string[] = [];
  for (const m of text.matchAll(/^export\s+(?:type\s+)?\{([^}]*)\}\s+from\s+'[^']+';/gm))
    for (const part of m[1].split(',')) {
      const name = part
        .trim()
        .replace(/^type\s+/, '')
        .split(/\s+as\s+/)
        .at(-1)!;
      if (name) names.push(name);
    }
  return names.sort();
}

const api = readFileSync(join(ROOT, 'docs/API.md'), 'utf8');
const [publicPart, internalsPart] = api.split('\n## empo2/internals\n');

describe('docs/API.md', () => {
  it('documents every export of the public entry (src/index.ts) under a heading of its own, and nothing else', () => {
    const exported = exportedNames(readFileSync(join(ROOT, 'src/index.ts'), 'utf8'));
    expect(exported).toContain('train');
    expect(exported).toContain('registerEnv');
    const documented = [...publicPart.matchAll(/^### `([^`]+)`$/gm)].map((m) => m[1]).sort();
    expect(documented).toEqual(exported);
  });

  it('lists the names of empo2/internals (src/internals.ts)', () => {
    expect(internalsPart).toBeDefined();
    const exported = exportedNames(readFileSync(join(ROOT, 'src/internals.ts'), 'utf8'));
    const listed = [...internalsPart.split('\n## ')[0].matchAll(/`([A-Za-z_]\w*)`/g)].map((m) => m[1]).sort();
    expect(listed).toEqual(exported);
  });

  it('reads the names as the entries write them', () => {
    expect(exportedNames("export { a, type B, c as D } from './x.ts';\nexport type {\n  E,\n  F,\n} from './y.ts';")).toEqual(
      ['D', 'E', 'F', 'a', 'B'].sort(),
    );
  });
});

describe('bench/, scripts/, results/ and examples/', () => {
  it('import src/ only through the package entries, or say on the line above why not', () => {
    const unexplained = deepImports(ROOT)
      .filter((d) => !d.justified)
      .map((d) => `${d.file}:${d.line} imports ${d.target}`);
    expect(unexplained).toEqual([]);
  });

  it('finds deep imports, static and dynamic, and their reasons', () => {
    const found = deepImports(ROOT);
    // bench/webshop.ts times the WebShop module's own start-up.
    expect(found.map((d) => `${d.file} ${d.target} ${d.justified}`)).toContain('bench/webshop.ts src/envs/webshop/env.ts true');
  });
});
