/** `empo2 memory show`: a run's tip memory as text (or JSON), per slot, newest entries first. */
import type { Command } from 'commander';
import { readFileSync } from 'node:fs';
import { findMemoryFile } from '../../memory/memory-file.ts';
import { TipMemory } from '../../memory/store.ts';

export function register(program: Command): void {
  const memoryCommand = program.command('memory').description('inspect a tip memory');
  memoryCommand
    .command('show')
    .description("print a run's tip memory: entries per slot, newest first")
    .argument('<path>', 'a run directory (its latest checkpoint), a checkpoint directory, or a memory.json file')
    .option('--task <name>', 'only this slot (a task, or task#variation with per-variation slots)')
    .option('--limit <n>', 'entries shown per slot', '10')
    .option('--json', 'print the entries as JSON')
    .action(async (path: string, opts) => {
      console.log(showMemory(path, { task: opts.task, limit: Number(opts.limit), json: !!opts.json }));
    });
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
