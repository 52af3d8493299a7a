/** model.lora in a training run: only adapters change, they are checkpointed in the PEFT layout, and resume picks them up. */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadConfig } from '../config/load.ts';
import { readSafetensors, toFloat32 } from '../policy/safetensors.ts';
import { initBackend } from '../policy/tfjs/backend.ts';
import { latestCheckpoint } from '../run/checkpoint.ts';
import { train } from './trainer.ts';
import { TINY_MODEL } from '../../test/support/tiny.ts';

const root = mkdtempSync(join(tmpdir(), 'empo2-lora-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));
const cfg = (dir: string, iterations: number) =>
  loadConfig(null, [
    `run_dir=${dir}`,
    'seed=2',
    ...TINY_MODEL,
    'model.lora={r: 4, alpha: 8, dropout: 0, target_modules: [q_proj, v_proj]}',
    'env.tasks=[fetch]',
    'env.eval_variations=1',
    'env.max_steps=6',
    'rollout.tasks_per_batch=1',
    'rollout.group_size=3',
    `train.iterations=${iterations}`,
    'train.checkpoint_every=1',
    'train.eval_every=0',
  ]);

beforeAll(async () => {
  await initBackend();
});

describe('LoRA training run', () => {
  it('base weights stay as initialised, adapters are saved in the PEFT layout, and resume continues', async () => {
    const dir = join(root, 'run');
    await train(cfg(dir, 1), { resume: false, log: () => {} });
    const first = join(dir, 'checkpoints', 'iter-000001');
    await train(cfg(dir, 3), { resume: true, log: () => {} });
    const last = latestCheckpoint(dir)!;
    expect(last.endsWith('iter-000003')).toBe(true);
    for (const ck of [first, last]) {
      expect(existsSync(join(ck, 'adapter', 'adapter_config.json')), ck).toBe(true);
      expect(existsSync(join(ck, 'adapter', 'adapter_model.safetensors')), ck).toBe(true);
    }
    const adapterConfig = JSON.parse(readFileSync(join(last, 'adapter', 'adapter_config.json'), 'utf8'));
    expect(adapterConfig.r).toBe(4);
    expect([...adapterConfig.target_modules].sort()).toEqual(['q_proj', 'v_proj']);
    // Base weights: identical in every checkpoint (frozen).
    const base = (ck: string) => readSafetensors(join(ck, 'model.safetensors')).tensors;
    const a = base(first);
    const b = base(last);
    for (const [k, t] of a) expect(Array.from(toFloat32(b.get(k)!)), k).toEqual(Array.from(toFloat32(t)));
    const lines = readFileSync(join(dir, 'metrics.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    expect(lines.filter((l) => l.type === 'train').map((l) => l.iteration)).toEqual([1, 2, 3]);
  });
});
