/**
 * Training with the instruct prompt (a model directory with a chat template): prefix reuse in the
 * rollouts and packed episodes in the update change the work, not the result. The same run with both
 * switched off takes the same actions and the same losses; with the PyTorch worker (greedy, so both
 * engines take the same actions) the packed update agrees with the TypeScript engine's.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pythonGate } from '../../test/support/python.ts';
import { saveTinyInstructModel } from '../../test/support/instruct-model.ts';
import { loadConfig } from '../config/load.ts';
import { train } from './trainer.ts';

const root = mkdtempSync(join(tmpdir(), 'empo2-instruct-train-'));
const modelDir = join(root, 'model');
afterAll(() => rmSync(root, { recursive: true, force: true }));

const config = (dir: string, extra: string[]) =>
  loadConfig(null, [
    `run_dir=${dir}`,
    'seed=3',
    `model.path=${modelDir}`,
    'model.torch.device=cpu',
    'model.torch.threads=1',
    'env.tasks=[fetch, power]',
    'env.eval_variations=1',
    'env.max_steps=5',
    'rollout.tasks_per_batch=3',
    // Groups of one: the advantage is the return (novelty reward included), never 0, so every step trains.
    'rollout.group_size=1',
    'algo.name=empo2',
    'algo.p=0',
    'algo.intrinsic=novelty',
    'algo.intrinsic_coef=0.1',
    // One minibatch: packed or per step, the optimiser step sees the same tokens.
    'algo.minibatches=1',
    'optim.eps=1e-6',
    'train.iterations=2',
    'train.eval_every=0',
    ...extra,
  ]);

type Line = Record<string, number>;
const trainLines = (dir: string): Line[] =>
  readFileSync(join(dir, 'metrics.jsonl'), 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l))
    .filter((l) => l.type === 'train');

beforeAll(() => saveTinyInstructModel(modelDir));

describe('training with the instruct prompt', () => {
  it('prefix reuse and packed episodes give the same actions and losses as per-step work, with less of it', async () => {
    const fast = join(root, 'fast');
    const slow = join(root, 'slow');
    await train(config(fast, []), { resume: false, log: () => {} });
    await train(config(slow, ['rollout.reuse_prefix=false', 'optim.pack_episodes=false']), { resume: false, log: () => {} });
    const a = trainLines(fast);
    const b = trainLines(slow);
    for (let i = 0; i < 2; i++) {
      // Float sums in another order move the weights by rounding noise, and a sampled token can flip
      // in the iteration after: actions are compared where both runs start from the same weights.
      const same = i === 0 ? ['env_steps', 'mean_score', 'prompt_tokens', 'trained_tokens'] : [];
      for (const k of same) expect(a[i][k], `iteration ${i + 1} ${k}`).toBe(b[i][k]);
      expect(a[i].trained_tokens).toBeGreaterThan(0);
      expect(Math.abs(a[i].loss)).toBeGreaterThan(1e-4);
      if (i === 0) {
        expect(Math.abs(a[i].loss - b[i].loss), `iteration ${i + 1} loss`).toBeLessThan(1e-5 * Math.max(1, Math.abs(b[i].loss)));
        expect(Math.abs(a[i].grad_norm - b[i].grad_norm) / b[i].grad_norm, `iteration ${i + 1} grad norm`).toBeLessThan(1e-4);
      }
      // The work: episodes went into packed sequences, and most prompt tokens came from kept caches.
      expect(a[i].packed_share).toBeGreaterThan(0.5);
      expect(b[i].packed_share).toBe(0);
      expect(a[i].sequences).toBeLessThan(b[i].sequences);
      expect(a[i].sequence_tokens).toBeLessThan(b[i].sequence_tokens);
      expect(a[i].prefill_tokens).toBeLessThan(0.6 * a[i].prompt_tokens);
      expect(b[i].prefill_tokens).toBe(b[i].prompt_tokens);
    }
  }, 300_000);

  const gate = pythonGate(['torch', 'transformers']);
  it.skipIf(!gate.available)(
    `the PyTorch worker's packed, cached run agrees with the TypeScript engine's (greedy) (${gate.label})`,
    async () => {
      const greedy = ['rollout.temperature=0', 'rollout.eval_temperature=0'];
      const ts = join(root, 'tfjs-greedy');
      const pt = join(root, 'torch-greedy');
      await train(config(ts, [...greedy, 'model.engine=tfjs']), { resume: false, log: () => {} });
      await train(config(pt, [...greedy, 'model.engine=torch']), { resume: false, log: () => {} });
      const a = trainLines(ts);
      const b = trainLines(pt);
      for (let i = 0; i < 2; i++) {
        for (const k of ['env_steps', 'mean_score', 'trained_tokens', 'sequences'])
          expect(b[i][k], `iteration ${i + 1} ${k}`).toBe(a[i][k]);
        expect(b[i].packed_share).toBeGreaterThan(0.5);
        expect(b[i].prefill_tokens).toBeLessThan(0.6 * b[i].prompt_tokens);
        expect(Math.abs(a[i].loss)).toBeGreaterThan(1e-4);
        expect(b[i].loss, `iteration ${i + 1} loss`).toBeCloseTo(a[i].loss, 4);
        expect(Math.abs(b[i].grad_norm - a[i].grad_norm) / a[i].grad_norm, `iteration ${i + 1} grad norm`).toBeLessThan(1e-3);
      }
    },
    300_000,
  );
});
