import { readdirSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { loadConfig } from '../src/config/load.ts';
import { createEnv } from '../src/envs/index.ts';

describe('shipped configs', () => {
  const files = readdirSync('configs').filter((f) => f.endsWith('.yaml'));
  it('there are some', () => expect(files.length).toBeGreaterThan(0));
  for (const f of files) {
    it(`${f} validates against the schema`, () => {
      const cfg = loadConfig(`configs/${f}`);
      expect(cfg.run_dir).toMatch(/^runs\//);
    });
  }

  // The schema leaves env.options to each environment; building the ScienceWorld env checks them
  // (zod, strict) without starting a simulator.
  for (const f of files.filter((name) => name.startsWith('scienceworld-'))) {
    it(`${f}: the ScienceWorld factory accepts its env options and tasks`, async () => {
      const cfg = loadConfig(`configs/${f}`);
      expect(cfg.env.name).toBe('scienceworld');
      const env = await createEnv(cfg.env);
      try {
        for (const task of cfg.env.tasks ?? env.tasks()) {
          expect(env.variations(task, 'train').length).toBeGreaterThanOrEqual(cfg.env.train_variations ?? 1);
          expect(env.variations(task, cfg.env.eval_split).length).toBeGreaterThan(0);
        }
      } finally {
        await env.close();
      }
    });
  }
});
