/**
 * The shape of src/, for notes on refactors: per folder, its source files, the imports between them
 * (arrows) and the longest chain of those imports (levels), then the longest functions.
 *
 *   npx tsx scripts/code-shape.ts [root] [--over N] [--folders a,b]
 *
 * root: a checkout (default: this one). --over: list every function longer than N lines (default 80)
 * in --folders (default trainer, run, adapt, algo; missing folders are skipped).
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import ts from 'typescript';

const args = process.argv.slice(2);
const flag = (name: string) => {
  const i = args.indexOf(name);
  return i >= 0 ? args.splice(i, 2)[1] : undefined;
};
const over = Number(flag('--over') ?? 80);
const folders = (flag('--folders') ?? 'trainer,run,adapt,algo').split(',');
const root = resolve(args[0] ?? join(import.meta.dirname, '..'));
const src = join(root, 'src');

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const path = join(dir, e.name);
    if (e.isDirectory()) return sourceFiles(path);
    return e.name.endsWith('.ts') && !e.name.endsWith('.test.ts') ? [path] : [];
  });
}

const importsOf = (text: string) => [...text.matchAll(/(?:\bfrom\s+|\bimport\s*\(\s*|^\s*import\s+)'(\.[^']*)'/gm)].map((m) => m[1]);

/** Functions, methods and arrow functions with their length in lines (first line to last, inclusive) and parameter count. */
function functionsOf(file: string): { name: string; lines: number; params: number }[] {
  const text = readFileSync(file, 'utf8');
  const sf = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true);
  const out: { name: string; lines: number; params: number }[] = [];
  const line = (pos: number) => sf.getLineAndCharacterOfPosition(pos).line;
  const visit = (node: ts.Node) => {
    if (ts.isFunctionLike(node) && 'body' in node && node.body) {
      let name = node.name && ts.isIdentifier(node.name) ? node.name.text : '';
      if (!name && ts.isVariableDeclaration(node.parent) && ts.isIdentifier(node.parent.name)) name = node.parent.name.text;
      if (!name && ts.isPropertyAssignment(node.parent) && ts.isIdentifier(node.parent.name)) name = node.parent.name.text;
      if (ts.isConstructorDeclaration(node)) name = 'constructor';
      out.push({ name: name || '(anonymous)', lines: line(node.getEnd()) - line(node.getStart()) + 1, params: node.parameters.length });
    }
    ts.forEachChild(node, visit);
  };
  visit(sf);
  return out;
}

const files = sourceFiles(src);
const byFolder = new Map<string, string[]>();
for (const f of files) {
  const folder = relative(src, f).split('/')[0];
  if (folder.endsWith('.ts')) continue;
  byFolder.set(folder, [...(byFolder.get(folder) ?? []), f]);
}

console.log('folder: files, arrows between them, levels (longest import chain inside the folder), longest function');
for (const [folder, list] of [...byFolder].sort()) {
  const inFolder = new Set(list);
  const next = new Map(
    list.map((f) => [
      f,
      [...new Set(importsOf(readFileSync(f, 'utf8')).map((s) => resolve(dirname(f), s)))].filter((t) => inFolder.has(t) && t !== f),
    ]),
  );
  const arrows = [...next.values()].reduce((n, t) => n + t.length, 0);
  const depth = new Map<string, number>();
  const levels = (f: string, seen: Set<string>): number => {
    if (depth.has(f)) return depth.get(f)!;
    if (seen.has(f)) return 0;
    seen.add(f);
    const d = 1 + Math.max(0, ...next.get(f)!.map((t) => levels(t, seen)));
    seen.delete(f);
    depth.set(f, d);
    return d;
  };
  const deepest = Math.max(...list.map((f) => levels(f, new Set())));
  const longest = list.flatMap((f) => functionsOf(f).map((fn) => ({ ...fn, file: relative(src, f) }))).sort((a, b) => b.lines - a.lines)[0];
  console.log(
    `${folder}: ${list.length} files, ${arrows} arrows, ${deepest} levels, longest ${longest ? `${longest.file} ${longest.name} ${longest.lines}` : '-'}`,
  );
}

console.log(`\nfile pairs importing from another folder, from ${folders.join(', ')}:`);
for (const folder of folders) {
  const out = new Map<string, number>();
  for (const f of byFolder.get(folder) ?? []) {
    const targets = new Set(importsOf(readFileSync(f, 'utf8')).map((s) => relative(src, resolve(dirname(f), s))));
    for (const t of targets) {
      const to = t.split('/')[0];
      if (to !== folder) out.set(to, (out.get(to) ?? 0) + 1);
    }
  }
  if (out.size > 0) console.log(`  ${folder}: ${[...out].map(([to, n]) => `${to} ${n}`).join(', ')}`);
}

/** What src/trainer/trainer.ts loads through its static run-time imports: files, folders, the longest chain. */
const loop = join(src, 'trainer', 'trainer.ts');
if (existsSync(loop)) {
  const staticImports = (f: string) =>
    [
      ...readFileSync(f, 'utf8')
        .replace(/\b(?:import|export)\s+type\s[^;]*?\bfrom\s+'[^']*'/gs, '')
        .matchAll(/(?:\bfrom\s+|^\s*import\s+)'(\.[^']*)'/gm),
    ].map((m) => resolve(dirname(f), m[1]));
  const seen = new Set<string>();
  const hops = new Map<string, number>();
  const queue: [string, number][] = [[loop, 0]];
  while (queue.length > 0) {
    const [f, d] = queue.shift()!;
    if (seen.has(f) || !existsSync(f)) continue;
    seen.add(f);
    hops.set(f, d);
    for (const t of staticImports(f)) queue.push([t, d + 1]);
  }
  const reached = [...seen].filter((f) => f.startsWith(src));
  const reachedFolders = new Set(reached.map((f) => relative(src, f).split('/')[0]));
  console.log(
    `\ntrainer/trainer.ts reaches ${reached.length} files in ${reachedFolders.size} folders through static run-time imports (at most ${Math.max(...hops.values())} hops)`,
  );
}

console.log(`\nfunctions over ${over} lines in ${folders.join(', ')}:`);
let count = 0;
for (const folder of folders) {
  if (!existsSync(join(src, folder))) continue;
  for (const f of byFolder.get(folder) ?? [])
    for (const fn of functionsOf(f))
      if (fn.lines > over) {
        count++;
        console.log(`  ${relative(src, f)} ${fn.name}: ${fn.lines}`);
      }
}
console.log(`  ${count} in all`);

console.log(`\nfunctions with more than 4 parameters in ${folders.join(', ')}:`);
let wide = 0;
for (const folder of folders) {
  if (!existsSync(join(src, folder))) continue;
  for (const f of byFolder.get(folder) ?? [])
    for (const fn of functionsOf(f))
      if (fn.params > 4) {
        wide++;
        console.log(`  ${relative(src, f)} ${fn.name}: ${fn.params}`);
      }
}
console.log(`  ${wide} in all`);

const all = files
  .flatMap((f) => functionsOf(f).map((fn) => ({ ...fn, file: relative(root, f) })))
  .sort((a, b) => b.lines - a.lines)
  .slice(0, 12);
console.log('\nlongest functions in src/:');
for (const fn of all) console.log(`  ${fn.file} ${fn.name}: ${fn.lines}`);
