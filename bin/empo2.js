#!/usr/bin/env node
// In a clone of the repository the TypeScript sources run directly through tsx (a dev dependency), so
// `npm ci` needs no build step and no dist/ can go stale behind the sources. The published package has
// no src/, only dist/ (built by `npm pack`'s prepack), which plain Node runs: tsx is not installed there.
import { existsSync } from 'node:fs';

const source = new URL('../src/cli/main.ts', import.meta.url);
const built = new URL('../dist/cli/main.js', import.meta.url);

/** tsx's loader, or null where it is not installed (a clone installed with `npm ci --omit=dev`). */
async function tsxLoader() {
  try {
    return await import('tsx/esm/api');
  } catch (error) {
    if (error?.code === 'ERR_MODULE_NOT_FOUND') return null;
    throw error;
  }
}

const tsx = existsSync(source) ? await tsxLoader() : null;
if (tsx) {
  tsx.register();
  await import(source.href);
} else if (existsSync(built)) {
  await import(built.href);
} else {
  console.error(
    existsSync(source)
      ? 'empo2: this clone has neither tsx (a dev dependency: run `npm ci` without --omit=dev) nor a build (`npm run build`)'
      : `empo2: ${built.pathname} is missing; reinstall the package`,
  );
  process.exit(1);
}
