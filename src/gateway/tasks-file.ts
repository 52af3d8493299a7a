/**
 * Tasks files for `empo2 train --agent` (`--tasks`, `--eval-tasks`): one task per line, blank lines
 * skipped. By default every line must be a JSON value (`{"word": "apple"}`, `"a string task"`), so that
 * a line cut short or mistyped is named by its number before the run starts, instead of reaching the
 * agent as a string; `--tasks-as-text` reads every line as a plain-text task instead. The file must be
 * UTF-8: a byte that is not is named by its line, rather than turned into U+FFFD in the task.
 */
import { existsSync, readFileSync, statSync } from 'node:fs';
import { ConfigError } from '../config/load.ts';

export interface TasksFileOptions {
  /** The option that named the file, for errors (`--tasks`). */
  flag: string;
  /** Each line is a task's text (a string), not JSON. */
  asText?: boolean;
}

/** The second byte's range of a multi-byte lead (no overlong forms, no surrogates, nothing past U+10FFFF), and its continuation count. */
function leadOf(c: number): { more: number; lo: number; hi: number } | null {
  if (c >= 0xc2 && c <= 0xdf) return { more: 1, lo: 0x80, hi: 0xbf };
  if (c === 0xe0) return { more: 2, lo: 0xa0, hi: 0xbf };
  if (c === 0xed) return { more: 2, lo: 0x80, hi: 0x9f };
  if (c >= 0xe1 && c <= 0xef) return { more: 2, lo: 0x80, hi: 0xbf };
  if (c === 0xf0) return { more: 3, lo: 0x90, hi: 0xbf };
  if (c >= 0xf1 && c <= 0xf3) return { more: 3, lo: 0x80, hi: 0xbf };
  if (c === 0xf4) return { more: 3, lo: 0x80, hi: 0x8f };
  return null;
}

/** Where (line and byte column, from 1) the first byte of `bytes` that is not UTF-8 is, or null when all of it is. */
export function firstNonUtf8Byte(bytes: Uint8Array): { line: number; column: number } | null {
  let line = 1;
  let lineStart = 0;
  for (let i = 0; i < bytes.length;) {
    const c = bytes[i];
    if (c < 0x80) {
      if (c === 0x0a) [line, lineStart] = [line + 1, i + 1];
      i++;
      continue;
    }
    const lead = leadOf(c);
    let ok = lead !== null && i + lead.more < bytes.length;
    for (let k = 1; ok && k <= lead!.more; k++) {
      const [lo, hi] = k === 1 ? [lead!.lo, lead!.hi] : [0x80, 0xbf];
      ok = bytes[i + k] >= lo && bytes[i + k] <= hi;
    }
    if (!ok) return { line, column: i - lineStart + 1 };
    i += lead!.more + 1;
  }
  return null;
}

/** The file's text, refused by line and column where it is not UTF-8. */
function readUtf8(file: string, flag: string): string {
  const bytes = readFileSync(file);
  const bad = firstNonUtf8Byte(bytes);
  if (bad)
    throw new ConfigError(
      `${flag}: ${file} line ${bad.line} is not UTF-8 text (its byte ${bad.column} is not part of a UTF-8 character); save the file as UTF-8`,
    );
  return new TextDecoder('utf-8').decode(bytes);
}

const shown = (line: string) => (line.length > 80 ? `${line.slice(0, 77)}...` : line);

/** A line as a task: its JSON value, or its text with `asText`. */
function taskOf(line: string, at: { file: string; n: number; flag: string; asText: boolean }): unknown {
  if (at.asText) return line;
  try {
    return JSON.parse(line) as unknown;
  } catch (e) {
    throw new ConfigError(
      `${at.flag}: ${at.file} line ${at.n} is not valid JSON (${(e as Error).message}): ${shown(line)}\n` +
        `each line is one task as a JSON value (write a text task as a JSON string, "like this"), or pass --tasks-as-text to read every line as a text task`,
    );
  }
}

/** The tasks of a tasks file, in order; a ConfigError names the file and line of anything wrong. */
export function readTasksFile(file: string, o: TasksFileOptions): unknown[] {
  if (!existsSync(file)) throw new ConfigError(`${o.flag}: no file ${file}`);
  if (!statSync(file).isFile()) throw new ConfigError(`${o.flag}: ${file} is not a file`);
  const tasks: unknown[] = [];
  readUtf8(file, o.flag)
    .split('\n')
    .forEach((raw, i) => {
      const line = raw.trim();
      if (line.length > 0) tasks.push(taskOf(line, { file, n: i + 1, flag: o.flag, asText: o.asText ?? false }));
    });
  if (tasks.length === 0) throw new ConfigError(`${o.flag}: ${file} holds no task (one per line)`);
  return tasks;
}
