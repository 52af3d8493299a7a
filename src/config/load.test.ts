import { afterAll, describe, expect, it } from 'vitest';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parse as parseYaml, stringify as toYaml } from 'yaml';
import { applyOverride, ConfigError, describeOptions, loadConfig, readConfigFile, validateConfig } from './load.ts';
import { MOVED_KEYS } from './moved-keys.ts';
import { ConfigSchema, ExperimentalSchema, resumeConflicts, type Config } from './schema.ts';

const dir = mkdtempSync(join(tmpdir(), 'empo2-config-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function errorOf(fn: () => unknown): Error {
  try {
    fn();
  } catch (e) {
    return e as Error;
  }
  throw new Error('expected an error, got none');
}

describe('loadConfig', () => {
  it('defaults alone validate and match the schema defaults', () => {
    const cfg = loadConfig(null);
    expect(cfg).toEqual(ConfigSchema.parse({}));
    expect(cfg.rollout.group_size).toBe(4);
    expect(cfg.algo.clip_low).toBe(0.2);
    expect(cfg.algo.clip_high).toBe(0.3);
  });

  it('an unknown key is refused, naming the full key path and suggesting the closest option', () => {
    const e = errorOf(() => loadConfig(null, ['rollout.group_sise=3']));
    expect(e).toBeInstanceOf(ConfigError);
    expect(e.message).toContain('rollout.group_sise');
    expect(e.message).toContain('unknown option');
    expect(e.message).toContain('did you mean "group_size"');
  });

  it('an unknown top-level key is refused too, with a suggestion', () => {
    const e = errorOf(() => loadConfig(null, ['sead=3']));
    expect(e.message).toContain('sead: unknown option');
    expect(e.message).toContain('did you mean "seed"');
  });

  it('an unknown key far from every option gets no suggestion', () => {
    const e = errorOf(() => loadConfig(null, ['optim.zzzzzzzzzzzz=1']));
    expect(e.message).toContain('optim.zzzzzzzzzzzz: unknown option');
    expect(e.message).not.toContain('did you mean');
  });

  it('a wrong type is refused, naming the key', () => {
    const e = errorOf(() => loadConfig(null, ['rollout.group_size=abc']));
    expect(e).toBeInstanceOf(ConfigError);
    expect(e.message).toMatch(/rollout\.group_size: .*number/i);
    const e2 = errorOf(() => loadConfig(null, ['rollout.constrained=3']));
    expect(e2.message).toMatch(/rollout\.constrained: .*boolean/i);
  });

  it('an out-of-range value is refused, naming the key', () => {
    const e = errorOf(() => loadConfig(null, ['rollout.top_p=1.5']));
    expect(e.message).toContain('rollout.top_p');
    const e2 = errorOf(() => loadConfig(null, ['rollout.group_size=2.5']));
    expect(e2.message).toContain('rollout.group_size');
  });

  it('absurd sizes are refused up front, naming the key (they used to hang or fail far from their cause)', () => {
    expect(errorOf(() => loadConfig(null, ['rollout.group_size=1e8'])).message).toMatch(/rollout\.group_size: .*<=\s*1024/);
    expect(errorOf(() => loadConfig(null, ['model.hidden_size=1e6'])).message).toMatch(/model\.hidden_size: .*<=\s*16384/);
    expect(errorOf(() => loadConfig(null, ['model.vocab_size=1e9'])).message).toContain('model.vocab_size');
    // Each within bounds, together too many episodes per iteration.
    const e = errorOf(() => loadConfig(null, ['rollout.group_size=1024', 'rollout.tasks_per_batch=1024']));
    expect(e.message).toContain(
      'rollout.group_size: 1024 rollouts x rollout.tasks_per_batch 1024 = 1,048,576 episodes per iteration; at most 16,384',
    );
    expect(() => loadConfig(null, ['rollout.group_size=16', 'rollout.tasks_per_batch=1024'])).not.toThrow();
  });

  it('episode step limits and memory sizes beyond any use are refused up front, naming the key', () => {
    expect(errorOf(() => loadConfig(null, ['env.max_steps=1e9'])).message).toMatch(/env\.max_steps: .*<=\s*1000/);
    expect(errorOf(() => loadConfig(null, ['memory.capacity=1e12'])).message).toMatch(/memory\.capacity: .*<=\s*100000/);
    expect(errorOf(() => loadConfig(null, ['memory.dim=1e9'])).message).toMatch(/memory\.dim: .*<=\s*16384/);
    expect(errorOf(() => loadConfig(null, ['env.max_observation_bytes=1e12'])).message).toMatch(
      /env\.max_observation_bytes: .*<=\s*16777216/,
    );
    // Each within bounds, together a quarter of a gigabyte of keys in every memory slot.
    expect(errorOf(() => loadConfig(null, ['memory.capacity=100000', 'memory.dim=4096'])).message).toContain(
      'memory.capacity: 100,000 entries x memory.dim 4,096 = 1,638 MB of keys in each memory slot; at most 256 MB',
    );
    expect(() => loadConfig(null, ['memory.capacity=100000', 'memory.embedder=minilm'])).not.toThrow();
    expect(() => loadConfig(null, ['env.max_steps=1000', 'memory.capacity=50000'])).not.toThrow();
  });

  it('a default model whose heads do not divide its width is refused, naming the keys', () => {
    expect(errorOf(() => loadConfig(null, ['model.hidden_size=100', 'model.num_attention_heads=3'])).message).toContain(
      'model.hidden_size: 100 is not a multiple of model.num_attention_heads (3)',
    );
    expect(errorOf(() => loadConfig(null, ['model.num_attention_heads=4', 'model.num_key_value_heads=3'])).message).toContain(
      'model.num_key_value_heads: 3 does not divide model.num_attention_heads (4)',
    );
    // A pretrained model.path brings its own shape.
    expect(() => loadConfig(null, ['model.path=/some/model', 'model.hidden_size=100', 'model.num_attention_heads=3'])).not.toThrow();
  });

  it('rollout.remote: one server or several, each an http(s) address once; sync lora needs model.lora', () => {
    const lora = 'model.lora={r: 4, alpha: 8}';
    const remote =
      (r: string, ...more: string[]) =>
      () =>
        loadConfig(null, [`rollout.remote=${r}`, ...more]);
    expect(remote('{base_url: ["http://a:8000", "http://b:8000/v1"], sync: lora}', lora)().rollout.remote).toMatchObject({
      base_url: ['http://a:8000', 'http://b:8000/v1'],
      sync: 'lora',
      lora_name: null,
      concurrency: 4,
    });
    expect(errorOf(remote('{base_url: ["http://a:8000", "a:8001"]}')).message).toContain(
      'rollout.remote.base_url[1]: "a:8001" is not an http:// or https:// address',
    );
    expect(errorOf(remote('{base_url: ["http://a:8000/", "http://a:8000/v1"]}')).message).toContain(
      'rollout.remote.base_url[1]: "http://a:8000/v1" is the same server as rollout.remote.base_url[0]',
    );
    expect(errorOf(remote('{base_url: "http://a", sync: lora}')).message).toContain('rollout.remote.sync: lora pushes the LoRA adapter');
    expect(errorOf(remote('{base_url: "http://a", lora_name: p}')).message).toContain('rollout.remote.lora_name: "p" is for sync: lora');
    expect(errorOf(remote('{base_url: []}')).message).toMatch(/rollout\.remote\.base_url/);
  });

  it('overrides parse numbers (incl. exponent form), booleans, null, strings and lists', () => {
    const cfg = loadConfig(null, [
      'optim.lr=1e-4',
      'rollout.group_size=3',
      'rollout.constrained=false',
      'algo.dual_clip=null',
      'run_dir=runs/x',
      'env.tasks=[fetch, boil]',
    ]);
    expect(cfg.optim.lr).toBe(1e-4);
    expect(cfg.rollout.group_size).toBe(3);
    expect(cfg.rollout.constrained).toBe(false);
    expect(cfg.algo.dual_clip).toBeNull();
    expect(cfg.run_dir).toBe('runs/x');
    expect(cfg.env.tasks).toEqual(['fetch', 'boil']);
  });

  it('an override without "=" or into a non-section is refused', () => {
    expect(() => loadConfig(null, ['rollout.group_size'])).toThrow(/must look like key\.path=value/);
    // A scalar set earlier cannot become a section...
    expect(() => loadConfig(null, ['seed=1', 'seed.x=1'])).toThrow(/override "seed\.x=1": seed is not a section/);
    // ...and a section made where the schema wants a scalar is refused by validation, naming the key.
    expect(() => loadConfig(null, ['seed.x=1'])).toThrow(/seed: .*expected number/);
  });

  it('loads a YAML file, and overrides win over the file', () => {
    const file = join(dir, 'run.yaml');
    writeFileSync(file, 'seed: 7\nrollout:\n  group_size: 4\n  temperature: 0.7\nenv:\n  tasks: [fetch]\n');
    const cfg = loadConfig(file, ['rollout.group_size=5']);
    expect(cfg.seed).toBe(7);
    expect(cfg.rollout.temperature).toBe(0.7);
    expect(cfg.rollout.group_size).toBe(5);
    expect(cfg.env.tasks).toEqual(['fetch']);
    // Untouched sections keep their defaults.
    expect(cfg.optim.lr).toBe(ConfigSchema.parse({}).optim.lr);
  });

  it('loads a JSON file (YAML is a superset)', () => {
    const file = join(dir, 'run.json');
    writeFileSync(file, JSON.stringify({ algo: { kl_coef: 0.05 } }));
    expect(loadConfig(file).algo.kl_coef).toBe(0.05);
  });

  it('errors from a file name the file and the key', () => {
    const file = join(dir, 'bad.yaml');
    writeFileSync(file, 'algo:\n  clip_hgh: 0.3\n');
    const e = errorOf(() => loadConfig(file));
    expect(e.message).toContain(file);
    expect(e.message).toContain('algo.clip_hgh');
    expect(e.message).toContain('did you mean "clip_high"');
  });

  it('an empty file means all defaults', () => {
    const file = join(dir, 'empty.yaml');
    writeFileSync(file, '');
    expect(loadConfig(file)).toEqual(ConfigSchema.parse({}));
  });

  it('a missing file gives "config file not found" with the path', () => {
    const missing = join(dir, 'nope.yaml');
    const e = errorOf(() => loadConfig(missing));
    expect(e).toBeInstanceOf(ConfigError);
    expect(e.message).toBe(`config file not found: ${missing}`);
  });

  it('invalid YAML and a non-mapping top level are refused, naming the file', () => {
    const bad = join(dir, 'broken.yaml');
    writeFileSync(bad, 'seed: [1, 2\n');
    expect(() => loadConfig(bad)).toThrow(new RegExp(`config file ${bad.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')} is not valid YAML`));
    const list = join(dir, 'list.yaml');
    writeFileSync(list, '- 1\n- 2\n');
    expect(() => loadConfig(list)).toThrow(/must hold a mapping of options at the top level/);
  });
});

describe('extends', () => {
  const root = join(dir, 'extends');
  /** Writes `text` to `root/name` (making folders) and returns the full path. */
  const write = (name: string, text: string) => {
    const file = join(root, name);
    mkdirSync(join(file, '..'), { recursive: true });
    writeFileSync(file, text);
    return file;
  };
  const base = write(
    'base.yaml',
    [
      'seed: 3',
      'env:',
      '  tasks: [power, clue, unlock]',
      '  eval_variations: 10',
      'algo:',
      '  name: empo2',
      '  p: 0.25',
      '  dual_clip: 3',
      'model:',
      '  lora: {r: 16, alpha: 32}',
      '',
    ].join('\n'),
  );

  it('merges the file over its base: mappings key by key, scalars and lists replaced, null replaces', () => {
    const child = write(
      'child.yaml',
      ['extends: base.yaml', 'env:', '  tasks: [fetch]', 'algo:', '  p: 0.5', '  dual_clip: null', 'model:', '  lora: null', ''].join('\n'),
    );
    const { raw, files } = readConfigFile(child);
    expect(files).toEqual([child, base]);
    expect(raw).toEqual({
      seed: 3,
      env: { tasks: ['fetch'], eval_variations: 10 },
      algo: { name: 'empo2', p: 0.5, dual_clip: null },
      model: { lora: null },
    });
    const cfg = loadConfig(child);
    expect(cfg.seed).toBe(3);
    expect(cfg.env.tasks).toEqual(['fetch']);
    expect(cfg.env.eval_variations).toBe(10);
    expect(cfg.algo.p).toBe(0.5);
    expect(cfg.algo.dual_clip).toBeNull();
    expect(cfg.model.lora).toBeNull();
  });

  it('follows a chain across folders, each path relative to the file that names it, and --set wins over all', () => {
    const middle = write('sub/middle.yaml', 'extends: ../base.yaml\nalgo:\n  q: 0.5\nrollout:\n  group_size: 6\n');
    const leaf = write('sub/deeper/leaf.yaml', 'extends: ../middle.yaml\nrollout:\n  group_size: 2\n');
    expect(readConfigFile(leaf).files).toEqual([leaf, middle, base]);
    const cfg = loadConfig(leaf, ['algo.q=0.25', 'seed=9']);
    expect([cfg.seed, cfg.algo.name, cfg.algo.p, cfg.algo.q, cfg.rollout.group_size]).toEqual([9, 'empo2', 0.25, 0.25, 2]);
    // The base's own key survives two layers untouched.
    expect(cfg.env.tasks).toEqual(['power', 'clue', 'unlock']);
  });

  it('an absolute path works as a base too', () => {
    const child = write('abs.yaml', `extends: ${JSON.stringify(base)}\nseed: 4\n`);
    expect(loadConfig(child).seed).toBe(4);
    expect(loadConfig(child).algo.p).toBe(0.25);
  });

  it('a missing base names the missing file and the file that extends it', () => {
    const child = write('orphan.yaml', 'extends: gone.yaml\n');
    const e = errorOf(() => loadConfig(child));
    expect(e).toBeInstanceOf(ConfigError);
    expect(e.message).toBe(`config file not found: ${join(root, 'gone.yaml')} (extended by ${child})`);
  });

  it('a cycle is refused with the chain that closes it', () => {
    const a = write('cycle-a.yaml', 'extends: cycle-b.yaml\n');
    const b = write('cycle-b.yaml', 'extends: cycle-a.yaml\n');
    expect(errorOf(() => loadConfig(a)).message).toBe(`config files extend each other in a cycle: ${a} -> ${b} -> ${a}`);
    const self = write('cycle-self.yaml', 'extends: ./cycle-self.yaml\n');
    expect(errorOf(() => loadConfig(self)).message).toBe(`config files extend each other in a cycle: ${self} -> ${self}`);
  });

  it('extends that is not a path is refused, naming the file and the value', () => {
    const number = write('extends-number.yaml', 'extends: 3\n');
    expect(errorOf(() => loadConfig(number)).message).toBe(`config file ${number}: extends must be the path of another config file, got 3`);
    const list = write('extends-list.yaml', 'extends: [base.yaml]\n');
    expect(errorOf(() => loadConfig(list)).message).toBe(
      `config file ${list}: extends must be the path of another config file, got ["base.yaml"]`,
    );
    const empty = write('extends-empty.yaml', 'extends: ""\n');
    expect(errorOf(() => loadConfig(empty)).message).toContain('extends must be the path of another config file, got ""');
  });

  it('invalid YAML or a non-mapping in a base names the base and the file that extends it', () => {
    const broken = write('broken-base.yaml', 'seed: [1, 2\n');
    const child = write('on-broken.yaml', 'extends: broken-base.yaml\n');
    expect(errorOf(() => loadConfig(child)).message).toMatch(
      new RegExp(`^config file ${escape(broken)} \\(extended by ${escape(child)}\\) is not valid YAML/JSON: `),
    );
    write('list-base.yaml', '- 1\n');
    const onList = write('on-list.yaml', 'extends: list-base.yaml\n');
    expect(errorOf(() => loadConfig(onList)).message).toBe(
      `config file ${join(root, 'list-base.yaml')} (extended by ${onList}) must hold a mapping of options at the top level`,
    );
  });

  it('a validation error names every file of the chain, whichever of them holds the bad key', () => {
    const badBase = write('bad-base.yaml', 'rollout:\n  group_sise: 4\n');
    const child = write('on-bad.yaml', 'extends: bad-base.yaml\nseed: 1\n');
    const e = errorOf(() => loadConfig(child, ['seed=2']));
    expect(e.message).toContain(`invalid config (${child}, extending ${badBase} + command-line overrides)`);
    expect(e.message).toContain('rollout.group_sise: unknown option (did you mean "group_size"?)');
  });
});

const escape = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

describe('applyOverride', () => {
  it('creates missing sections and keeps siblings', () => {
    const raw: Record<string, unknown> = { rollout: { temperature: 0.5 } };
    applyOverride(raw, 'rollout.group_size=2');
    applyOverride(raw, 'optim.lr=0.01');
    expect(raw).toEqual({ rollout: { temperature: 0.5, group_size: 2 }, optim: { lr: 0.01 } });
  });
});

describe('describeOptions', () => {
  it('lists every leaf option with its default, e.g. rollout.group_size 4', () => {
    const lines = describeOptions();
    const groupSize = lines.find((l) => l.trim().startsWith('rollout.group_size'));
    expect(groupSize).toBeDefined();
    expect(groupSize).toMatch(/rollout\.group_size\s+4\s/);
    for (const key of ['seed', 'run_dir', 'env.options', 'model.path', 'algo.dual_clip', 'optim.micro_batch_tokens', 'train.iterations']) {
      expect(lines.some((l) => l.trim().startsWith(key + ' '))).toBe(true);
    }
  });

  it('a section that defaults to null is listed, then the keys it takes with their defaults when given', () => {
    const lines = describeOptions().map((l) => l.trim());
    expect(lines.find((l) => l.startsWith('model.lora '))).toMatch(/^model\.lora\s+null\s+train LoRA adapters/);
    expect(lines.find((l) => l.startsWith('model.lora.r '))).toMatch(/^model\.lora\.r\s+16\s+LoRA rank/);
    expect(lines.find((l) => l.startsWith('rollout.remote.base_url '))).toMatch(/^rollout\.remote\.base_url\s+\(required\)\s+the server/);
    expect(lines.find((l) => l.startsWith('rollout.remote.timeout_s '))).toMatch(/\s120\s/);
  });
});

describe('options moved under experimental: (configs, saved runs and --set lines written before the move)', () => {
  const root = join(dir, 'moved');
  mkdirSync(root, { recursive: true });
  const write = (name: string, text: string) => {
    const file = join(root, name);
    mkdirSync(join(file, '..'), { recursive: true });
    writeFileSync(file, text);
    return file;
  };
  const collect = () => {
    const lines: string[] = [];
    return { lines, notice: (l: string) => lines.push(l) };
  };
  // Every moved key at a value other than its default, in the old layout and in the new one.
  const OLD_LAYOUT = [
    'algo:',
    '  name: empo2',
    '  p: 0.5',
    '  p_end: 0',
    '  mode_draw: rollout',
    '  off_policy_ratio: decoupled',
    '  off_policy_weight_cap: null',
    'model:',
    '  tip_warmup_examples: 16',
    '  tip_warmup_epochs: 2',
    '  tip_warmup_lr: 0.01',
    '  tip_rehearsal: 8',
    '  tip_rehearsal_lr: 0.002',
    'memory:',
    '  top_k: 3',
    '  tip_order: best_last',
    '  step_tip_reflection: false',
    '  step_credit: gain',
    '  skip_taken_actions: true',
    '  valid_actions_only: true',
    '  match_progress: true',
    '  min_tip_score: 0',
    '  source: oracle',
    '',
  ].join('\n');
  const NEW_EXPERIMENTAL = {
    tip_warmup_examples: 16,
    tip_warmup_epochs: 2,
    tip_warmup_lr: 0.01,
    tip_rehearsal: 8,
    tip_rehearsal_lr: 0.002,
    p_end: 0,
    mode_draw_per_rollout: true,
    off_policy_ratio: 'decoupled',
    off_policy_weight_cap: null,
    tip_order: 'best_last',
    step_tip_reflection: false,
    step_credit: 'gain',
    skip_taken_actions: true,
    valid_actions_only: true,
    match_progress: true,
    min_tip_score: 0,
    tip_source: 'oracle',
  };
  const newLayout = write(
    'new-layout.yaml',
    toYaml({ algo: { name: 'empo2', p: 0.5 }, memory: { top_k: 3 }, experimental: NEW_EXPERIMENTAL }),
  );

  it('every experimental option has exactly one old path, and every old path leads to one', () => {
    expect(MOVED_KEYS.map((m) => m.to.replace('experimental.', '')).sort()).toEqual(Object.keys(ExperimentalSchema.shape).sort());
    expect(new Set(MOVED_KEYS.map((m) => m.from)).size).toBe(MOVED_KEYS.length);
  });

  it('a YAML or JSON file with the old paths loads as the same file with the new ones, one line per moved key', () => {
    const expected = loadConfig(newLayout, [], () => {});
    expect(expected.experimental).toEqual(NEW_EXPERIMENTAL);
    const oldYaml = write('old-layout.yaml', OLD_LAYOUT);
    const { lines, notice } = collect();
    expect(loadConfig(oldYaml, [], notice)).toEqual(expected);
    expect(lines).toHaveLength(17);
    expect(lines).toContain(`${oldYaml}: algo.p_end is now experimental.p_end (read as such)`);
    expect(lines).toContain(`${oldYaml}: memory.source is now experimental.tip_source (read as such)`);
    expect(lines).toContain(`${oldYaml}: algo.mode_draw: rollout is now experimental.mode_draw_per_rollout: true (read as such)`);
    const oldJson = write('old-layout.json', JSON.stringify(parseYaml(OLD_LAYOUT)));
    const json = collect();
    expect(loadConfig(oldJson, [], json.notice)).toEqual(expected);
    expect(json.lines).toHaveLength(17);
  });

  it('algo.mode_draw keeps iteration and task where they were; only rollout moved', () => {
    const task = write('task-draw.yaml', 'algo:\n  mode_draw: task\n');
    const { lines, notice } = collect();
    const cfg = loadConfig(task, [], notice);
    expect([cfg.algo.mode_draw, cfg.experimental.mode_draw_per_rollout, lines]).toEqual(['task', false, []]);
  });

  it('algo.mode_draw set over an old `rollout` replaces it, as it did when it was one key', () => {
    write('old-rollout-base.yaml', 'algo:\n  name: empo2\n  mode_draw: rollout\n');
    const draw = (file: string, sets: string[] = []) => {
      const cfg = loadConfig(file, sets, () => {});
      return cfg.experimental.mode_draw_per_rollout ? 'rollout' : cfg.algo.mode_draw;
    };
    expect(draw(join(root, 'old-rollout-base.yaml'))).toBe('rollout');
    const oldChild = write('old-task-child.yaml', 'extends: old-rollout-base.yaml\nalgo:\n  mode_draw: task\n');
    expect(draw(oldChild)).toBe('task');
    expect(draw(write('deeper.yaml', 'extends: old-task-child.yaml\nseed: 2\n'))).toBe('task');
    expect(draw(write('other-child.yaml', 'extends: old-rollout-base.yaml\nseed: 2\n'))).toBe('rollout');
    expect(draw(join(root, 'old-rollout-base.yaml'), ['algo.mode_draw=iteration'])).toBe('iteration');
    expect(draw(oldChild, ['algo.mode_draw=rollout'])).toBe('rollout');
    expect(draw(oldChild, ['algo.mode_draw=rollout', 'algo.mode_draw=task'])).toBe('task');
    // In the new layout the switch overrides algo.mode_draw wherever each is set.
    const newBase = write('new-switch-base.yaml', 'algo:\n  name: empo2\nexperimental:\n  mode_draw_per_rollout: true\n');
    expect(draw(write('new-task-child.yaml', 'extends: new-switch-base.yaml\nalgo:\n  mode_draw: task\n'))).toBe('rollout');
    expect(draw(newBase, ['algo.mode_draw=task'])).toBe('rollout');
    expect(
      draw(
        write(
          'new-over-old.yaml',
          'extends: old-rollout-base.yaml\nalgo:\n  mode_draw: task\nexperimental:\n  mode_draw_per_rollout: true\n',
        ),
      ),
    ).toBe('rollout');
  });

  it('old paths in an extends: base are read at the new ones, and the child may set the new path over them', () => {
    const base = write('old-base.yaml', 'algo:\n  name: empo2\n  p: 0.5\n  p_end: 0\nmemory:\n  source: oracle\n  tip_order: best_last\n');
    const child = write('new-child.yaml', 'extends: old-base.yaml\nexperimental:\n  p_end: 0.25\n');
    const { lines, notice } = collect();
    const cfg = loadConfig(child, [], notice);
    expect(cfg.experimental.p_end).toBe(0.25); // the child's, over the base's old algo.p_end
    expect(cfg.experimental.tip_source).toBe('oracle');
    expect(cfg.experimental.tip_order).toBe('best_last');
    expect(readConfigFile(child, () => {}).raw).toEqual({
      algo: { name: 'empo2', p: 0.5 },
      memory: {},
      experimental: { p_end: 0.25, tip_source: 'oracle', tip_order: 'best_last' },
    });
    expect(lines).toEqual([
      `${base}: algo.p_end is now experimental.p_end (read as such)`,
      `${base}: memory.tip_order is now experimental.tip_order (read as such)`,
      `${base}: memory.source is now experimental.tip_source (read as such)`,
    ]);
  });

  it('--set lines with the old paths set the new ones', () => {
    const { lines, notice } = collect();
    const cfg = loadConfig(
      null,
      [
        'algo.name=empo2',
        'algo.p_end=0',
        'memory.source=oracle',
        'model.tip_rehearsal=4',
        'algo.mode_draw=rollout',
        'memory.min_tip_score=1000000',
      ],
      notice,
    );
    expect(cfg.experimental).toMatchObject({
      p_end: 0,
      tip_source: 'oracle',
      tip_rehearsal: 4,
      mode_draw_per_rollout: true,
      min_tip_score: 1000000,
    });
    expect(cfg.algo.mode_draw).toBe('iteration');
    expect(lines).toEqual([
      '--set algo.p_end is now experimental.p_end (read as such)',
      '--set memory.source is now experimental.tip_source (read as such)',
      '--set model.tip_rehearsal is now experimental.tip_rehearsal (read as such)',
      '--set algo.mode_draw: rollout is now experimental.mode_draw_per_rollout: true (read as such)',
      '--set memory.min_tip_score is now experimental.min_tip_score (read as such)',
    ]);
    // An old --set over a file that uses the new path replaces it, as any --set does.
    expect(loadConfig(newLayout, ['algo.p_end=0.75'], () => {}).experimental.p_end).toBe(0.75);
    expect(loadConfig(null, ['algo.mode_draw=task'], () => {}).algo.mode_draw).toBe('task');
  });

  it('the old and the new path of one option given together is an error naming both', () => {
    const both = write('both.yaml', 'algo:\n  p_end: 0\nexperimental:\n  p_end: 0.5\n');
    expect(errorOf(() => loadConfig(both, [], () => {})).message).toBe(
      `config file ${both}:\n  - algo.p_end and experimental.p_end are both given (algo.p_end is now experimental.p_end); keep only experimental.p_end`,
    );
    const bothInBase = write('on-both.yaml', 'extends: both.yaml\nseed: 1\n');
    expect(errorOf(() => loadConfig(bothInBase, [], () => {})).message).toContain(`config file ${both} (extended by ${bothInBase}):`);
    const draw = write('both-draw.yaml', 'algo:\n  mode_draw: rollout\nexperimental:\n  mode_draw_per_rollout: false\n');
    expect(errorOf(() => loadConfig(draw, [], () => {})).message).toContain(
      'algo.mode_draw: rollout and experimental.mode_draw_per_rollout are both given (algo.mode_draw: rollout is now experimental.mode_draw_per_rollout: true); keep only experimental.mode_draw_per_rollout',
    );
    for (const sets of [
      ['algo.p_end=0', 'experimental.p_end=0.5'],
      ['experimental.p_end=0.5', 'algo.p_end=0'],
    ]) {
      const e = errorOf(() => loadConfig(null, sets, () => {}));
      expect(e).toBeInstanceOf(ConfigError);
      expect(e.message).toBe(
        '--set gives both algo.p_end and experimental.p_end, the old and the new path of one option; keep only experimental.p_end',
      );
    }
    expect(
      errorOf(() => validateConfig({ memory: { source: 'oracle' }, experimental: { tip_source: 'memory' } }, 'adapt.json')).message,
    ).toContain('invalid config (adapt.json):\n  - memory.source and experimental.tip_source are both given');
  });

  it("options recorded by the program under the old paths (an adapt report's memory settings) validate silently", () => {
    const cfg = validateConfig({ memory: { top_k: 3, tip_order: 'best_last', skip_taken_actions: true } }, 'adapt.json');
    expect([cfg.memory.top_k, cfg.experimental.tip_order, cfg.experimental.skip_taken_actions]).toEqual([3, 'best_last', true]);
  });

  /** A run's config.yaml as `empo2 train` wrote it before the move: the resolved config, old layout. */
  function savedBeforeTheMove(cfg: Config): string {
    const { experimental: x, ...rest } = structuredClone(cfg);
    const old = rest as unknown as Record<string, Record<string, unknown>>;
    Object.assign(old.model, {
      tip_warmup_examples: x.tip_warmup_examples,
      tip_warmup_epochs: x.tip_warmup_epochs,
      tip_warmup_lr: x.tip_warmup_lr,
      tip_rehearsal: x.tip_rehearsal,
      tip_rehearsal_lr: x.tip_rehearsal_lr,
    });
    Object.assign(old.algo, { p_end: x.p_end, off_policy_ratio: x.off_policy_ratio, off_policy_weight_cap: x.off_policy_weight_cap });
    if (x.mode_draw_per_rollout) old.algo.mode_draw = 'rollout';
    Object.assign(old.memory, {
      tip_order: x.tip_order,
      step_tip_reflection: x.step_tip_reflection,
      step_credit: x.step_credit,
      skip_taken_actions: x.skip_taken_actions,
      valid_actions_only: x.valid_actions_only,
      match_progress: x.match_progress,
      min_tip_score: x.min_tip_score,
      source: x.tip_source,
    });
    return toYaml(old);
  }

  it('a run saved before the move resumes under the new config without conflicts, and its config.yaml is read silently', () => {
    // The new-layout config extends a base that draws per task group; the old run said `algo.mode_draw: rollout`.
    write('run-base.yaml', 'algo:\n  name: empo2\n  mode_draw: task\nmemory:\n  top_k: 3\n');
    const requestedFile = write(
      'run-new.yaml',
      `extends: run-base.yaml\nrun_dir: ${join(root, 'run')}\nexperimental:\n${Object.entries(NEW_EXPERIMENTAL)
        .map(([k, v]) => `  ${k}: ${JSON.stringify(v)}`)
        .join('\n')}\n`,
    );
    const requested = loadConfig(requestedFile, [], () => {});
    expect([requested.algo.mode_draw, requested.experimental.mode_draw_per_rollout]).toEqual(['task', true]);

    const runDir = join(root, 'run');
    mkdirSync(join(runDir, 'checkpoints', 'iter-000002'), { recursive: true });
    writeFileSync(join(runDir, 'metrics.jsonl'), '');
    const savedText = savedBeforeTheMove({ ...requested, algo: { ...requested.algo, mode_draw: 'iteration' } });
    expect(savedText).toContain('mode_draw: rollout');
    expect(savedText).toContain('source: oracle');
    const savedPath = join(runDir, 'config.yaml');
    writeFileSync(savedPath, savedText);

    const { lines, notice } = collect();
    const saved = loadConfig(savedPath, [], notice);
    expect(lines).toEqual([]); // the program's own record: nothing for the user to rewrite
    expect(saved.experimental).toEqual(requested.experimental);
    expect(resumeConflicts(saved, requested)).toEqual([]);
    // What --resume does without --config: the saved file, with the command line's overrides.
    expect(
      resumeConflicts(
        saved,
        loadConfig(savedPath, ['train.iterations=80'], () => {}),
      ),
    ).toEqual([]);
    // The check still sees a real change, in the moved options as elsewhere.
    expect(
      resumeConflicts(
        saved,
        loadConfig(requestedFile, ['experimental.tip_order=best_first', 'seed=5'], () => {}),
      ),
    ).toEqual(['experimental.tip_order: "best_last" in the run, "best_first" now', 'seed: 0 in the run, 5 now']);
    // The switch makes algo.mode_draw inert only while both configs have it on.
    expect(
      resumeConflicts(
        saved,
        loadConfig(requestedFile, ['experimental.mode_draw_per_rollout=false'], () => {}),
      ),
    ).toEqual(['algo.mode_draw: "iteration" in the run, "task" now', 'experimental.mode_draw_per_rollout: true in the run, false now']);

    // The same file copied out of its run folder is a user's file again, and says what it read.
    const copy = write('copied-run-config.yaml', savedText);
    const copied = collect();
    loadConfig(copy, [], copied.notice);
    expect(copied.lines).toHaveLength(17);
  });

  it('--help lists the experimental section with what it is, then its options', () => {
    const lines = describeOptions();
    const header = lines.findIndex((l) => l.trim().startsWith('experimental.*'));
    expect(lines[header]).toContain("not part of the paper's method");
    expect(lines[header]).toContain('results/builtin-explore-tipreader-gain/');
    expect(lines[header + 1].trim()).toMatch(/^experimental\.tip_warmup_examples\s+0\s/);
    for (const key of ['algo.p_end', 'algo.off_policy_ratio', 'memory.source', 'memory.tip_order', 'model.tip_rehearsal']) {
      expect(lines.some((l) => l.trim().startsWith(key + ' '))).toBe(false);
    }
  });
});
