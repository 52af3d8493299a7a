/** Writes docs/CONFIG.md from the config schema (npm run docs:config); test/configs.test.ts checks it is current. */
import { writeFileSync } from 'node:fs';
import { configReference } from '../src/index.ts';

writeFileSync(new URL('../docs/CONFIG.md', import.meta.url), configReference());
console.log('wrote docs/CONFIG.md');
