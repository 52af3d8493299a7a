/**
 * LoRA in the engine without Python: attaching changes nothing (B = 0), a train step moves only
 * adapter matrices and the optimiser holds state for them alone, dropout acts only in training,
 * merging keeps the outputs, and save/load (PEFT layout, in the model's adapter/ folder) is exact.
 * PEFT parity itself is in src/policy/hf/hf.test.ts.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { initBackend, tf } from './backend.ts';
import { Qwen2Model, type ModelConfig } from './qwen2.ts';
import { TfjsEngine, responseLogprobs } from './engine.ts';
import { loadModelDir, saveModelDir } from './checkpoint.ts';
import { loadLoraAdapter, saveLoraAdapter, type LoraConfig } from './lora.ts';
import { readSafetensorsHeader } from '../safetensors.ts';
import { trainByteLevelBPE, Tokenizer } from '../tokenizer.ts';
import type { ObjectiveConfig } from '../../algo/objective.ts';
import type { TrainSequence } from '../types.ts';

let tokenizer: Tokenizer;
const dirs: string[] = [];
const tempDir = () => {
  const d = mkdtempSync(join(tmpdir(), 'empo2-lora-'));
  dirs.push(d);
  return d;
};

beforeAll(async () => {
  await initBackend();
  tokenizer = Tokenizer.fromJSON(
    trainByteLevelBPE(['open red box', 'take yellow hat', 'go to kitchen'], {
      vocabSize: 280,
      specialTokens: ['<|endoftext|>', '<|im_end|>'],
    }),
  );
});
afterAll(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));

const LORA: LoraConfig = { r: 4, alpha: 8, dropout: 0, targetModules: ['q_proj', 'v_proj', 'down_proj'] };
const objective: ObjectiveConfig = { clipLow: 0.2, clipHigh: 0.2, dualClip: null, klCoef: 0, lowProbDelta: null };

function config(): ModelConfig {
  return {
    model_type: 'qwen2',
    vocab_size: tokenizer.vocabSize,
    hidden_size: 32,
    intermediate_size: 64,
    num_hidden_layers: 2,
    num_attention_heads: 4,
    num_key_value_heads: 2,
    max_position_embeddings: 256,
    rms_norm_eps: 1e-6,
    rope_theta: 10000,
    tie_word_embeddings: false,
    initializer_range: 0.3,
  };
}

function engine(model: Qwen2Model, lr = 5e-2): TfjsEngine {
  return new TfjsEngine(model, tokenizer, {
    optimizer: { lr, beta1: 0.9, beta2: 0.99, eps: 1e-8, weightDecay: 0.1 },
    maxGradNorm: 0,
    microBatchTokens: 10_000,
    endTokens: [1],
    padToken: 0,
  });
}

const SEQS = [
  { prompt: [5, 9, 30, 31], response: [40, 41, 42, 1] },
  { prompt: [7, 8], response: [50, 51, 1] },
];
const batch = (old: number[][]): TrainSequence[] =>
  SEQS.map((s, i) => ({ ...s, oldLogprobs: old[i], advantages: s.response.map(() => (i === 0 ? 1 : -1)), mask: s.response.map(() => 1) }));
const scores = (m: Qwen2Model) => tf.tidy(() => Array.from(responseLogprobs(m, SEQS, 1, 0).dataSync()));
const snapshot = (vars: Map<string, tf.Variable>) => new Map([...vars].map(([k, v]) => [k, Float32Array.from(v.dataSync())]));
const maxDiff = (a: number[], b: number[]) => a.reduce((m, x, i) => Math.max(m, Math.abs(x - b[i])), 0);

/** Gives B random values, as after some training, so the adapters change the outputs. */
function perturbB(model: Qwen2Model, seed: number): void {
  let k = 0;
  for (const { B } of model.lora!.modules.values()) tf.tidy(() => B.assign(tf.randomNormal(B.shape, 0, 0.3, 'float32', seed + k++)));
}

describe('LoRA', () => {
  it('attaches to the targeted projections only; A is seeded and non-zero, B is zero, so outputs do not change', () => {
    const model = Qwen2Model.random(config(), 1);
    const before = scores(model);
    model.attachLora(LORA, 7);
    expect([...model.lora!.modules.keys()]).toEqual([
      'model.layers.0.self_attn.q_proj',
      'model.layers.0.self_attn.v_proj',
      'model.layers.0.mlp.down_proj',
      'model.layers.1.self_attn.q_proj',
      'model.layers.1.self_attn.v_proj',
      'model.layers.1.mlp.down_proj',
    ]);
    const q = model.lora!.modules.get('model.layers.0.self_attn.q_proj')!;
    expect(q.A.shape).toEqual([4, 32]);
    expect(q.B.shape).toEqual([32, 4]);
    expect(model.lora!.modules.get('model.layers.0.mlp.down_proj')!.A.shape).toEqual([4, 64]);
    expect(model.lora!.scaling).toBe(2);
    const a = Array.from(q.A.dataSync());
    expect(Math.max(...a.map(Math.abs))).toBeGreaterThan(0.05);
    expect(Math.max(...a.map(Math.abs))).toBeLessThanOrEqual(1 / Math.sqrt(32)); // PEFT's Kaiming-uniform bound
    expect(Array.from(q.B.dataSync()).every((x) => x === 0)).toBe(true);
    expect(scores(model)).toEqual(before);
    // Same seed, same A.
    const twin = Qwen2Model.random(config(), 1, { lora: LORA, loraSeed: 7 });
    expect(Array.from(twin.lora!.modules.get('model.layers.0.self_attn.q_proj')!.A.dataSync())).toEqual(a);
    model.dispose();
    twin.dispose();
  });

  it('a train step changes only adapter tensors, and the optimiser holds state for the adapters alone', async () => {
    const model = Qwen2Model.random(config(), 2);
    const e = new TfjsEngine(model, tokenizer, {
      optimizer: { lr: 5e-2, beta1: 0.9, beta2: 0.99, eps: 1e-8, weightDecay: 0.1 },
      maxGradNorm: 1,
      microBatchTokens: 10_000,
      endTokens: [1],
      padToken: 0,
      lora: LORA,
      loraSeed: 3,
    });
    const base = snapshot(model.params);
    const adapters = snapshot(model.lora!.variables());
    const old = await e.logprobs(SEQS);
    await e.trainStep(batch(old), objective);
    await e.trainStep(batch(old), objective);
    for (const [name, before] of base) expect(Array.from(model.params.get(name)!.dataSync()), name).toEqual(Array.from(before));
    const after = snapshot(model.lora!.variables());
    for (const [name, before] of adapters) expect(maxDiff(Array.from(after.get(name)!), Array.from(before)), name).toBeGreaterThan(1e-4);
    const names = [...model.lora!.variables().keys()].sort();
    expect([...e.optimizer.m.keys()].sort()).toEqual(names);
    expect([...e.optimizer.v.keys()].sort()).toEqual(names);
    expect(maxDiff(scores(model), old.flat())).toBeGreaterThan(1e-3);
    // The frozen base is still there for a reference policy: same scores to float32 rounding (one CI
    // run on a loaded machine differed in the 7th digit, 1e-6, so exact equality was too strict).
    expect(
      maxDiff(
        model.withoutLora(() => scores(model)),
        old.flat(),
      ),
    ).toBeLessThan(1e-5);
    expect(model.lora).not.toBeNull();
    e.dispose();
  });

  it('dropout acts on the adapter input in training only: scoring is deterministic and unaffected', async () => {
    const model = Qwen2Model.random(config(), 3, { lora: { ...LORA, dropout: 0.5 }, loraSeed: 1 });
    perturbB(model, 10);
    const twin = Qwen2Model.random(config(), 3, { lora: { ...LORA, dropout: 0 }, loraSeed: 1 });
    perturbB(twin, 10);
    expect(scores(model)).toEqual(scores(twin));
    expect(scores(model)).toEqual(scores(model));
    model.training = true;
    const dropped = scores(model);
    model.training = false;
    expect(maxDiff(dropped, scores(twin))).toBeGreaterThan(1e-3);
    model.dispose();
    twin.dispose();
  });

  it('merging folds scaling·B·A into the base weights and keeps the outputs', () => {
    const model = Qwen2Model.random(config(), 4, { lora: { ...LORA, targetModules: ['all-linear'] }, loraSeed: 2 });
    expect(model.lora!.modules.size).toBe(14);
    perturbB(model, 20);
    const before = scores(model);
    model.mergeLora();
    expect(model.lora).toBeNull();
    expect(maxDiff(scores(model), before)).toBeLessThan(1e-4);
    model.dispose();
  });

  it('saveModelDir puts the adapter in adapter/ (PEFT names, base untouched); loadModelDir restores it and training resumes exactly', async () => {
    const model = Qwen2Model.random(config(), 5, { lora: LORA, loraSeed: 4 });
    const e = engine(model);
    await e.trainStep(batch(await e.logprobs(SEQS)), objective);
    const dir = tempDir();
    await saveModelDir(dir, model, tokenizer);
    expect(existsSync(join(dir, 'adapter', 'adapter_config.json'))).toBe(true);
    const names = readSafetensorsHeader(join(dir, 'adapter', 'adapter_model.safetensors'))
      .entries.map((x) => x.name)
      .sort();
    expect(names).toContain('base_model.model.model.layers.1.mlp.down_proj.lora_B.weight');
    expect(names).toHaveLength(12);
    const cfg = JSON.parse(readFileSync(join(dir, 'adapter', 'adapter_config.json'), 'utf8'));
    expect(cfg).toMatchObject({
      peft_type: 'LORA',
      r: 4,
      lora_alpha: 8,
      lora_dropout: 0,
      target_modules: ['down_proj', 'q_proj', 'v_proj'],
      bias: 'none',
    });

    const loaded = loadModelDir(dir);
    expect(scores(loaded.model)).toEqual(scores(model));
    const e2 = engine(loaded.model);
    const state = e.optimizer.exportState();
    e2.optimizer.importState(state.step, state.tensors);
    const next = batch(await e.logprobs(SEQS));
    await e.trainStep(next, objective);
    await e2.trainStep(next, objective);
    expect(scores(loaded.model)).toEqual(scores(model));
    // Loading the base alone ignores the adapter; a fresh LoRA config attaches new adapters.
    const bare = loadModelDir(dir, { adapter: false });
    expect(bare.model.lora).toBeNull();
    e.dispose();
    e2.dispose();
    bare.model.dispose();
  });

  it('bad settings and adapters that do not fit the model give errors naming the field or tensor', async () => {
    const model = Qwen2Model.random(config(), 6);
    expect(() => model.attachLora({ ...LORA, r: 0 }, 0)).toThrow('"r" must be a positive integer');
    expect(() => model.attachLora({ ...LORA, dropout: 1 }, 0)).toThrow('"dropout" must be in [0, 1)');
    expect(() => model.attachLora({ ...LORA, targetModules: ['qproj'] }, 0)).toThrow(
      'target module "qproj" is not a projection of this model',
    );
    expect(() => model.attachLora({ ...LORA, targetModules: [], targetRegex: 'model\\.layers\\.9\\..*' }, 0)).toThrow(
      'matches none of the model',
    );
    expect(() => model.attachLora({ ...LORA, targetModules: [] }, 0)).toThrow('"targetModules" must be');
    expect(() => model.attachLora({ ...LORA, targetModules: ['all-linear', 'q_proj'] }, 0)).toThrow('"all-linear" must be the only entry');
    model.attachLora(LORA, 0);
    expect(() => model.attachLora(LORA, 0)).toThrow('already has LoRA adapters');
    const dir = tempDir();
    await saveLoraAdapter(dir, model);

    const other = Qwen2Model.random({ ...config(), hidden_size: 16, intermediate_size: 32 }, 6);
    expect(() => loadLoraAdapter(dir, other)).toThrow(
      /adapter_model\.safetensors: tensor "base_model\.model\.model\.layers\.0\.self_attn\.q_proj\.lora_A\.weight" has shape \[4,32\] but r=4 and the base model imply \[4,16\]/,
    );
    const cfgPath = join(dir, 'adapter_config.json');
    const cfg = JSON.parse(readFileSync(cfgPath, 'utf8'));
    writeFileSync(cfgPath, JSON.stringify({ ...cfg, target_modules: ['q_proj', 'v_proj', 'down_proj', 'k_proj'] }));
    expect(() => loadLoraAdapter(dir, model)).toThrow('no tensor "base_model.model.model.layers.0.self_attn.k_proj.lora_A.weight"');
    writeFileSync(cfgPath, JSON.stringify({ ...cfg, use_dora: true }));
    expect(() => loadLoraAdapter(dir, model)).toThrow(`${cfgPath}: "use_dora" true is not implemented`);
    writeFileSync(cfgPath, JSON.stringify({ ...cfg, target_modules: ['q_proj'] }));
    expect(() => loadLoraAdapter(dir, model)).toThrow('belongs to no module that');
    // PEFT's string form of target_modules is a regular expression over the whole module path.
    writeFileSync(cfgPath, JSON.stringify({ ...cfg, target_modules: '.*\\.(q_proj|v_proj|down_proj)' }));
    expect(loadLoraAdapter(dir, model).modules.size).toBe(6);
    expect(model.lora!.config.targetRegex).toBe('.*\\.(q_proj|v_proj|down_proj)');
    model.dispose();
    other.dispose();
  });
});
