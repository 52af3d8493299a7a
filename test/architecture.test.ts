/**
 * The direction of dependencies (docs/ARCHITECTURE.md): every import between top-level folders of
 * src/ must go down the layer table, and no source file may reach itself through imports (static
 * or dynamic `import()`). Test files are exempt: they assemble pieces from several layers.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';

const SRC = resolve(import.meta.dirname, '..', 'src');

/** What the package's entries may re-export: every layer but the command line. */
const PACKAGE_ENTRY_LAYERS = [
  'api',
  'memory-proxy',
  'gateway',
  'dashboard',
  'compare',
  'serve',
  'openai',
  'retrospex',
  'adapt',
  'trainer',
  'run',
  'algo',
  'memory',
  'external',
  'policy',
  'envs',
  'trajectory',
  'config',
  'util',
];

/** Which folders each folder of src/ may import from (its own files always). */
export const ALLOWED: Record<string, readonly string[]> = {
  util: [],
  config: ['util'],
  algo: ['util'],
  envs: ['config', 'util'],
  trajectory: ['config', 'util'],
  external: ['config', 'util'],
  policy: ['algo', 'config', 'util'],
  memory: ['external', 'policy', 'config', 'util'],
  run: ['algo', 'memory', 'external', 'policy', 'envs', 'trajectory', 'config', 'util'],
  trainer: ['run', 'algo', 'memory', 'external', 'policy', 'envs', 'trajectory', 'config', 'util'],
  adapt: ['trainer', 'run', 'memory', 'external', 'policy', 'envs', 'trajectory', 'config', 'util'],
  retrospex: ['trainer', 'run', 'algo', 'memory', 'external', 'policy', 'envs', 'trajectory', 'config', 'util'],
  compare: ['run', 'algo', 'memory', 'external', 'policy', 'envs', 'trajectory', 'config', 'util'],
  openai: ['policy', 'config', 'util'],
  serve: ['openai', 'run', 'policy', 'config', 'util'],
  dashboard: ['compare', 'serve', 'openai', 'trainer', 'run', 'memory', 'external', 'policy', 'envs', 'trajectory', 'config', 'util'],
  gateway: ['serve', 'openai', 'trainer', 'run', 'algo', 'memory', 'external', 'policy', 'envs', 'trajectory', 'config', 'util'],
  'memory-proxy': ['gateway', 'serve', 'trainer', 'memory', 'external', 'policy', 'config', 'util'],
  api: [
    'memory-proxy',
    'gateway',
    'dashboard',
    'compare',
    'serve',
    'openai',
    'retrospex',
    'adapt',
    'trainer',
    'run',
    'algo',
    'memory',
    'external',
    'policy',
    'envs',
    'trajectory',
    'config',
    'util',
  ],
  cli: [
    'memory-proxy',
    'gateway',
    'dashboard',
    'compare',
    'serve',
    'openai',
    'retrospex',
    'adapt',
    'trainer',
    'run',
    'algo',
    'memory',
    'external',
    'policy',
    'envs',
    'trajectory',
    'config',
    'util',
  ],
  // The package's entries (src/index.ts, src/internals.ts): what they re-export may come from anywhere but the command line.
  'index.ts': PACKAGE_ENTRY_LAYERS,
  'internals.ts': PACKAGE_ENTRY_LAYERS,
};

/** Folders that may import from policy/ only its entry (policy/index.ts) and its types (policy/types.ts). */
export const POLICY_ENTRY_ONLY: readonly string[] = ['trainer', 'run', 'adapt', 'retrospex', 'gateway', 'memory-proxy', 'openai'];

/** Where functions stay under MAX_FUNCTION_LINES lines: the training wing and the engines (folders, or single files). */
export const SHORT_FUNCTIONS: readonly string[] = [
  'trainer',
  'run',
  'adapt',
  'retrospex',
  'algo',
  'compare',
  'policy/tfjs/engine.ts',
  'policy/torch/engine.ts',
  'policy/remote/engine.ts',
];
/** Where functions take an options object rather than more than MAX_PARAMETERS parameters. */
export const FEW_PARAMETERS: readonly string[] = ['trainer', 'run', 'adapt', 'retrospex', 'algo'];
const MAX_FUNCTION_LINES = 80;
const MAX_PARAMETERS = 4;
/** Functions that mirror the PolicyEngine interface's trainStep (batch, objective, temperature, lr, resume). */
const INTERFACE_MIRRORS = new Set(['run/interrupt.ts trainStep']);

/** Every function, method and arrow function of a file: its name, lines (first to last) and parameter count. */
export function functionsOf(file: string, text: string): { name: string; lines: number; params: number }[] {
  const sf = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true);
  const line = (pos: number) => sf.getLineAndCharacterOfPosition(pos).line;
  const out: { name: string; lines: number; params: number }[] = [];
  const visit = (node: ts.Node) => {
    if (ts.isFunctionLike(node) && 'body' in node && node.body) {
      const named = (n: ts.Node | undefined) => (n && (ts.isIdentifier(n) || ts.isPrivateIdentifier(n)) ? n.text : '');
      const parent = node.parent;
      const name =
        named(node.name) ||
        (ts.isVariableDeclaration(parent) || ts.isPropertyAssignment(parent) ? named(parent.name) : '') ||
        (ts.isConstructorDeclaration(node) ? 'constructor' : '(anonymous)');
      out.push({ name, lines: line(node.getEnd()) - line(node.getStart()) + 1, params: node.parameters.length });
    }
    ts.forEachChild(node, visit);
  };
  visit(sf);
  return out;
}

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const path = join(dir, e.name);
    if (e.isDirectory()) return sourceFiles(path);
    return e.name.endsWith('.ts') && !e.name.endsWith('.test.ts') ? [path] : [];
  });
}

/**
 * Relative module specifiers a file imports: `import … from`, `export … from`, `import '…'`,
 * `import('…')` and `import type`. A type import cannot close a cycle at run time, but two files
 * that name each other's types are still one piece of code split in two, so the checks count it.
 */
export function importsOf(text: string): string[] {
  const specs = [...text.matchAll(/(?:\bfrom\s+|\bimport\s*\(\s*|^\s*import\s+)'(\.[^']*)'/gm)].map((m) => m[1]);
  return [...new Set(specs)];
}

const topFolder = (file: string) => relative(SRC, file).split('/')[0];

interface Edge {
  from: string;
  to: string;
}

function importGraph(): Edge[] {
  return sourceFiles(SRC).flatMap((file) =>
    importsOf(readFileSync(file, 'utf8')).map((spec) => ({ from: file, to: resolve(dirname(file), spec) })),
  );
}

describe('architecture', () => {
  const edges = importGraph();

  it('finds the imports it checks (static and dynamic)', () => {
    const text = `import { a } from './a.ts';\nexport { b } from '../b.ts';\nconst c = await import('./c.ts');\nimport './d.ts';\nimport x from 'node:fs';\nimport type {\n  E,\n} from './e.ts';`;
    expect(importsOf(text)).toEqual(['./a.ts', '../b.ts', './c.ts', './d.ts', './e.ts']);
    expect(edges.length).toBeGreaterThan(200);
  });

  it('imports only go down the layer table', () => {
    const folders = new Set(
      sourceFiles(SRC)
        .map(topFolder)
        .filter((f) => !f.endsWith('.ts')),
    );
    expect(
      [...folders].filter((f) => !(f in ALLOWED)),
      'folders missing from the layer table (add them to docs/ARCHITECTURE.md and here)',
    ).toEqual([]);
    const backEdges = edges
      .filter((e) => {
        const from = topFolder(e.from);
        const to = topFolder(e.to);
        return from !== to && !(ALLOWED[from] ?? []).includes(to);
      })
      .map((e) => `${relative(SRC, e.from)} imports ${relative(SRC, e.to)}`);
    expect(backEdges).toEqual([]);
  });

  it('the training wing reaches policy/ only through its entry and its types (engines are built behind them)', () => {
    const entry = ['policy/index.ts', 'policy/types.ts'];
    const deep = edges
      .filter((e) => POLICY_ENTRY_ONLY.includes(topFolder(e.from)) && topFolder(e.to) === 'policy' && !entry.includes(relative(SRC, e.to)))
      .map((e) => `${relative(SRC, e.from)} imports ${relative(SRC, e.to)}`);
    expect(deep).toEqual([]);
  });

  it(`functions of the training wing and the engines stay under ${MAX_FUNCTION_LINES} lines and take at most ${MAX_PARAMETERS} parameters`, () => {
    const within = (file: string, places: readonly string[]) => places.some((p) => file === p || file.startsWith(p + '/'));
    const long: string[] = [];
    const wide: string[] = [];
    for (const path of sourceFiles(SRC)) {
      const file = relative(SRC, path);
      if (!within(file, SHORT_FUNCTIONS)) continue;
      for (const f of functionsOf(file, readFileSync(path, 'utf8'))) {
        if (f.lines > MAX_FUNCTION_LINES) long.push(`${file} ${f.name}: ${f.lines} lines`);
        if (within(file, FEW_PARAMETERS) && f.params > MAX_PARAMETERS && !INTERFACE_MIRRORS.has(`${file} ${f.name}`))
          wide.push(`${file} ${f.name}: ${f.params} parameters`);
      }
    }
    expect(long, 'split these (docs/ARCHITECTURE.md)').toEqual([]);
    expect(wide, 'give these an options object (docs/ARCHITECTURE.md)').toEqual([]);
  });

  it('no source file imports itself through a cycle, type imports included', () => {
    const next = new Map<string, string[]>();
    for (const e of edges) next.set(e.from, [...(next.get(e.from) ?? []), e.to]);
    const cycles: string[] = [];
    const state = new Map<string, 'open' | 'done'>();
    const stack: string[] = [];
    const visit = (file: string) => {
      state.set(file, 'open');
      stack.push(file);
      for (const to of next.get(file) ?? []) {
        if (state.get(to) === 'open') cycles.push([...stack.slice(stack.indexOf(to)), to].map((f) => relative(SRC, f)).join(' -> '));
        else if (!state.has(to)) visit(to);
      }
      stack.pop();
      state.set(file, 'done');
    };
    for (const file of next.keys()) if (!state.has(file)) visit(file);
    expect(cycles).toEqual([]);
  });
});
