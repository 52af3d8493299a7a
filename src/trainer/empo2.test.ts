/**
 * EMPO² end to end on the built-in environment with a tiny model: one short run per update mode,
 * memory persistence through checkpoints, and a bit-exact resume with memory.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadConfig, ConfigError } from '../config/load.ts';
import type { Config } from '../config/schema.ts';
import { TipMemory } from '../memory/store.ts';
import { readSafetensors, toFloat32 } from '../policy/safetensors.ts';
import { initBackend } from '../policy/tfjs/backend.ts';
import { latestCheckpoint } from '../run/checkpoint.ts';
import { MEMORY_FILE } from '../run/checkpoint.ts';
import { train } from './trainer.ts';
import { createEngine } from '../policy/create-engine.ts';
import { evaluateEngine, type EvalRecord } from '../adapt/checkpoint-eval.ts';
import { TIP_OPEN } from './prompt.ts';
import type { PolicyEngine } from '../policy/types.ts';
import { TINY_RUN } from '../../test/support/tiny.ts';

const root = mkdtempSync(join(tmpdir(), 'empo2-modes-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

function config(runDir: string, iterations: number, extra: string[]): Config {
  return loadConfig(null, [
    `run_dir=${runDir}`,
    ...TINY_RUN,
    'memory.top_k=2',
    `train.iterations=${iterations}`,
    'train.checkpoint_every=1',
    'train.eval_every=0',
    'algo.name=empo2',
    ...extra,
  ]);
}

type Line = Record<string, unknown> & { type: string; iteration: number };
const trainLines = (dir: string): Line[] =>
  readFileSync(join(dir, 'metrics.jsonl'), 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as Line)
    .filter((l) => l.type === 'train');

/** Two runs ended alike: the same training lines (times aside), memory, weights and optimiser moments, bit for bit. */
function expectSameEnd(run: string, reference: string, what = run): void {
  const strip = (l: Line) => Object.fromEntries(Object.entries(l).filter(([k]) => !/seconds|per_s|share/.test(k)));
  expect(trainLines(run).map(strip), what).toEqual(trainLines(reference).map(strip));
  const a = latestCheckpoint(reference)!;
  const b = latestCheckpoint(run)!;
  expect(readFileSync(join(b, MEMORY_FILE), 'utf8'), what).toBe(readFileSync(join(a, MEMORY_FILE), 'utf8'));
  for (const file of ['model.safetensors', 'optimizer.safetensors']) {
    const ta = readSafetensors(join(a, file)).tensors;
    const tb = readSafetensors(join(b, file)).tensors;
    for (const [k, t] of ta) expect(Array.from(toFloat32(tb.get(k)!)), `${what}: ${file} ${k}`).toEqual(Array.from(toFloat32(t)));
  }
}

beforeAll(async () => {
  await initBackend();
});

describe('EMPO² modes end to end', () => {
  it('off-policy (p = 1, q = 1): tips shown, every sample scored without them, memory saved with the checkpoint', async () => {
    const dir = join(root, 'off');
    await train(config(dir, 2, ['algo.p=1', 'algo.q=1']), { resume: false, log: () => {} });
    const lines = trainLines(dir);
    expect(lines.map((l) => l.modes)).toEqual([
      { plain: 0, 'tips-on-policy': 0, 'tips-off-policy': 4 },
      { plain: 0, 'tips-on-policy': 0, 'tips-off-policy': 4 },
    ]);
    // Iteration 1 starts with an empty memory (no tips to show); iteration 2 sees iteration 1's tips.
    expect(lines[0].tips_added as number).toBeGreaterThan(0);
    expect(lines[1].mean_prompt_tokens as number).toBeGreaterThan(lines[0].mean_prompt_tokens as number);
    expect(lines[1].off_policy_sequences).toBe(lines[1].sequences);
    const saved = JSON.parse(readFileSync(join(latestCheckpoint(dir)!, MEMORY_FILE), 'utf8'));
    const memory = TipMemory.fromJSON(saved.tips);
    expect(memory.size()).toBe(lines[1].memory_size);
    expect(memory.slotNames().every((s) => ['fetch', 'clue'].includes(s))).toBe(true);
    expect(memory.entries(memory.slotNames()[0])[0].text).toMatch(/The action you took was .+; you finally scored \d+\/100\.$/);
  });

  it('on-policy with tips (p = 1, q = 0) and plain EMPO² with the intrinsic reward (p = 0) both run', async () => {
    const on = join(root, 'on');
    await train(config(on, 2, ['algo.p=1', 'algo.q=0', 'algo.intrinsic=retrieval']), { resume: false, log: () => {} });
    const a = trainLines(on);
    expect(a.every((l) => (l.modes as Record<string, number>)['tips-on-policy'] === 4 && l.off_policy_sequences === 0)).toBe(true);
    expect(a[0].intrinsic_mean as number).toBeGreaterThan(0);

    const plain = join(root, 'plain');
    await train(config(plain, 1, ['algo.p=0', 'algo.intrinsic=novelty']), { resume: false, log: () => {} });
    const b = trainLines(plain);
    expect(b[0].modes).toEqual({ plain: 4, 'tips-on-policy': 0, 'tips-off-policy': 0 });
    // Novelty: the first visit of each state earns coef·1, so the mean per episode is positive.
    expect(b[0].intrinsic_mean as number).toBeGreaterThan(0);
    expect(b[0].tips_added).toBe(0); // no memory rollouts and no retrieval reward: no tips written
    expect(existsSync(join(latestCheckpoint(plain)!, MEMORY_FILE))).toBe(true); // the novelty list
  });

  it('experimental.p_end moves p from 1 at the first iteration to 0 at the last: all memory rollouts, then none', async () => {
    const dir = join(root, 'p-end');
    const log: string[] = [];
    await train(config(dir, 3, ['algo.p=1', 'experimental.p_end=0', 'algo.q=1']), { resume: false, log: (l) => log.push(l) });
    const modes = trainLines(dir).map((l) => l.modes);
    expect(modes[0]).toEqual({ plain: 0, 'tips-on-policy': 0, 'tips-off-policy': 4 });
    expect(modes[2]).toEqual({ plain: 4, 'tips-on-policy': 0, 'tips-off-policy': 0 });
    expect(log.some((l) => l.includes('p=1 → 0 by iteration 3'))).toBe(true);
  });

  it('logs the mean rollout score of each mode that ran, consistent with the overall mean', async () => {
    const dir = join(root, 'by-mode');
    await train(config(dir, 3, ['algo.p=0.5', 'algo.q=0.5', 'algo.mode_draw=task']), { resume: false, log: () => {} });
    const lines = trainLines(dir);
    expect(lines.some((l) => Object.keys(l.score_by_mode as object).length > 1)).toBe(true); // the check below has something to weigh
    for (const l of lines) {
      const counts = l.modes as Record<string, number>;
      const byMode = l.score_by_mode as Record<string, number>;
      expect(Object.keys(byMode).sort()).toEqual(
        Object.keys(counts)
          .filter((m) => counts[m] > 0)
          .sort(),
      );
      // `modes` counts rollouts, so the overall mean is the count-weighted mean of the per-mode means.
      const rollouts = Object.values(counts).reduce((a, b) => a + b, 0);
      const weighted = Object.entries(byMode).reduce((a, [m, v]) => a + (v * counts[m]) / rollouts, 0);
      expect(weighted).toBeCloseTo(l.mean_score as number, 9);
    }
  });

  it('experimental.mode_draw_per_rollout mixes modes within a group and logs how many rollouts ran in each', async () => {
    const dir = join(root, 'per-rollout');
    const log: string[] = [];
    await train(config(dir, 3, ['algo.p=0.5', 'algo.q=1', 'experimental.mode_draw_per_rollout=true']), {
      resume: false,
      log: (l) => log.push(l),
    });
    const counts = trainLines(dir).map((l) => l.modes as Record<string, number>);
    // Groups of 2: an odd number of tip-guided rollouts in an iteration means a group holds both kinds.
    expect(counts.some((c) => c['tips-off-policy'] % 2 === 1)).toBe(true);
    for (const c of counts) expect(c.plain + c['tips-off-policy']).toBe(4);
    expect(log.some((l) => /\[plain \d, tips\/off \d\]/.test(l))).toBe(true);
  });

  it('resume restores the memory: 2 + 1 iterations end exactly where 3 straight iterations end', async () => {
    const extra = ['algo.p=0.5', 'algo.mode_draw=task', 'algo.intrinsic=novelty'];
    const straight = join(root, 'straight');
    await train(config(straight, 3, extra), { resume: false, log: () => {} });
    const split = join(root, 'split');
    await train(config(split, 2, extra), { resume: false, log: () => {} });
    await train(config(split, 3, extra), { resume: true, log: () => {} });
    expectSameEnd(split, straight);
  });

  it('a run stopped inside an iteration saved part-way resumes inside it and ends exactly where the straight run ends', async () => {
    const extra = ['algo.p=0.5', 'algo.mode_draw=task', 'algo.intrinsic=novelty', 'algo.minibatches=2', 'algo.epochs=2'];
    const straight = join(root, 'straight-partial');
    await train(config(straight, 3, extra), { resume: false, log: () => {} });
    // Stopped after iteration 3's rollouts (save 1), after its first optimiser step (2), after its third (4).
    for (const stopAt of [1, 2, 4]) {
      const split = join(root, `partial-${stopAt}`);
      const cfg = config(split, 3, [...extra, 'train.partial_save_minutes=0']);
      let saves = 0;
      const stop = (dir: string) => {
        if (dir.endsWith('partial-iter-000003') && ++saves === stopAt) throw new Error('stopped here');
      };
      await expect(train(cfg, { resume: false, log: () => {}, onPartialSave: stop })).rejects.toThrow('stopped here');
      expect(existsSync(join(split, 'checkpoints', 'partial-iter-000003', 'batch.json'))).toBe(true);
      const log: string[] = [];
      await train(cfg, { resume: true, log: (l) => log.push(l) });
      expect(log.some((l) => l.startsWith('resuming inside iteration 3'))).toBe(true);
      expect(existsSync(join(split, 'checkpoints', 'partial-iter-000003'))).toBe(false); // superseded by iter-000003
      expectSameEnd(split, straight, `stopped at save ${stopAt}`);
    }
  });

  it('a Ctrl-C during an iteration saved part-way stops at its next part-way save, and the resumed run ends as the straight one', async () => {
    const extra = ['algo.p=0.5', 'algo.mode_draw=task', 'algo.intrinsic=novelty', 'algo.minibatches=2', 'algo.epochs=2'];
    const split = join(root, 'partial-ctrl-c');
    const cfg = config(split, 3, [...extra, 'train.partial_save_minutes=0']);
    const log: string[] = [];
    // The first Ctrl-C arrives during iteration 3's first optimiser step: the run stops after it.
    const ctrlC = (dir: string, progress: { optimizerSteps: number } | null) => {
      if (dir.endsWith('partial-iter-000003') && progress === null) setImmediate(() => process.emit('SIGINT'));
    };
    const result = await train(cfg, { resume: false, handleSignals: true, log: (l) => log.push(l), onPartialSave: ctrlC });
    expect(result.interrupted).toBe(true);
    expect(log.filter((l) => l.startsWith('iter 3: stopped part-way'))).toEqual([
      expect.stringMatching(/^iter 3: stopped part-way \(1 of 4 optimiser steps done\); --resume goes on from .*partial-iter-000003$/),
    ]);
    expect(latestCheckpoint(split)).toMatch(/iter-000002$/);
    await train(cfg, { resume: true, log: () => {} });
    const straight = join(root, 'straight-partial'); // made by the test above
    expectSameEnd(split, straight);
  });

  it('a run saved part-way before its first checkpoint resumes from that save, and a fresh run there is refused', async () => {
    const extra = [
      'algo.p=0.5',
      'algo.mode_draw=task',
      'algo.intrinsic=novelty',
      'algo.minibatches=2',
      'algo.epochs=2',
      'train.checkpoint_every=5',
    ];
    const split = join(root, 'partial-before-checkpoint');
    const cfg = config(split, 3, [...extra, 'train.partial_save_minutes=0']);
    const stop = (dir: string, progress: { optimizerSteps: number } | null) => {
      if (dir.endsWith('partial-iter-000002') && progress?.optimizerSteps === 1) throw new Error('stopped here');
    };
    await expect(train(cfg, { resume: false, log: () => {}, onPartialSave: stop })).rejects.toThrow('stopped here');
    expect(latestCheckpoint(split)).toBeNull();
    await expect(train(cfg, { resume: false, log: () => {} })).rejects.toThrow(/already holds a run; use --resume/);
    const log: string[] = [];
    await train(cfg, { resume: true, log: (l) => log.push(l) });
    expect(log.some((l) => l.startsWith('resuming inside iteration 2'))).toBe(true);
    expectSameEnd(split, join(root, 'straight-partial')); // made with a checkpoint every iteration, which changes nothing computed
  });

  it('GRPO with memory or intrinsic options is refused, naming the key', () => {
    expect(() => loadConfig(null, ['algo.name=grpo', 'algo.p=0.3'])).toThrow(ConfigError);
    expect(() => loadConfig(null, ['algo.name=grpo', 'algo.p=0.3'])).toThrow(/algo\.p: 0\.3 with algo\.name=grpo/);
    expect(() => loadConfig(null, ['algo.name=grpo', 'experimental.p_end=0.3'])).toThrow(/experimental\.p_end: 0\.3 with algo\.name=grpo/);
    expect(() => loadConfig(null, ['algo.name=grpo', 'algo.intrinsic=novelty'])).toThrow(/algo\.intrinsic: novelty with algo\.name=grpo/);
  });
});

describe('empo2 eval with train.eval_with_memory', () => {
  /** The engine of `dir`, with every prompt it is asked to continue decoded into `seen`. */
  async function recordingEngine(cfg: Config, dir: string, seen: string[]): Promise<PolicyEngine> {
    const { engine } = await createEngine({ ...cfg, model: { ...cfg.model, path: dir } }, 'fresh');
    return {
      tokenizer: engine.tokenizer,
      generate: (prompts, opts) => {
        seen.push(...prompts.map((p) => engine.tokenizer.decode(p)));
        return engine.generate(prompts, opts);
      },
      logprobs: (b, t) => engine.logprobs(b, t),
      trainStep: (b, o, t, lr) => engine.trainStep(b, o, t, lr),
      save: (d) => engine.save(d),
      dispose: () => engine.dispose(),
    };
  }

  it("shows tips from the checkpoint's memory (and says so in --json), shows none without the switch, and refuses a checkpoint without a memory", async () => {
    const dir = join(root, 'eval-memory');
    // Evaluated on the training layouts, where the state texts match the memory's keys.
    const cfg = config(dir, 1, ['algo.p=1', 'algo.q=1', 'env.eval_split=train', 'env.eval_variations=2']);
    await train(cfg, { resume: false, log: () => {} });
    const checkpoint = latestCheckpoint(dir)!;
    const tips = TipMemory.fromJSON(JSON.parse(readFileSync(join(checkpoint, MEMORY_FILE), 'utf8')).tips).size();
    expect(tips).toBeGreaterThan(0);

    const run = async (withMemory: boolean, modelDir = checkpoint) => {
      const seen: string[] = [];
      const engine = await recordingEngine(cfg, checkpoint, seen);
      const json = join(root, `eval-${withMemory}.json`);
      try {
        await evaluateEngine(
          engine,
          { ...cfg, train: { ...cfg.train, eval_with_memory: withMemory } },
          { column: 'checkpoint', json, modelDir },
        );
      } finally {
        engine.dispose();
      }
      return { seen, record: JSON.parse(readFileSync(json, 'utf8')) as EvalRecord };
    };
    const shown = await run(true);
    expect(shown.seen.some((p) => p.includes(TIP_OPEN))).toBe(true);
    expect(shown.record.with_memory).toEqual({ tips });
    const plain = await run(false);
    expect(plain.seen.length).toBeGreaterThan(0);
    expect(plain.seen.some((p) => p.includes(TIP_OPEN))).toBe(false);
    expect(plain.record.with_memory).toBeUndefined();

    await expect(run(true, root)).rejects.toThrow(ConfigError);
    await expect(run(true, root)).rejects.toThrow(`train.eval_with_memory is set, but ${root} has no ${MEMORY_FILE}`);
  }, 60_000);
});
