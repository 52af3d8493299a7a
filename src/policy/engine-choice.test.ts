import { afterAll, describe, expect, it } from 'vitest';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadConfig } from '../config/load.ts';
import { chooseEngine, REAL_MODEL_PARAMETERS, torchProblem } from './engine-choice.ts';

const root = mkdtempSync(join(tmpdir(), 'empo2-engine-choice-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

/** A model directory holding only config.json, enough to size the model. */
function modelDir(name: string, c: Record<string, unknown>): string {
  const dir = join(root, name);
  mkdirSync(dir, { recursive: true });
  writeFileSync(
    join(dir, 'config.json'),
    JSON.stringify({
      model_type: 'llama',
      num_attention_heads: 9,
      num_key_value_heads: 3,
      tie_word_embeddings: true,
      rms_norm_eps: 1e-5,
      rope_theta: 100000,
      ...c,
    }),
  );
  return dir;
}
const smollm2 = modelDir('smollm2', { vocab_size: 49152, hidden_size: 576, intermediate_size: 1536, num_hidden_layers: 30 });
const small = modelDir('small', {
  vocab_size: 512,
  hidden_size: 96,
  intermediate_size: 256,
  num_hidden_layers: 2,
  num_attention_heads: 4,
  num_key_value_heads: 2,
});
const cfg = (...o: string[]) => loadConfig(null, [`run_dir=${join(root, 'run')}`, ...o]);
const torchHere = () => null;

describe('model.engine: auto', () => {
  it('is the default, and runs the tiny default and small models in process', () => {
    expect(cfg().model.engine).toBe('auto');
    expect(chooseEngine(cfg(), null, torchHere)).toMatchObject({ engine: 'tfjs' });
    expect(chooseEngine(cfg(), small, torchHere)).toMatchObject({ engine: 'tfjs', reason: expect.stringMatching(/run in process/) });
  });

  it(`runs a real model (≥ ${REAL_MODEL_PARAMETERS / 1e6}M parameters) on the PyTorch worker when the venv has torch`, () => {
    expect(chooseEngine(cfg(), smollm2, torchHere)).toEqual({
      engine: 'torch',
      reason: expect.stringMatching(/^auto: 135M parameters, the PyTorch worker/),
    });
  });

  it('falls back to the tfjs engine, saying why and how to install torch, when the worker cannot start', () => {
    const choice = chooseEngine(cfg(), smollm2, () => 'there is no Python at /x/bin/python (run npm run setup:test)');
    expect(choice.engine).toBe('tfjs');
    expect(choice.reason).toMatch(
      /would run faster on the PyTorch worker, but there is no Python at \/x\/bin\/python .*model\.engine: tfjs/,
    );
  });

  it('an engine named in the config is used as it is, without asking for torch', () => {
    const never = () => {
      throw new Error('asked');
    };
    expect(chooseEngine(cfg('model.engine=tfjs'), smollm2, never)).toEqual({ engine: 'tfjs', reason: null });
    expect(chooseEngine(cfg('model.engine=torch'), small, never)).toEqual({ engine: 'torch', reason: null });
  });
});

describe('the PyTorch check of model.engine: auto', () => {
  it('tells a Python that takes too long to import torch from one that cannot', () => {
    const dir = mkdtempSync(join(tmpdir(), 'empo2-slow-python-'));
    const slow = join(dir, 'python');
    writeFileSync(slow, '#!/bin/sh\nsleep 5\n', { mode: 0o755 });
    const broken = join(dir, 'python3');
    writeFileSync(broken, '#!/bin/sh\nexit 1\n', { mode: 0o755 });
    const saved = process.env.EMPO2_PYTHON;
    try {
      process.env.EMPO2_PYTHON = slow;
      expect(torchProblem(300)).toMatch(
        /did not finish importing torch, transformers and peft within 0.3 s \(a busy machine\?\); set model\.engine: torch/,
      );
      process.env.EMPO2_PYTHON = broken;
      expect(torchProblem(10_000)).toMatch(/cannot import torch, transformers and peft/);
    } finally {
      if (saved === undefined) delete process.env.EMPO2_PYTHON;
      else process.env.EMPO2_PYTHON = saved;
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
