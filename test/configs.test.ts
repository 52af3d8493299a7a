import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { isDeepStrictEqual } from 'node:util';
import { describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { configReference, loadConfig, readConfigFile } from '../src/config/load.ts';
import { createEnv } from '../src/envs/index.ts';

/** Leaf options of a raw config as dotted paths (lists and null are leaves, as `extends` merges them). */
function leaves(raw: Record<string, unknown>, prefix = ''): [string, unknown][] {
  return Object.entries(raw).flatMap(([key, value]) => {
    const path = prefix ? `${prefix}.${key}` : key;
    return typeof value === 'object' && value !== null && !Array.isArray(value)
      ? leaves(value as Record<string, unknown>, path)
      : [[path, value] as [string, unknown]];
  });
}
const valueAt = (raw: Record<string, unknown>, path: string) =>
  path.split('.').reduce<unknown>((node, key) => (node as Record<string, unknown> | undefined)?.[key], raw);

describe('shipped configs', () => {
  const files = (readdirSync('configs', { recursive: true }) as string[]).filter((f) => f.endsWith('.yaml')).map((f) => join('configs', f));
  it('there are some, the research variants are under configs/experiments/ and the one-study ones under configs/variants/', () => {
    expect(files.length).toBeGreaterThan(0);
    expect(files.some((f) => f.startsWith(join('configs', 'experiments')))).toBe(true);
    expect(files.some((f) => f.startsWith(join('configs', 'variants')))).toBe(true);
    // The top level is what a user picks from (configs/README.md's first table); a study's variant there hides them.
    const top = readdirSync('configs').filter((f) => f.endsWith('.yaml'));
    expect(top.length).toBeLessThanOrEqual(10);
  });
  for (const f of files) {
    it(`${f} validates against the schema`, () => {
      const cfg = loadConfig(f);
      expect(cfg.run_dir).toMatch(/^runs\//);
    });
  }

  // A variant states only what it changes: a key it sets to the value its base files already give is
  // a copy that would silently stop following the base.
  for (const f of files) {
    const own = parseYaml(readFileSync(f, 'utf8')) as Record<string, unknown>;
    if (typeof own.extends !== 'string') continue;
    it(`${f} sets only keys that differ from its base`, () => {
      const base = readConfigFile(join(dirname(f), own.extends as string)).raw;
      const restated = leaves(own)
        .filter(([path]) => path !== 'extends')
        .filter(([path, value]) => isDeepStrictEqual(valueAt(base, path), value))
        .map(([path]) => path);
      expect(restated).toEqual([]);
    });
  }

  // The schema leaves env.options to each environment; building the ScienceWorld env checks them
  // (zod, strict) without starting a simulator.
  for (const f of files.filter((name) => /^(paper-)?scienceworld/.test(name.split(/[\\/]/).pop()!))) {
    it(`${f}: the ScienceWorld factory accepts its env options and tasks`, async () => {
      const cfg = loadConfig(f);
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

describe('configs/paper-scienceworld.yaml', () => {
  it("is the paper's ScienceWorld recipe: protocol, reference hyper-parameters, FSDP over 8 GPUs, vLLM rollouts with the adapter pushed", () => {
    const cfg = loadConfig('configs/paper-scienceworld.yaml');
    expect(cfg.env).toMatchObject({ name: 'scienceworld', train_variations: 5, eval_split: 'test', eval_variations: 20 });
    expect(cfg.rollout).toMatchObject({ group_size: 8, tasks_per_batch: 16, temperature: 1, eval_temperature: 0.4, max_tokens: 32 });
    expect(cfg.algo).toMatchObject({ name: 'empo2', clip_low: 0.2, clip_high: 0.3, dual_clip: 10, kl_coef: 0 });
    expect(cfg.model.path).toMatch(/Qwen2\.5-7B-Instruct$/);
    expect(cfg.model.engine).toBe('torch');
    expect(cfg.model.torch).toMatchObject({ device: 'cuda', autocast: 'bfloat16', gradient_checkpointing: true });
    expect(cfg.model.torch.launcher).toEqual(['.venv/bin/torchrun', '--standalone', '--nproc_per_node=8']);
    expect(cfg.model.lora).not.toBeNull();
    expect(cfg.rollout.remote).toMatchObject({ sync: 'lora' });
    expect(cfg.rollout.remote!.base_url).toHaveLength(4);
  });
});

describe('docs/CONFIG.md', () => {
  it('is the reference generated from the current schema (regenerate with npm run docs:config)', () => {
    const reference = configReference();
    expect(reference).toContain('| `algo.clip_low` | `0.2` |');
    expect(readFileSync('docs/CONFIG.md', 'utf8')).toBe(reference);
  });
});
