/**
 * An EMPO² run whose memory rollouts are all updated on-policy with their tips (algo.p = 1, q = 0),
 * through the PyTorch worker with the instruct prompt: scoring each episode as its tip-free trunk plus
 * one branch per tipped step (optim.tip_branches, on by default) gives the
 * actions, losses and gradient norms of scoring each step alone with its tips, with fewer tokens run
 * through the model.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pythonGate } from '../../test/support/python.ts';
import { saveTinyInstructModel } from '../../test/support/instruct-model.ts';
import { loadConfig } from '../config/load.ts';
import { initBackend } from '../policy/tfjs/backend.ts';
import { loadModelDir } from '../policy/tfjs/checkpoint.ts';
import { latestCheckpoint } from '../run/checkpoint.ts';
import { train } from './trainer.ts';
import { updateSettings } from './update.ts';

const gate = pythonGate(['torch', 'transformers']);
const root = mkdtempSync(join(tmpdir(), 'empo2-tip-branches-'));
const modelDir = join(root, 'model');
afterAll(() => rmSync(root, { recursive: true, force: true }));

const config = (dir: string, extra: string[]) =>
  loadConfig(null, [
    `run_dir=${dir}`,
    'seed=3',
    `model.path=${modelDir}`,
    'model.engine=torch',
    'model.torch.device=cpu',
    'model.torch.threads=1',
    'env.tasks=[fetch, power]',
    'env.eval_variations=1',
    'env.max_steps=5',
    'rollout.tasks_per_batch=3',
    'rollout.group_size=1',
    'rollout.temperature=0',
    'rollout.eval_temperature=0',
    'algo.name=empo2',
    'algo.p=1',
    'algo.q=0',
    'algo.intrinsic=novelty',
    'algo.intrinsic_coef=0.1',
    // One minibatch: trunk plus branches or per step, the optimiser step sees the same tokens.
    'algo.minibatches=1',
    'optim.eps=1e-6',
    'train.iterations=2',
    'train.eval_every=0',
    'train.checkpoint_every=1',
    ...extra,
  ]);

type Line = Record<string, number>;
const trainLines = (dir: string): Line[] =>
  readFileSync(join(dir, 'metrics.jsonl'), 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l))
    .filter((l) => l.type === 'train');

beforeAll(async () => {
  if (!gate.available) return;
  await initBackend();
  await saveTinyInstructModel(modelDir);
});

describe('optim.tip_branches', () => {
  it('null is on, whatever the minibatches (each minibatch packs its own steps)', () => {
    const dir = join(root, 'settings');
    expect(updateSettings(config(dir, [])).tipBranches).toBe(true);
    expect(updateSettings(config(dir, ['algo.minibatches=4'])).tipBranches).toBe(true);
    expect(updateSettings(config(dir, ['optim.tip_branches=false'])).tipBranches).toBe(false);
  });
});

describe.skipIf(!gate.available)(`on-policy updates with tips as trunk plus branches (${gate.label})`, () => {
  it('give the losses of per-step scoring with fewer sequence tokens', async () => {
    const branched = join(root, 'branched');
    const perStep = join(root, 'per-step');
    await train(config(branched, []), { resume: false, log: () => {} });
    await train(config(perStep, ['optim.tip_branches=false']), { resume: false, log: () => {} });
    const a = trainLines(branched);
    const b = trainLines(perStep);
    expect(a.map((l) => l.iteration)).toEqual([1, 2]);
    for (let i = 0; i < 2; i++) {
      // Greedy rollouts from the same weights: the same actions and tokens.
      for (const k of ['env_steps', 'mean_score', 'prompt_tokens', 'trained_tokens'])
        expect(a[i][k], `iteration ${i + 1} ${k}`).toBe(b[i][k]);
      expect(a[i].trained_tokens).toBeGreaterThan(0);
      expect(Math.abs(a[i].loss)).toBeGreaterThan(1e-4);
      for (const k of ['loss', 'grad_norm', 'mean_ratio', 'clip_fraction', 'kl'])
        expect(Math.abs(a[i][k] - b[i][k]), `iteration ${i + 1} ${k}`).toBeLessThanOrEqual(1e-5 * Math.max(1e-3, Math.abs(b[i][k])));
    }
    // Iteration 1 has an empty memory (no tips): the same sequences either way. Iteration 2 shows tips:
    // fewer tokens run through the model.
    expect(a[0].sequence_tokens).toBe(b[0].sequence_tokens);
    expect(a[1].modes).toEqual({ plain: 0, 'tips-on-policy': 3, 'tips-off-policy': 0 });
    // The samples (and so the minibatches) are the same either way; the engine got one trunk with branches per episode.
    expect(a[1].sequences).toBe(b[1].sequences);
    expect(b[1].sequences).toBeGreaterThan(3);
    expect(a[1].sequence_tokens).toBeLessThan(0.7 * b[1].sequence_tokens);
    // The weights after both updates.
    const [wa, wb] = [loadModelDir(latestCheckpoint(branched)!).model, loadModelDir(latestCheckpoint(perStep)!).model];
    const initial = loadModelDir(modelDir).model;
    let gap = 0;
    let moved = 0;
    for (const [k, v] of wa.params) {
      const [x, y, w0] = [v.dataSync(), wb.params.get(k)!.dataSync(), initial.params.get(k)!.dataSync()];
      for (let i = 0; i < x.length; i++) {
        gap = Math.max(gap, Math.abs(x[i] - y[i]));
        moved = Math.max(moved, Math.abs(y[i] - w0[i]));
      }
    }
    console.log(
      `[tip-branches] sequence tokens ${a[1].sequence_tokens} vs ${b[1].sequence_tokens}; loss ${a[1].loss} vs ${b[1].loss}; weights moved ${moved.toExponential(2)}, gap ${gap.toExponential(2)}`,
    );
    expect(moved).toBeGreaterThan(1e-3);
    expect(gap / moved).toBeLessThan(1e-4);
    for (const m of [wa, wb, initial]) m.dispose();
  }, 300_000);

  it('with two minibatches each optimiser step packs its own steps: the same losses', async () => {
    const branched = join(root, 'branched-2');
    const perStep = join(root, 'per-step-2');
    await train(config(branched, ['algo.minibatches=2']), { resume: false, log: () => {} });
    await train(config(perStep, ['algo.minibatches=2', 'optim.tip_branches=false']), { resume: false, log: () => {} });
    const [a, b] = [trainLines(branched), trainLines(perStep)];
    for (let i = 0; i < 2; i++) {
      for (const k of ['env_steps', 'trained_tokens', 'sequences']) expect(a[i][k], `iteration ${i + 1} ${k}`).toBe(b[i][k]);
      for (const k of ['loss', 'grad_norm', 'mean_ratio'])
        expect(Math.abs(a[i][k] - b[i][k]), `iteration ${i + 1} ${k}`).toBeLessThanOrEqual(1e-5 * Math.max(1e-3, Math.abs(b[i][k])));
    }
    expect(a[1].sequence_tokens).toBeLessThan(0.8 * b[1].sequence_tokens);
    console.log(
      `[tip-branches] two minibatches: sequence tokens ${a[1].sequence_tokens} vs ${b[1].sequence_tokens}; loss ${a[1].loss} vs ${b[1].loss}`,
    );
  }, 300_000);
});
