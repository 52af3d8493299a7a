import { renameSync, writeFileSync } from 'node:fs';

/** Writes JSON through a temporary file and a rename, so a reader never sees half a file. */
export function writeJsonAtomic(path: string, value: unknown): void {
  const tmp = `${path}.tmp-${process.pid}`;
  writeFileSync(tmp, JSON.stringify(value, null, 2) + '\n');
  renameSync(tmp, path);
}
