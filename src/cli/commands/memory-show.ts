/**
 * `empo2 memory show`: a run's tip memory, or a memory proxy's database, as text (or JSON), per slot,
 * newest entries first; `empo2 memory export` and `import` move tips between a proxy's database and a
 * run's memory.json (which `memory.init_from` starts a training run with).
 */
import type { Command } from 'commander';
import { closeSync, existsSync, openSync, readFileSync, readSync, statSync, writeFileSync } from 'node:fs';
import { findMemoryFile } from '../../memory/memory-file.ts';
import { DEFAULT_MEMORY_SETTINGS, TipMemory } from '../../memory/store.ts';

export function register(program: Command): void {
  const memoryCommand = program.command('memory').description('inspect a tip memory');
  memoryCommand
    .command('show')
    .description("print a run's tip memory: entries per slot, newest first")
    .argument('<path>', "a run directory (its latest checkpoint), a checkpoint directory, a memory.json file, or a memory proxy's database")
    .option('--task <name>', 'only this slot (a task, or task#variation with per-variation slots)')
    .option('--limit <n>', 'entries shown per slot', '10')
    .option('--json', 'print the entries as JSON')
    .action(async (path: string, opts) => {
      const o = { task: opts.task, limit: Number(opts.limit), json: !!opts.json };
      console.log(isDatabase(path) ? await showDatabase(path, o) : showMemory(path, o));
    });
  memoryCommand
    .command('export')
    .description("write a memory proxy's tips as a run's memory.json (for memory.init_from, or memory show)")
    .argument('<database>', "the memory proxy's database")
    .argument('<out>', 'the memory.json to write')
    .action(async (database: string, out: string) => {
      const { TipStore } = await import('../../memory-proxy/store.ts');
      const store = openDatabase(TipStore, database, false);
      try {
        const memory = store.exportRunMemory();
        writeFileSync(out, JSON.stringify(memory) + '\n');
        console.log(`${out}: ${store.index.size()} tips from ${database} (embedder ${memory.embedder})`);
      } finally {
        store.close();
      }
    });
  memoryCommand
    .command('import')
    .description("add the tips of a run's memory to a memory proxy's database (created when missing)")
    .argument('<path>', 'a run directory (its latest checkpoint), a checkpoint directory, or a memory.json file')
    .argument('<database>', "the memory proxy's database")
    .action(async (path: string, database: string) => {
      const { TipStore } = await import('../../memory-proxy/store.ts');
      const file = findMemoryFile(path);
      const saved = JSON.parse(readFileSync(file, 'utf8')) as { embedder?: unknown; tips?: { dim?: unknown } };
      const dim = Number(saved.tips?.dim);
      const store = existsSync(database)
        ? openDatabase(TipStore, database, false)
        : TipStore.open(database, {
            identity: { embedder: String(saved.embedder), dim },
            settings: { ...DEFAULT_MEMORY_SETTINGS, capacity: 100_000 },
            create: true,
          });
      try {
        const added = store.importRunMemory(saved, file);
        console.log(`${database}: ${added} tips added from ${file} (${store.index.size()} in all)`);
      } finally {
        store.close();
      }
    });
}

/** Whether `path` is an SQLite database (a memory proxy's) rather than a memory.json or a run folder. */
function isDatabase(path: string): boolean {
  if (!existsSync(path) || !statSync(path).isFile()) return false;
  const head = Buffer.alloc(16);
  const fd = openSync(path, 'r');
  try {
    readSync(fd, head, 0, 16, 0);
  } finally {
    closeSync(fd);
  }
  return head.toString('latin1') === 'SQLite format 3\u0000';
}

type Store = import('../../memory-proxy/store.ts').TipStore;

/** A database opened with the identity it was created with, keeping every tip (no capacity cut on opening). */
function openDatabase(TipStore: typeof import('../../memory-proxy/store.ts').TipStore, file: string, create: boolean): Store {
  return TipStore.open(file, {
    identity: TipStore.identityOf(file),
    settings: { ...DEFAULT_MEMORY_SETTINGS, capacity: Number.MAX_SAFE_INTEGER },
    create,
  });
}

export async function showDatabase(file: string, o: { task?: string; limit: number; json: boolean }): Promise<string> {
  if (!Number.isInteger(o.limit) || o.limit < 1) throw new Error(`--limit must be a positive integer, got ${o.limit}`);
  const { TipStore } = await import('../../memory-proxy/store.ts');
  const store = openDatabase(TipStore, file, false);
  try {
    const counts = store.count();
    const all = store.newest(o.limit);
    if (o.task !== undefined && !all.some((s) => s.slot === o.task))
      throw new Error(`${file} has no slot "${o.task}" (slots: ${all.map((s) => s.slot).join(', ') || 'none'})`);
    const shown = o.task !== undefined ? all.filter((s) => s.slot === o.task) : all;
    if (o.json)
      return JSON.stringify(
        {
          file,
          embedder: store.identity.embedder,
          total: counts.tips,
          episodes: counts.episodes,
          slots: Object.fromEntries(shown.map((s) => [s.slot, { size: s.size, newest: s.tips }])),
        },
        null,
        2,
      );
    const lines = [
      `${file}: ${counts.tips} tips in ${counts.slots} slots from ${counts.episodes} episodes (embedder ${store.identity.embedder})`,
    ];
    for (const s of shown) {
      lines.push('', `## ${s.slot} (${s.size} tips; newest ${s.tips.length})`);
      for (const t of s.tips) lines.push(`  [score ${t.score}] ${t.text}`);
    }
    return lines.join('\n');
  } finally {
    store.close();
  }
}

export function showMemory(path: string, o: { task?: string; limit: number; json: boolean }): string {
  if (!Number.isInteger(o.limit) || o.limit < 1) throw new Error(`--limit must be a positive integer, got ${o.limit}`);
  const file = findMemoryFile(path);
  let raw: { embedder?: string; tips?: unknown };
  try {
    raw = JSON.parse(readFileSync(file, 'utf8'));
  } catch (e) {
    throw new Error(`${file} is corrupt (${(e as Error).message})`);
  }
  const memory = TipMemory.fromJSON(raw.tips, file);
  const slots = memory.slotNames();
  if (o.task !== undefined && !slots.includes(o.task))
    throw new Error(`${file} has no slot "${o.task}" (slots: ${slots.join(', ') || 'none'})`);
  const shown = o.task !== undefined ? [o.task] : slots;
  const entries = Object.fromEntries(shown.map((s) => [s, memory.entries(s).reverse().slice(0, o.limit)]));
  if (o.json)
    return JSON.stringify(
      {
        file,
        embedder: raw.embedder,
        total: memory.size(),
        slots: Object.fromEntries(shown.map((s) => [s, { size: memory.size(s), newest: entries[s] }])),
      },
      null,
      2,
    );
  const lines = [
    `${file}: ${memory.size()} tips in ${slots.length} slots (embedder ${raw.embedder ?? '?'}, capacity ${memory.settings.capacity} per slot)`,
  ];
  for (const s of shown) {
    lines.push('', `## ${s} (${memory.size(s)} tips; newest ${Math.min(o.limit, memory.size(s))})`);
    for (const e of entries[s]) lines.push(`  [score ${e.score}] ${e.text}`);
  }
  return lines.join('\n');
}
