/** Memory-only adaptation and `memory show` on a tiny trained run. */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createHash } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadConfig } from '../config/load.ts';
import { showMemory } from '../cli/commands/memory-show.ts';
import { readSafetensors, toFloat32 } from '../policy/safetensors.ts';
import { initBackend } from '../policy/tfjs/backend.ts';
import { EpisodeRecordSchema } from '../trajectory/format.ts';
import { adapt, stepKey, tipUse, type ShownTips } from './tips.ts';
import { ADAPT_TRAJECTORIES } from './trials.ts';
import { latestCheckpoint } from '../run/checkpoint.ts';
import { TRIAL_STATE_FILE } from './trials.ts';
import { train } from '../trainer/trainer.ts';
import { createEngine } from '../policy/create-engine.ts';
import { TINY_MODEL } from '../../test/support/tiny.ts';

const root = mkdtempSync(join(tmpdir(), 'empo2-adapt-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));
const runDir = join(root, 'run');
const cfg = loadConfig(null, [
  `run_dir=${runDir}`,
  'seed=4',
  ...TINY_MODEL,
  'env.tasks=[clue]',
  'env.eval_variations=1',
  'env.max_steps=5',
  'rollout.tasks_per_batch=1',
  'rollout.group_size=2',
  'memory.top_k=2',
  'train.iterations=1',
  'train.eval_every=0',
  'algo.name=empo2',
  'algo.p=1',
]);

beforeAll(async () => {
  await initBackend();
  await train(cfg, { resume: false, log: () => {} });
});

describe('empo2 adapt', () => {
  it('plays K trials on an unseen task with frozen weights, the memory growing after each trial', async () => {
    const dir = latestCheckpoint(runDir)!;
    const before = readFileSync(join(dir, 'model.safetensors'));
    const { engine } = await createEngine({ ...cfg, model: { ...cfg.model, path: dir } }, 'fresh');
    const out = join(root, 'adapt');
    const lines: string[] = [];
    const results = await adapt(engine, cfg, {
      task: 'fetch',
      trials: 3,
      variations: 2,
      split: 'test',
      memoryFrom: dir,
      outDir: out,
      log: (l) => lines.push(l),
    });
    expect(results.map((r) => r.trial)).toEqual([1, 2, 3]);
    // Trial 1 sees an empty "fetch" slot; later trials see tips written by earlier ones.
    expect(results[0].tips_shown_per_step).toBe(0);
    expect(results[1].memory_size).toBeGreaterThanOrEqual(results[0].memory_size);
    expect(results[0].memory_size).toBeGreaterThan(0);
    expect(results[2].tips_shown_per_step).toBeGreaterThan(0);
    for (const r of results) expect(r.scores).toHaveLength(2);
    const saved = JSON.parse(readFileSync(join(out, 'adapt.json'), 'utf8'));
    expect(saved.trials.map((t: { mean_score: number }) => t.mean_score)).toEqual(results.map((r) => r.mean_score));
    expect(saved.memory).toEqual(cfg.memory);
    expect(readFileSync(join(out, 'adapt.md'), 'utf8')).toMatch(/\| 3 \| /);
    expect(lines.some((l) => l.startsWith('trial 3/3: mean score'))).toBe(true);
    // Every episode of every trial is recorded, with what it was shown and the tip written after it.
    const recorded = readFileSync(join(out, ADAPT_TRAJECTORIES), 'utf8')
      .trim()
      .split('\n')
      .map((l) => EpisodeRecordSchema.parse(JSON.parse(l)));
    expect(recorded.map((r) => [r.source, r.trial, r.task, r.mode, r.slot])).toEqual(
      [1, 1, 2, 2, 3, 3].map((t) => ['adapt', t, 'fetch', 'tips', 'fetch']),
    );
    expect(recorded.map((r) => r.score)).toEqual(results.flatMap((r) => r.scores));
    expect(recorded.every((r) => typeof r.reflection === 'string' && r.reflection.length > 0)).toBe(true);
    const tipsPerStep = (t: number) => recorded.filter((r) => r.trial === t).flatMap((r) => r.steps.map((s) => s.tips.length));
    expect(tipsPerStep(3).reduce((a, b) => a + b, 0) / tipsPerStep(3).length).toBeCloseTo(results[2].tips_shown_per_step, 10);
    // Frozen weights: the checkpoint and the engine's parameters are unchanged.
    expect(readFileSync(join(dir, 'model.safetensors')).equals(before)).toBe(true);
    const w = readSafetensors(join(dir, 'model.safetensors')).tensors;
    for (const [k, v] of engine.model.params) expect(Array.from(v.dataSync()), k).toEqual(Array.from(toFloat32(w.get(k)!)));
    engine.dispose();
    // The adapted memory holds the checkpoint's slot and the new task's.
    expect(showMemory(join(out, 'memory.json'), { limit: 1, json: false })).toMatch(/## clue[\s\S]*## fetch/);
  });

  it("reports whether the agent acted on its tips, and, with the oracle as the memory, that every best tip is the solver's action", async () => {
    const dir = latestCheckpoint(runDir)!;
    const { engine } = await createEngine({ ...cfg, model: { ...cfg.model, path: dir } }, 'fresh');
    const plain = await adapt(engine, cfg, {
      task: 'fetch',
      trials: 2,
      variations: 2,
      split: 'test',
      memoryFrom: null,
      outDir: join(root, 'use'),
      log: () => {},
    });
    // Trial 1 is shown nothing: no tip to follow, and every step counts as one without tips.
    expect(plain[0].tips_followed).toBeNull();
    expect(plain[0].best_tip_is_solver).toBeNull();
    expect(plain[0].solver_action_share!.with_tips).toBeNull();
    expect(plain[0].solver_action_share!.without_tips).toBeGreaterThanOrEqual(0);
    expect(readFileSync(join(root, 'use', 'adapt.md'), 'utf8')).toMatch(/\| tips followed \| best tip = solver's action \|/);
    const oracleCfg = { ...cfg, experimental: { ...cfg.experimental, tip_source: 'oracle' as const } };
    const guided = await adapt(engine, oracleCfg, {
      task: 'fetch',
      trials: 1,
      variations: 2,
      split: 'test',
      memoryFrom: null,
      outDir: join(root, 'use-oracle'),
      log: () => {},
    });
    expect(guided[0].best_tip_is_solver).toBe(1);
    // The only tip is the solver's action, so following it and taking the solver's action are the same steps.
    expect(guided[0].tips_followed).toBe(guided[0].solver_action_share!.with_tips);
    expect(guided[0].solver_action_share!.without_tips).toBeNull();
    engine.dispose();
  });

  it("tipUse: hand-counted shares of tips followed and of best tips naming the solver's action", () => {
    const step = (action: string) => ({ action }) as never;
    const episodes = [
      { group: 0, steps: [step('go to hall'), step('open box'), step('take key')] },
      { group: 1, steps: [step('look around'), step('take key')] },
    ];
    const shown = new Map<string, ShownTips>([
      [stepKey(0, 0), { tipActions: [], solver: 'go to hall' }], // untipped, took the solver's action
      [stepKey(0, 1), { tipActions: ['take key', 'open box'], solver: 'open box' }], // followed the second tip; best tip is not the solver's
      [stepKey(0, 2), { tipActions: ['take key'], solver: 'take key' }], // followed; best tip = solver
      [stepKey(1, 0), { tipActions: [null], solver: 'go to hall' }], // an episode tip: tipped, but it names no action
      [stepKey(1, 1), { tipActions: ['go to hall'], solver: 'go to hall' }], // not followed; best tip = solver
    ]);
    // Followed: 2 of the 3 steps whose tips name an action. Best = solver: 2 of 4 tipped steps.
    // Solver's action taken: with tips 2 of 4 (steps 0:1, 0:2); without tips 1 of 1.
    expect(tipUse(episodes, shown, true)).toEqual({
      tips_followed: 2 / 3,
      best_tip_is_solver: 2 / 4,
      solver_action_share: { with_tips: 2 / 4, without_tips: 1 },
    });
    expect(tipUse(episodes, shown, false)).toEqual({ tips_followed: 2 / 3, best_tip_is_solver: null, solver_action_share: null });
    expect(() => tipUse([{ group: 2, steps: [step('wait')] }], shown, true)).toThrow(/no record of what step 0 of group 2 was shown/);
  });

  it('with a new draw each trial the trials differ in their samples, so the memory keeps growing', async () => {
    const dir = latestCheckpoint(runDir)!;
    const { engine } = await createEngine({ ...cfg, model: { ...cfg.model, path: dir } }, 'fresh');
    const results = await adapt(engine, cfg, {
      task: 'fetch',
      trials: 3,
      variations: 2,
      split: 'test',
      memoryFrom: null,
      outDir: join(root, 'draw'),
      sameSeed: false,
      log: () => {},
    });
    expect(results[2].memory_size).toBeGreaterThan(results[1].memory_size);
    engine.dispose();
  });

  it('with one slot per variation, memory_size counts the entries of every variation played', async () => {
    const dir = latestCheckpoint(runDir)!;
    const perVariation = { ...cfg, memory: { ...cfg.memory, slot: 'variation' as const } };
    const { engine } = await createEngine({ ...perVariation, model: { ...cfg.model, path: dir } }, 'fresh');
    const out = join(root, 'per-variation');
    const results = await adapt(engine, perVariation, {
      task: 'fetch',
      trials: 1,
      variations: 2,
      split: 'test',
      memoryFrom: null,
      outDir: out,
      log: () => {},
    });
    const saved = JSON.parse(showMemory(join(out, 'memory.json'), { limit: 1, json: true }));
    const fetchSlots = Object.entries(saved.slots as Record<string, { size: number }>).filter(([name]) => name.startsWith('fetch#'));
    expect(fetchSlots).toHaveLength(2);
    expect(results[0].memory_size).toBe(fetchSlots.reduce((n, [, v]) => n + v.size, 0));
    engine.dispose();
  });

  it('an adaptation stopped after a trial goes on from it with --resume and ends as one never stopped', async () => {
    const dir = latestCheckpoint(runDir)!;
    const { engine } = await createEngine({ ...cfg, model: { ...cfg.model, path: dir } }, 'fresh');
    const opts = { task: 'fetch', trials: 3, variations: 2, split: 'test' as const, memoryFrom: dir, source: dir, log: () => {} };
    const whole = join(root, 'whole');
    await adapt(engine, cfg, { ...opts, outDir: whole, resume: true });
    // A kill right after trial 2 was saved: its log line throws.
    const cut = join(root, 'cut');
    const killAfterTrial2 = (l: string) => {
      if (l.startsWith('trial 2/3: mean score')) throw new Error('killed');
    };
    await expect(adapt(engine, cfg, { ...opts, outDir: cut, log: killAfterTrial2 })).rejects.toThrow('killed');
    expect(existsSync(join(cut, TRIAL_STATE_FILE))).toBe(true);
    expect(existsSync(join(cut, 'adapt.json'))).toBe(false);
    // Without --resume the unfinished trials are refused, not overwritten; with other options, the option is named.
    await expect(adapt(engine, cfg, { ...opts, outDir: cut })).rejects.toThrow(/holds an unfinished adaptation; continue it with --resume/);
    await expect(adapt(engine, cfg, { ...opts, variations: 3, outDir: cut, resume: true })).rejects.toThrow(
      /another variations; resume with the same command/,
    );
    await expect(adapt(engine, { ...cfg, memory: { ...cfg.memory, top_k: 1 } }, { ...opts, outDir: cut, resume: true })).rejects.toThrow(
      /another config \(memory\.top_k: 2 in the run, 1 now\)/,
    );
    // A state from before the config was kept whole holds its hash, taken without the options added since.
    const state = JSON.parse(readFileSync(join(cut, TRIAL_STATE_FILE), 'utf8'));
    const { partial_save_minutes: _, ...train } = cfg.train;
    const sha = (c: object) => createHash('sha256').update(JSON.stringify(c)).digest('hex');
    const legacy = (hash: string) =>
      writeFileSync(
        join(cut, TRIAL_STATE_FILE),
        JSON.stringify({ ...state, identity: { ...state.identity, config: undefined, config_sha256: hash } }),
      );
    legacy(sha({ ...cfg, memory: { ...cfg.memory, top_k: 1 } }));
    await expect(adapt(engine, cfg, { ...opts, outDir: cut, resume: true })).rejects.toThrow(
      /another config \(this state holds only its hash/,
    );
    legacy(sha({ ...cfg, train }));

    const lines: string[] = [];
    await adapt(engine, cfg, { ...opts, outDir: cut, resume: true, log: (l) => lines.push(l) });
    expect(lines.filter((l) => l.startsWith('resuming after trial 2'))).toHaveLength(1);
    expect(lines.filter((l) => /^trial \d\/3: mean score/.test(l)).map((l) => l.slice(0, 9))).toEqual(['trial 3/3']);
    const read = (d: string, f: string) => readFileSync(join(d, f), 'utf8');
    expect(JSON.parse(read(cut, 'adapt.json'))).toEqual(JSON.parse(read(whole, 'adapt.json')));
    expect(read(cut, 'memory.json')).toBe(read(whole, 'memory.json'));
    // The same records in the same order; only the time each was written differs.
    const records = (d: string) =>
      read(d, ADAPT_TRAJECTORIES)
        .trim()
        .split('\n')
        .map((l) => ({ ...JSON.parse(l), time: null }));
    expect(records(cut)).toEqual(records(whole));
    expect(records(cut).map((r) => r.trial)).toEqual([1, 1, 2, 2, 3, 3]);
    expect(existsSync(join(cut, TRIAL_STATE_FILE))).toBe(false);
    engine.dispose();
  });

  it('refuses an unknown task, naming the known ones', async () => {
    const { engine } = await createEngine({ ...cfg, model: { ...cfg.model, path: latestCheckpoint(runDir)! } }, 'fresh');
    await expect(
      adapt(engine, cfg, { task: 'nope', trials: 1, variations: 1, split: 'test', memoryFrom: null, outDir: join(root, 'x') }),
    ).rejects.toThrow(/unknown task "nope".*fetch/);
    engine.dispose();
  });

  it("memory show prints a run's slots, newest first, and names a missing slot", () => {
    const text = showMemory(runDir, { limit: 2, json: false });
    expect(text).toMatch(/tips in 1 slots/);
    expect(text).toMatch(/## clue \(\d+ tips; newest 2\)/);
    expect(text).toMatch(/\[score \d+(\.\d)?\] .*The action you took was/);
    const json = JSON.parse(showMemory(runDir, { task: 'clue', limit: 1, json: true }));
    expect(json.slots.clue.newest).toHaveLength(1);
    expect(() => showMemory(runDir, { task: 'boil', limit: 1, json: false })).toThrow(/no slot "boil" \(slots: clue\)/);
    expect(() => showMemory(join(root, 'missing'), { limit: 1, json: false })).toThrow(/does not exist/);
  });
});
