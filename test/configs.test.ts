import { readdirSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { loadConfig } from '../src/config/load.ts';

describe('shipped configs', () => {
  const files = readdirSync('configs').filter((f) => f.endsWith('.yaml'));
  it('there are some', () => expect(files.length).toBeGreaterThan(0));
  for (const f of files) {
    it(`${f} validates against the schema`, () => {
      const cfg = loadConfig(`configs/${f}`);
      expect(cfg.run_dir).toMatch(/^runs\//);
    });
  }
});
