/**
 * `model.path` (and the model arguments of eval, adapt and serve) may name a .gguf file: it is
 * imported once into a folder beside it, `<name>-hf/` for `<name>.gguf`, and that folder is used
 * from then on. The import is redone when the file changes (size or modification time) or when
 * this code's output format does; two processes importing at once each write their own
 * temporary folder and the last rename wins, so neither ever reads a half-written one.
 */
import { existsSync, readFileSync, statSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { IMPORT_FORMAT, IMPORT_RECORD, importGguf } from './import.ts';

export const isGgufPath = (path: string): boolean => path.toLowerCase().endsWith('.gguf');

/** Where a .gguf file's import is cached. */
export function ggufCacheDir(ggufPath: string): string {
  return join(dirname(ggufPath), `${basename(ggufPath).replace(/\.gguf$/i, '')}-hf`);
}

/** True when `dir` holds a complete import of `ggufPath` as it is now, by this format. */
export function isCurrentImport(dir: string, ggufPath: string): boolean {
  const recordPath = join(dir, IMPORT_RECORD);
  if (!existsSync(recordPath)) return false;
  try {
    const record = JSON.parse(readFileSync(recordPath, 'utf8')) as { format?: unknown; source_bytes?: unknown; source_mtime_ms?: unknown };
    const source = statSync(ggufPath);
    return record.format === IMPORT_FORMAT && record.source_bytes === source.size && record.source_mtime_ms === source.mtimeMs;
  } catch {
    return false;
  }
}

/**
 * A model directory for `path`: the path itself unless it names a .gguf file, else that file's
 * cached import (made now if missing or stale). `log` gets a line before an import starts.
 */
export async function resolveModelPath(path: string, log: (line: string) => void = (l) => console.error(l)): Promise<string> {
  if (!isGgufPath(path)) return path;
  if (!existsSync(path) || !statSync(path).isFile()) throw new Error(`${path}: no such GGUF file`);
  const dir = ggufCacheDir(path);
  if (isCurrentImport(dir, path)) return dir;
  log(`importing ${path} into ${dir} (once; reused while the file is unchanged)`);
  try {
    await importGguf(path, dir, { replace: true, log });
  } catch (e) {
    // Another process (a parallel `compare` run) may have finished the same import first.
    if (isCurrentImport(dir, path)) return dir;
    throw e;
  }
  return dir;
}
