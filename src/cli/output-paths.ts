/**
 * Output paths named on the command line are checked before the work that fills them (an
 * evaluation, a warm-up, a comparison can take hours), so a typo fails at once, naming the option.
 */
import { accessSync, constants, existsSync, statSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { ConfigError } from '../config/load.ts';

/** A file to be written: its folder exists and is writable, and the path is not a folder. */
export function checkOutputFile(path: string, option: string): void {
  const full = resolve(path);
  if (existsSync(full) && statSync(full).isDirectory()) throw new ConfigError(`${option} ${path}: is a folder; give a file name`);
  const dir = dirname(full);
  if (!existsSync(dir)) throw new ConfigError(`${option} ${path}: the folder ${dir} does not exist`);
  if (!statSync(dir).isDirectory()) throw new ConfigError(`${option} ${path}: ${dir} is not a folder`);
  writable(dir, `${option} ${path}`);
}

/** A folder to be created or filled: the path is not a file, and the nearest existing folder on it is writable. */
export function checkOutputDir(path: string, option: string): void {
  let dir = resolve(path);
  while (!existsSync(dir)) dir = dirname(dir);
  if (!statSync(dir).isDirectory()) throw new ConfigError(`${option} ${path}: ${dir} is a file, not a folder`);
  writable(dir, `${option} ${path}`);
}

function writable(dir: string, what: string): void {
  try {
    accessSync(dir, constants.W_OK);
  } catch (e) {
    throw new ConfigError(`${what}: cannot write in ${dir} (${(e as NodeJS.ErrnoException).code})`);
  }
}
