/**
 * Text for training the default tiny tokenizer on ScienceWorld: task descriptions, observations,
 * the gold actions and a sample of the valid actions, per task.
 *
 * Producing it needs the simulator (a JVM and gold-path replays, about a minute for all 30
 * tasks), while building a policy should take seconds and work without Java. So the text is
 * generated once into corpus.json (shipped, like catalog.json) and read from there.
 *
 *   npx tsx src/envs/scienceworld/corpus.ts            # regenerate corpus.json (2 simulators)
 *   npx tsx src/envs/scienceworld/corpus.ts --check    # exit 1 if corpus.json is missing a task
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { z } from 'zod';
import { getTask, loadCatalog, taskNames } from './catalog.ts';
import { goldReplayOptions } from './gold.ts';
import { ScienceWorldPool } from './pool.ts';

export const CORPUS_PATH = fileURLToPath(new URL('./corpus.json', import.meta.url));

/** Train variations replayed per task: enough for the word pieces of every task's objects and rooms. */
const VARIATIONS_PER_TASK = 2;
/**
 * Valid-action lists run to thousands of object combinations; a few hundred per task already
 * contain every verb pattern, and more would only swell the file.
 */
const VALID_ACTIONS_PER_TASK = 300;

const corpusSchema = z.object({
  scienceworldVersion: z.string().min(1),
  tasks: z.record(z.string(), z.array(z.string())),
});

export type ScienceWorldCorpus = z.infer<typeof corpusSchema>;

export function loadCorpus(path = CORPUS_PATH): ScienceWorldCorpus {
  if (!existsSync(path)) {
    throw new Error(`the ScienceWorld tokenizer corpus ${path} is missing; regenerate it with 'npx tsx src/envs/scienceworld/corpus.ts'`);
  }
  const parsed = corpusSchema.safeParse(JSON.parse(readFileSync(path, 'utf8')));
  if (!parsed.success) throw new Error(`${path} is not a valid ScienceWorld corpus:\n${z.prettifyError(parsed.error)}`);
  return parsed.data;
}

/** The corpus lines of the given tasks (all tasks when none are given), in catalog order. */
export function scienceWorldCorpus(tasks?: readonly string[], path = CORPUS_PATH): string[] {
  const corpus = loadCorpus(path);
  const wanted = tasks && tasks.length > 0 ? tasks : taskNames();
  const lines: string[] = [];
  for (const task of wanted) {
    getTask(task);
    const text = corpus.tasks[task];
    if (!text)
      throw new Error(`${path} has no text for ScienceWorld task '${task}'; regenerate it with 'npx tsx src/envs/scienceworld/corpus.ts'`);
    lines.push(...text);
  }
  return lines;
}

/** Evenly spaced picks, so the sample spans the whole (sorted) list rather than its first verbs. */
function spread<T>(items: readonly T[], count: number): T[] {
  if (items.length <= count) return [...items];
  return Array.from({ length: count }, (_, i) => items[Math.floor((i * items.length) / count)]);
}

async function taskText(pool: ScienceWorldPool, task: string): Promise<string[]> {
  const lines = new Set<string>();
  const offered = new Set<string>();
  for (const variation of getTask(task).train.slice(0, VARIATIONS_PER_TASK)) {
    await pool.use(async (env) => {
      const first = await env.reset(task, variation);
      lines.add(first.task);
      lines.add(first.observation);
      first.validActions.forEach((action) => offered.add(action));
      for (const action of env.goldActions()) {
        const result = await env.step(action);
        lines.add(action);
        lines.add(result.observation);
        if (result.done) break;
      }
    });
  }
  return [...lines, ...spread([...offered].sort(), VALID_ACTIONS_PER_TASK)];
}

async function main(): Promise<void> {
  const { values } = parseArgs({ options: { check: { type: 'boolean', default: false }, pool: { type: 'string', default: '2' } } });
  if (values.check) {
    const corpus = loadCorpus();
    const missing = taskNames().filter((task) => !corpus.tasks[task]?.length);
    const version = loadCatalog().scienceworldVersion;
    if (missing.length > 0 || corpus.scienceworldVersion !== version) {
      console.error(
        `${CORPUS_PATH} is out of date (missing tasks: ${missing.join(', ') || 'none'}; made with ${corpus.scienceworldVersion}, catalog ${version})`,
      );
      process.exitCode = 1;
    } else {
      console.log(`${CORPUS_PATH} covers all ${taskNames().length} tasks`);
    }
    return;
  }
  const poolSize = Number(values.pool);
  const pool = new ScienceWorldPool(poolSize, goldReplayOptions());
  const tasks: Record<string, string[]> = {};
  const queue = taskNames();
  const started = performance.now();
  try {
    await pool.start();
    await Promise.all(
      Array.from({ length: poolSize }, async () => {
        for (let task = queue.shift(); task; task = queue.shift()) tasks[task] = await taskText(pool, task);
      }),
    );
  } finally {
    await pool.close();
  }
  // Catalog order, one task per line: stable diffs whichever simulator finished first.
  const body = taskNames()
    .map((task) => `    ${JSON.stringify(task)}: ${JSON.stringify(tasks[task])}`)
    .join(',\n');
  writeFileSync(
    CORPUS_PATH,
    `{\n  "scienceworldVersion": ${JSON.stringify(loadCatalog().scienceworldVersion)},\n  "tasks": {\n${body}\n  }\n}\n`,
  );
  const chars = Object.values(tasks).reduce((sum, lines) => sum + lines.join('\n').length, 0);
  console.log(
    `wrote ${CORPUS_PATH}: ${taskNames().length} tasks, ${chars} characters, ${((performance.now() - started) / 1000).toFixed(0)} s`,
  );
}

if (import.meta.url === `file://${process.argv[1]}`) {
  main().catch((error: unknown) => {
    console.error(error instanceof Error ? error.message : error);
    process.exit(1);
  });
}
