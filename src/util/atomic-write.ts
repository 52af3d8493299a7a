import { renameSync, writeFileSync } from 'node:fs';

/** Writes `text` to `path` through a temporary file and a rename, so a kill leaves the old file or the new one, never half of one. */
export function writeTextAtomic(path: string, text: string): void {
  const tmp = `${path}.tmp-${process.pid}`;
  writeFileSync(tmp, text);
  renameSync(tmp, path);
}

/** `value` as indented JSON, written as writeTextAtomic writes, so a reader never sees half a file. */
export function writeJsonAtomic(path: string, value: unknown): void {
  writeTextAtomic(path, JSON.stringify(value, null, 2) + '\n');
}
