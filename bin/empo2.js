#!/usr/bin/env node
// In the repository the TypeScript sources run directly through tsx, so `npm ci` needs no build step.
// The published package has no src/, only dist/ (built by `npm pack`'s prepack), which plain Node runs.
import { existsSync } from 'node:fs';

if (existsSync(new URL('../src/cli/main.ts', import.meta.url))) {
  const { register } = await import('tsx/esm/api');
  register();
  await import('../src/cli/main.ts');
} else {
  await import('../dist/cli/main.js');
}
