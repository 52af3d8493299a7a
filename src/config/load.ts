/**
 * Reading a config: YAML or JSON file (with the `extends:` chain of files it builds on), then
 * `key.path=value` overrides from the command line, then schema validation with errors that name the
 * file(s), the key and what is wrong. Keys that moved under `experimental:` are read at their new
 * paths wherever they come from (moved-keys.ts), with a line saying so.
 */
import { readFileSync, existsSync } from 'node:fs';
import { basename, dirname, isAbsolute, join, resolve } from 'node:path';
import { parse as parseYaml } from 'yaml';
import { z } from 'zod';
import { lastModeDrawWins, moveOldKeys, movedOverride, PER_ROLLOUT } from './moved-keys.ts';
import { ConfigSchema, configProblems, type Config } from './schema.ts';

export class ConfigError extends Error {}

/** Where the "X is now Y (read as such)" lines about moved keys go. */
export type Notice = (line: string) => void;

const printed = new Set<string>();
/** stderr, each line once per process (a resume reads its --set lines twice). */
const printNotice: Notice = (line) => {
  if (printed.has(line)) return;
  printed.add(line);
  process.stderr.write(line + '\n');
};

export function loadConfig(file: string | null, overrides: string[] = [], notice: Notice = printNotice): Config {
  const { raw, files, switchFromOldKey } = file ? readConfigFile(file, notice) : { raw: {}, files: [], switchFromOldKey: false };
  const setPaths = new Map<string, string>();
  let fromOldKey = switchFromOldKey;
  for (const o of overrides) {
    const { given, path } = applyOverride(raw, o, notice);
    const other = setPaths.get(path);
    if (other !== undefined && other !== given) {
      const [oldPath, newPath] = given === path ? [other, given] : [given, other];
      throw new ConfigError(`--set gives both ${oldPath} and ${newPath}, the old and the new path of one option; keep only ${newPath}`);
    }
    setPaths.set(path, given);
    // `--set algo.mode_draw=task` over an old `algo.mode_draw: rollout` replaces it, as it did (lastModeDrawWins).
    if (path === PER_ROLLOUT) fromOldKey = given !== path;
    else if (path === 'algo.mode_draw' && fromOldKey) {
      applyOverride(raw, `${PER_ROLLOUT}=false`, notice);
      fromOldKey = false;
    }
  }
  const source = files.length > 0 ? files.join(', extending ') : 'defaults';
  return validateConfig(raw, overrides.length > 0 ? `${source} + command-line overrides` : source);
}

/**
 * A config file's options, not yet validated, with its `extends:` chain resolved: the base file
 * (a path relative to the file that names it) is read first and the file's own keys are merged over
 * it, mappings key by key, scalars and lists replaced whole. `files` is the chain, the named file first.
 */
export function readConfigFile(
  file: string,
  notice: Notice = printNotice,
): { raw: Record<string, unknown>; files: string[]; switchFromOldKey: boolean } {
  const files: string[] = [];
  const layers: { options: Record<string, unknown>; rolloutDrawMoved: boolean }[] = [];
  for (let current: string | null = file; current !== null;) {
    const referrer = files.at(-1);
    if (files.some((f) => resolve(f) === resolve(current!))) {
      throw new ConfigError(`config files extend each other in a cycle: ${[...files, current].join(' -> ')}`);
    }
    files.push(current);
    const layer = readOneFile(current, referrer, notice);
    const base = layer.options.extends;
    delete layer.options.extends;
    layers.push(layer);
    if (base === undefined || base === null) current = null;
    else if (typeof base !== 'string' || base.trim() === '') {
      throw new ConfigError(`config file ${current}: extends must be the path of another config file, got ${JSON.stringify(base)}`);
    } else current = isAbsolute(base) ? base : join(dirname(current), base);
  }
  let raw: Record<string, unknown> = {};
  let switchFromOldKey = false;
  for (const layer of [...layers].reverse()) {
    switchFromOldKey = lastModeDrawWins(layer.options, switchFromOldKey, layer.rolloutDrawMoved);
    raw = mergeOver(raw, layer.options);
  }
  return { raw, files, switchFromOldKey };
}

/** One file's options, with keys that moved under `experimental:` at their new paths. */
function readOneFile(
  file: string,
  referrer: string | undefined,
  notice: Notice,
): { options: Record<string, unknown>; rolloutDrawMoved: boolean } {
  const named = referrer ? `${file} (extended by ${referrer})` : file;
  if (!existsSync(file)) throw new ConfigError(`config file not found: ${named}`);
  let parsed: unknown;
  try {
    parsed = parseYaml(readFileSync(file, 'utf8')) ?? {};
  } catch (e) {
    throw new ConfigError(`config file ${named} is not valid YAML/JSON: ${(e as Error).message}`);
  }
  if (!isMapping(parsed)) throw new ConfigError(`config file ${named} must hold a mapping of options at the top level`);
  const { raw, moved, clashes, rolloutDrawMoved } = moveOldKeys(parsed);
  if (clashes.length > 0) throw new ConfigError(`config file ${named}:\n` + clashes.map((c) => '  - ' + c).join('\n'));
  // A run's own config.yaml from before the move is the program's record, not the user's to rewrite.
  if (!isSavedRunConfig(file)) for (const m of moved) notice(`${file}: ${m} (read as such)`);
  return { options: raw, rolloutDrawMoved };
}

/** A run's config.yaml (written by `empo2 train` beside the run's metrics and checkpoints). */
function isSavedRunConfig(file: string): boolean {
  const dir = dirname(file);
  return basename(file) === 'config.yaml' && (existsSync(join(dir, 'metrics.jsonl')) || existsSync(join(dir, 'checkpoints')));
}

function isMapping(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** `top` over `base`: mappings merge key by key, anything else in `top` (scalar, list, null) replaces. */
function mergeOver(base: Record<string, unknown>, top: Record<string, unknown>): Record<string, unknown> {
  const merged: Record<string, unknown> = { ...base };
  for (const [key, value] of Object.entries(top)) {
    merged[key] = isMapping(value) && isMapping(base[key]) ? mergeOver(base[key], value) : value;
  }
  return merged;
}

/**
 * Validates raw options. Keys that moved under `experimental:` are read at their new paths here too,
 * silently: callers that read files or `--set` lines have already said so (loadConfig); others pass
 * options recorded by the program (an adapt report's memory settings).
 */
export function validateConfig(raw: unknown, source: string): Config {
  const move = isMapping(raw) ? moveOldKeys(raw) : null;
  if (move && move.clashes.length > 0)
    throw new ConfigError(`invalid config (${source}):\n` + move.clashes.map((c) => '  - ' + c).join('\n'));
  const result = ConfigSchema.safeParse(move ? move.raw : raw);
  if (result.success) {
    const problems = configProblems(result.data);
    if (problems.length === 0) return result.data;
    throw new ConfigError(`invalid config (${source}):\n` + problems.map((p) => '  - ' + p).join('\n'));
  }
  throw new ConfigError(`invalid config (${source}):\n` + result.error.issues.map((i) => '  - ' + describeIssue(i)).join('\n'));
}

function describeIssue(issue: z.core.$ZodIssue): string {
  const at = issue.path.join('.');
  if (issue.code === 'unrecognized_keys') {
    return issue.keys
      .map((k) => {
        const key = at ? `${at}.${k}` : k;
        if (/^(api_?key|key|token|secret|authorization)$/i.test(k) && closestKey(at, 'api_key_env') === 'api_key_env')
          return `${key}: a key never goes into a config; put it in an environment variable and name that variable in ${at}.api_key_env`;
        const near = closestKey(at, k);
        return `${key}: unknown option${near ? ` (did you mean "${near}"?)` : ''}`;
      })
      .join('\n  - ');
  }
  return `${at || '(top level)'}: ${issue.message}`;
}

/**
 * Sets `a.b.c=value` in a nested object; the value is read as YAML so numbers, booleans and null keep
 * their type. A path that moved under `experimental:` is set at its new place (with a notice).
 * Returns the path as given and the path set.
 */
export function applyOverride(
  target: Record<string, unknown>,
  assignment: string,
  notice: Notice = printNotice,
): { given: string; path: string } {
  const eq = assignment.indexOf('=');
  if (eq <= 0) throw new ConfigError(`override "${assignment}" must look like key.path=value`);
  const given = assignment.slice(0, eq).trim();
  const parsed = parseYaml(assignment.slice(eq + 1));
  const move = movedOverride(given, parsed);
  if (move) notice(`--set ${move.moved} (read as such)`);
  const path = (move ? move.path : given).split('.');
  const value = move ? move.value : parsed;
  let node = target;
  for (const key of path.slice(0, -1)) {
    const next = node[key];
    if (next === undefined || next === null) node[key] = {};
    else if (typeof next !== 'object' || Array.isArray(next)) throw new ConfigError(`override "${assignment}": ${key} is not a section`);
    node = node[key] as Record<string, unknown>;
  }
  node[path[path.length - 1]] = value;
  return { given, path: path.join('.') };
}

export interface OptionEntry {
  /** Dotted key, e.g. algo.clip_low. */
  path: string;
  default: unknown;
  description: string;
  /** A key that must be given when its section is (inside a section that defaults to null). */
  required?: boolean;
}

/**
 * Every option in schema order: nested sections are walked, `options` mappings are leaves, and a
 * section that defaults to null (model.lora, rollout.remote) is listed itself, then the keys it
 * takes when given, with the defaults they get then.
 */
export function optionEntries(): OptionEntry[] {
  const entries: OptionEntry[] = [];
  const defaults = ConfigSchema.parse({}) as Record<string, unknown>;
  const walk = (schema: z.ZodType, prefix: string, defaultsHere: unknown) => {
    const shape = objectShape(schema);
    if (!shape) return;
    for (const [key, child] of Object.entries(shape)) {
      const path = prefix ? `${prefix}.${key}` : key;
      const value = (defaultsHere as Record<string, unknown>)?.[key];
      const inner = key === 'options' ? null : objectShape(child as z.ZodType);
      if (inner && value && typeof value === 'object' && !Array.isArray(value)) {
        walk(child as z.ZodType, path, value);
        continue;
      }
      entries.push({ path, default: value, description: (child as z.ZodType).description ?? '' });
      if (inner && value === null) {
        for (const [innerKey, field] of Object.entries(inner)) {
          const given = field.safeParse(undefined);
          entries.push({
            path: `${path}.${innerKey}`,
            default: given.success ? given.data : undefined,
            description: field.description ?? '',
            ...(given.success ? {} : { required: true }),
          });
        }
      }
    }
  };
  walk(ConfigSchema, '', defaults);
  return entries;
}

/** What a top-level section as a whole is for, where the schema says (e.g. experimental); else null. */
function sectionDescription(section: string): string | null {
  return objectShape(ConfigSchema)?.[section]?.description ?? null;
}

/** Every option with its default and description, for `--help`; a described section starts with a line saying what it is. */
export function describeOptions(): string[] {
  const lines: string[] = [];
  let section = '';
  for (const o of optionEntries()) {
    const here = o.path.split('.')[0];
    const about = here !== section && o.path.includes('.') ? sectionDescription(here) : null;
    if (about) lines.push(`  ${`${here}.*`.padEnd(35)} ${''.padEnd(16)} ${about}`);
    section = here;
    lines.push(`  ${o.path.padEnd(35)} ${(o.required ? '(required)' : JSON.stringify(o.default)).padEnd(16)} ${o.description}`);
  }
  return lines;
}

/** docs/CONFIG.md: the options as tables, one per section, generated from the schema (npm run docs:config). */
export function configReference(): string {
  const cell = (text: string) => text.replace(/\|/g, '\\|').replace(/\n/g, ' ');
  const sections = new Map<string, OptionEntry[]>();
  for (const o of optionEntries()) {
    const section = o.path.includes('.') ? o.path.split('.')[0] : '(top level)';
    sections.set(section, [...(sections.get(section) ?? []), o]);
  }
  const out = [
    '# Configuration reference',
    '',
    'Generated from `src/config/schema.ts` by `npm run docs:config`; do not edit by hand. A config file (YAML or',
    'JSON) sets any of these keys, may start from another file with `extends:` (configs/README.md), and',
    '`--set key=value` overrides one on the command line. `empo2 train --help` prints the same list.',
  ];
  for (const [section, entries] of sections) {
    const about = sectionDescription(section);
    out.push(
      '',
      `## ${section}`,
      '',
      ...(about ? [about[0].toUpperCase() + about.slice(1) + '.', ''] : []),
      '| key | default | what it does |',
      '|---|---|---|',
    );
    for (const o of entries)
      out.push(
        `| \`${o.path}\` | ${o.required ? 'required' : `\`${cell(JSON.stringify(o.default) ?? 'none')}\``} | ${cell(o.description)} |`,
      );
  }
  return out.join('\n') + '\n';
}

function objectShape(schema: z.ZodType): Record<string, z.ZodType> | null {
  let s: z.ZodType = schema;
  // Unwrap defaults/prefaults to reach the object underneath.
  for (let i = 0; i < 5; i++) {
    const def = (s as unknown as { _zod: { def: { type: string; innerType?: z.ZodType; shape?: Record<string, z.ZodType> } } })._zod.def;
    if (def.type === 'object') return def.shape ?? null;
    if (def.innerType) s = def.innerType;
    else return null;
  }
  return null;
}

function closestKey(sectionPath: string, key: string): string | null {
  let node: z.ZodType | undefined = ConfigSchema;
  for (const part of sectionPath ? sectionPath.split('.') : []) node = node ? objectShape(node)?.[part] : undefined;
  const shape = node ? objectShape(node) : null;
  if (!shape) return null;
  let best: string | null = null;
  let bestDistance = Infinity;
  for (const candidate of Object.keys(shape)) {
    const d = editDistance(key, candidate);
    if (d < bestDistance) {
      bestDistance = d;
      best = candidate;
    }
  }
  return bestDistance <= Math.max(2, key.length / 3) ? best : null;
}

function editDistance(a: string, b: string): number {
  const dp = Array.from({ length: a.length + 1 }, (_, i) => [i, ...new Array<number>(b.length).fill(0)]);
  for (let j = 1; j <= b.length; j++) dp[0][j] = j;
  for (let i = 1; i <= a.length; i++)
    for (let j = 1; j <= b.length; j++)
      dp[i][j] = Math.min(dp[i - 1][j] + 1, dp[i][j - 1] + 1, dp[i - 1][j - 1] + (a[i - 1] === b[j - 1] ? 0 : 1));
  return dp[a.length][b.length];
}
