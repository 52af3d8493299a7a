/**
 * Reading a config: YAML or JSON file (with the `extends:` chain of files it builds on), then
 * `key.path=value` overrides from the command line, then schema validation with errors that name the
 * file(s), the key and what is wrong.
 */
import { readFileSync, existsSync } from 'node:fs';
import { dirname, isAbsolute, join, resolve } from 'node:path';
import { parse as parseYaml } from 'yaml';
import { z } from 'zod';
import { ConfigSchema, configProblems, type Config } from './schema.ts';

export class ConfigError extends Error {}

export function loadConfig(file: string | null, overrides: string[] = []): Config {
  const { raw, files } = file ? readConfigFile(file) : { raw: {}, files: [] };
  for (const o of overrides) applyOverride(raw, o);
  const source = files.length > 0 ? files.join(', extending ') : 'defaults';
  return validateConfig(raw, overrides.length > 0 ? `${source} + command-line overrides` : source);
}

/**
 * A config file's options, not yet validated, with its `extends:` chain resolved: the base file
 * (a path relative to the file that names it) is read first and the file's own keys are merged over
 * it, mappings key by key, scalars and lists replaced whole. `files` is the chain, the named file first.
 */
export function readConfigFile(file: string): { raw: Record<string, unknown>; files: string[] } {
  const files: string[] = [];
  const layers: Record<string, unknown>[] = [];
  for (let current: string | null = file; current !== null; ) {
    const referrer = files.at(-1);
    if (files.some((f) => resolve(f) === resolve(current!))) {
      throw new ConfigError(`config files extend each other in a cycle: ${[...files, current].join(' -> ')}`);
    }
    files.push(current);
    const layer = readOneFile(current, referrer);
    const base = layer.extends;
    delete layer.extends;
    layers.push(layer);
    if (base === undefined || base === null) current = null;
    else if (typeof base !== 'string' || base.trim() === '') {
      throw new ConfigError(`config file ${current}: extends must be the path of another config file, got ${JSON.stringify(base)}`);
    } else current = isAbsolute(base) ? base : join(dirname(current), base);
  }
  const raw = layers.reduceRight<Record<string, unknown>>((merged, layer) => mergeOver(merged, layer), {});
  return { raw, files };
}

function readOneFile(file: string, referrer: string | undefined): Record<string, unknown> {
  const named = referrer ? `${file} (extended by ${referrer})` : file;
  if (!existsSync(file)) throw new ConfigError(`config file not found: ${named}`);
  let parsed: unknown;
  try {
    parsed = parseYaml(readFileSync(file, 'utf8')) ?? {};
  } catch (e) {
    throw new ConfigError(`config file ${named} is not valid YAML/JSON: ${(e as Error).message}`);
  }
  if (!isMapping(parsed)) throw new ConfigError(`config file ${named} must hold a mapping of options at the top level`);
  return parsed;
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

export function validateConfig(raw: unknown, source: string): Config {
  const result = ConfigSchema.safeParse(raw);
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
        const near = closestKey(at, k);
        return `${key}: unknown option${near ? ` (did you mean "${near}"?)` : ''}`;
      })
      .join('\n  - ');
  }
  return `${at || '(top level)'}: ${issue.message}`;
}

/** Sets `a.b.c=value` in a nested object; the value is read as YAML so numbers, booleans and null keep their type. */
export function applyOverride(target: Record<string, unknown>, assignment: string): void {
  const eq = assignment.indexOf('=');
  if (eq <= 0) throw new ConfigError(`override "${assignment}" must look like key.path=value`);
  const path = assignment.slice(0, eq).trim().split('.');
  const value = parseYaml(assignment.slice(eq + 1));
  let node = target;
  for (const key of path.slice(0, -1)) {
    const next = node[key];
    if (next === undefined || next === null) node[key] = {};
    else if (typeof next !== 'object' || Array.isArray(next)) throw new ConfigError(`override "${assignment}": ${key} is not a section`);
    node = node[key] as Record<string, unknown>;
  }
  node[path[path.length - 1]] = value;
}

export interface OptionEntry {
  /** Dotted key, e.g. algo.clip_low. */
  path: string;
  default: unknown;
  description: string;
}

/** Every option in schema order: nested sections are walked, `options` mappings and nullable sections are leaves. */
export function optionEntries(): OptionEntry[] {
  const entries: OptionEntry[] = [];
  const defaults = ConfigSchema.parse({}) as Record<string, unknown>;
  const walk = (schema: z.ZodType, prefix: string, defaultsHere: unknown) => {
    const shape = objectShape(schema);
    if (!shape) return;
    for (const [key, child] of Object.entries(shape)) {
      const path = prefix ? `${prefix}.${key}` : key;
      const value = (defaultsHere as Record<string, unknown>)?.[key];
      if (objectShape(child as z.ZodType) && value && typeof value === 'object' && !Array.isArray(value) && key !== 'options') {
        walk(child as z.ZodType, path, value);
      } else {
        entries.push({ path, default: value, description: (child as z.ZodType).description ?? '' });
      }
    }
  };
  walk(ConfigSchema, '', defaults);
  return entries;
}

/** Every option with its default and description, for `--help`. */
export function describeOptions(): string[] {
  return optionEntries().map((o) => `  ${o.path.padEnd(28)} ${JSON.stringify(o.default)?.padEnd(16)} ${o.description}`);
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
    out.push('', `## ${section}`, '', '| key | default | what it does |', '|---|---|---|');
    for (const o of entries) out.push(`| \`${o.path}\` | \`${cell(JSON.stringify(o.default) ?? 'none')}\` | ${cell(o.description)} |`);
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
    for (let j = 1; j <= b.length; j++) dp[i][j] = Math.min(dp[i - 1][j] + 1, dp[i][j - 1] + 1, dp[i - 1][j - 1] + (a[i - 1] === b[j - 1] ? 0 : 1));
  return dp[a.length][b.length];
}
