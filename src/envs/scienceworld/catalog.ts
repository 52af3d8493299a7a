/**
 * The ScienceWorld task catalog: the 30 official tasks, their variation counts and the
 * simulator's own train / dev / test splits.
 *
 * The Env interface asks for tasks and splits synchronously, and a config should be
 * checkable without starting a JVM, so the catalog is read from catalog.json, which
 * generate-catalog.ts extracts from the simulator itself (PythonInterface.getSets()).
 * catalog.test.ts checks the file against a live simulator, and every simulator start
 * compares its package version with the one recorded here.
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { z } from 'zod';
import type { Split } from '../types.ts';

export const CATALOG_PATH = fileURLToPath(new URL('./catalog.json', import.meta.url));

const variationList = z.array(z.number().int().nonnegative());

const taskSchema = z.object({
  name: z.string().min(1),
  /** The paper's task id, e.g. "1-1". */
  id: z.string().min(1),
  topic: z.string().min(1),
  /** The paper's task title, e.g. "Changes of State (Boiling)". */
  title: z.string().min(1),
  maxVariations: z.number().int().positive(),
  train: variationList,
  dev: variationList,
  test: variationList,
});

export const catalogSchema = z.object({
  scienceworldVersion: z.string().min(1),
  tasks: z.array(taskSchema).min(1),
});

export type ScienceWorldTask = z.infer<typeof taskSchema>;
export type ScienceWorldCatalog = z.infer<typeof catalogSchema>;

export function parseCatalog(data: unknown, source: string): ScienceWorldCatalog {
  const parsed = catalogSchema.safeParse(data);
  if (!parsed.success) {
    throw new Error(`invalid ScienceWorld catalog in ${source}: ${z.prettifyError(parsed.error)}`);
  }
  return parsed.data;
}

let cached: ScienceWorldCatalog | undefined;

export function loadCatalog(): ScienceWorldCatalog {
  if (!cached) {
    let text: string;
    try {
      text = readFileSync(CATALOG_PATH, 'utf8');
    } catch (error) {
      throw new Error(
        `cannot read the ScienceWorld catalog ${CATALOG_PATH}: ${(error as Error).message}; regenerate it with 'npx tsx src/envs/scienceworld/generate-catalog.ts'`,
      );
    }
    cached = parseCatalog(JSON.parse(text), CATALOG_PATH);
  }
  return cached;
}

export function taskNames(catalog: ScienceWorldCatalog = loadCatalog()): string[] {
  return catalog.tasks.map((task) => task.name);
}

/** The catalog entry of a task, or an error that lists the valid names. */
export function getTask(name: string, catalog: ScienceWorldCatalog = loadCatalog()): ScienceWorldTask {
  const task = catalog.tasks.find((entry) => entry.name === name);
  if (!task) {
    throw new Error(`unknown ScienceWorld task '${name}'; the tasks are: ${taskNames(catalog).join(', ')}`);
  }
  return task;
}

export function splitVariations(name: string, split: Split, catalog: ScienceWorldCatalog = loadCatalog()): number[] {
  const task = getTask(name, catalog);
  if (split !== 'train' && split !== 'dev' && split !== 'test') {
    throw new Error(`unknown split '${String(split)}' for ScienceWorld task '${name}'; use train, dev or test`);
  }
  return [...task[split]];
}
