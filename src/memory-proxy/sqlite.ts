/**
 * better-sqlite3, loaded when a proxy database is first opened rather than when the package is: the
 * trainer, `empo2 serve` and the rest never need it, and a clone whose native binding did not build
 * still runs them. Loaded with `require` (the package is CommonJS) and typed here for the few calls
 * the store makes, so no `@types` package is needed.
 *
 * Why better-sqlite3: a synchronous API (a commit returns only once SQLite has it, so an answer the
 * client gets after it means the tip is on disk), prebuilt binaries for the Node versions this package
 * supports, SQLite's write-ahead log, and no server. 12.x: 13.x crashes on Node 20.
 */
import { createRequire } from 'node:module';

export interface Statement<R = unknown> {
  run(...params: unknown[]): { changes: number; lastInsertRowid: number | bigint };
  get(...params: unknown[]): R | undefined;
  all(...params: unknown[]): R[];
  iterate(...params: unknown[]): IterableIterator<R>;
}

export interface Database {
  prepare<R = unknown>(sql: string): Statement<R>;
  exec(sql: string): void;
  pragma(source: string, options?: { simple?: boolean }): unknown;
  transaction<A extends unknown[], T>(fn: (...args: A) => T): (...args: A) => T;
  close(): void;
  readonly open: boolean;
}

type DatabaseConstructor = new (file: string, options?: { readonly?: boolean; fileMustExist?: boolean; timeout?: number }) => Database;

let loaded: DatabaseConstructor | null = null;

/** The package, or an error that says how to install it. */
export function sqlite(): DatabaseConstructor {
  if (loaded) return loaded;
  try {
    loaded = createRequire(import.meta.url)('better-sqlite3') as DatabaseConstructor;
  } catch (e) {
    throw new Error(
      `the tip database needs better-sqlite3 (npm install better-sqlite3@12.11.1, with its install script allowed so its native binding is built or downloaded): ${(e as Error).message.split('\n')[0]}`,
    );
  }
  return loaded;
}

/** Whether `file` starts as an SQLite database does (the 16-byte header), so `memory show` can tell it from a memory.json. */
export function isSqliteFile(head: Buffer): boolean {
  return head.subarray(0, 16).toString('latin1') === 'SQLite format 3\u0000';
}
