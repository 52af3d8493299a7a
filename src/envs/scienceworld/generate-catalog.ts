/**
 * Regenerates catalog.json from the installed simulator: task names, paper ids and titles,
 * variation counts and the official train / dev / test splits.
 *
 *   npx tsx src/envs/scienceworld/generate-catalog.ts          # rewrite catalog.json
 *   npx tsx src/envs/scienceworld/generate-catalog.ts --check  # exit 1 if it is out of date
 *
 * Run it after changing the pinned scienceworld version in scripts/requirements-scienceworld.txt.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { CATALOG_PATH, parseCatalog, type ScienceWorldCatalog } from './catalog.ts';
import { Simulator } from './simulator.ts';

export async function readCatalogFromSimulator(simulator: Simulator): Promise<ScienceWorldCatalog> {
  const raw = await simulator.call<unknown>('catalog', {}, 300_000);
  return parseCatalog(raw, 'the running simulator');
}

/** One task per line keeps the file reviewable in diffs despite its long variation lists. */
export function formatCatalog(catalog: ScienceWorldCatalog): string {
  const tasks = catalog.tasks.map((task) => '    ' + JSON.stringify(task));
  return `{\n  "scienceworldVersion": ${JSON.stringify(catalog.scienceworldVersion)},\n  "tasks": [\n${tasks.join(',\n')}\n  ]\n}\n`;
}

async function main(): Promise<void> {
  const check = process.argv.includes('--check');
  const simulator = await Simulator.start();
  try {
    const text = formatCatalog(await readCatalogFromSimulator(simulator));
    if (check) {
      const current = readFileSync(CATALOG_PATH, 'utf8');
      if (current !== text) {
        console.error(`${CATALOG_PATH} differs from the installed simulator; rerun without --check to regenerate it`);
        process.exitCode = 1;
      } else {
        console.log(`${CATALOG_PATH} matches the installed simulator`);
      }
    } else {
      writeFileSync(CATALOG_PATH, text);
      console.log(`wrote ${CATALOG_PATH}`);
    }
  } finally {
    await simulator.close();
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  main().catch((error: unknown) => {
    console.error(error instanceof Error ? error.message : error);
    process.exit(1);
  });
}
