/**
 * The engine's memory on the wasm heap: no second copy of weights or optimiser state outlives an
 * update, autograd's saved tensors share buffers, a training or generation pass keeps one layer's
 * activations at a time (the peak barely grows with depth), the plan's per-token estimates bound
 * the measured peak, and work that cannot fit is refused before it starts.
 *
 * The peak is measured by wrapping the wasm module's malloc/free, which every tensor buffer goes
 * through (tf.memory().numBytes counts a shared buffer once per tensor, so it is no measure).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { BackendWasm } from '@tensorflow/tfjs-backend-wasm';
import { initBackend, tf } from './backend.ts';
import { Qwen2Model, countParameters, type ModelConfig } from './qwen2.ts';
import { TfjsEngine, type EngineOptions } from './engine.ts';
import { AdamW } from './adamw.ts';
import { loadModelDir, saveModelDir } from './checkpoint.ts';
import { loadLoraAdapter, saveLoraAdapter, type LoraConfig } from './lora.ts';
import {
  ATTENTION_ELEMENTS,
  HEAP_SAFETY,
  LOGIT_ELEMENTS,
  chunkReserveBytes,
  plainTrainingBytesPerToken,
  trainingBytesPerToken,
} from './memory-plan.ts';
import { trainByteLevelBPE, Tokenizer } from '../tokenizer.ts';
import type { ObjectiveConfig } from '../../algo/objective.ts';
import type { TrainSequence } from '../types.ts';

let tokenizer: Tokenizer;
let heap: { live: number; peak: number };
const dirs: string[] = [];

/** Counts the bytes malloc'd on the wasm heap (live and peak) from now on. */
function trackHeap(): { live: number; peak: number } {
  const wasm = (tf.backend() as BackendWasm).wasm as unknown as { _malloc: (n: number) => number; _free: (p: number) => void };
  // emscripten binds these exports lazily, replacing the property on first call; resolve that first.
  wasm._free(wasm._malloc(16));
  const malloc = wasm._malloc.bind(wasm);
  const free = wasm._free.bind(wasm);
  const sizes = new Map<number, number>();
  const stats = { live: 0, peak: 0 };
  wasm._malloc = (n: number) => {
    const p = malloc(n);
    sizes.set(p >>> 0, n);
    stats.live += n;
    stats.peak = Math.max(stats.peak, stats.live);
    return p;
  };
  wasm._free = (p: number) => {
    const n = sizes.get(p >>> 0);
    if (n !== undefined) {
      stats.live -= n;
      sizes.delete(p >>> 0);
    }
    free(p);
  };
  return stats;
}

/** Peak bytes above what was live when `f` started. */
async function peakOf(f: () => Promise<unknown> | unknown): Promise<number> {
  const start = heap.live;
  heap.peak = start;
  await f();
  return heap.peak - start;
}

beforeAll(async () => {
  await initBackend();
  heap = trackHeap();
  tokenizer = Tokenizer.fromJSON(
    trainByteLevelBPE(['open red box', 'take yellow hat', 'go to kitchen'], {
      vocabSize: 280,
      specialTokens: ['<|endoftext|>', '<|im_end|>'],
    }),
  );
});
afterAll(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));

function config(layers: number, o: Partial<ModelConfig> = {}): ModelConfig {
  return {
    model_type: 'llama',
    vocab_size: tokenizer.vocabSize,
    hidden_size: 64,
    intermediate_size: 128,
    num_hidden_layers: layers,
    num_attention_heads: 4,
    num_key_value_heads: 2,
    max_position_embeddings: 4096,
    rms_norm_eps: 1e-6,
    rope_theta: 10000,
    tie_word_embeddings: true,
    initializer_range: 0.1,
    ...o,
  };
}

function engine(model: Qwen2Model, o: Partial<EngineOptions> = {}): TfjsEngine {
  return new TfjsEngine(model, tokenizer, {
    optimizer: { lr: 1e-3, beta1: 0.9, beta2: 0.99, eps: 1e-8, weightDecay: 0 },
    maxGradNorm: 1,
    microBatchTokens: 100_000,
    endTokens: [1],
    padToken: 0,
    ...o,
  });
}

const objective: ObjectiveConfig = { clipLow: 0.2, clipHigh: 0.3, dualClip: null, klCoef: 0, lowProbDelta: null };

function trainBatch(rows: number, length: number, response = 8): TrainSequence[] {
  return Array.from({ length: rows }, (_, b) => {
    const all = Array.from({ length }, (_, i) => 2 + ((i * 31 + b * 7) % 270));
    return {
      prompt: all.slice(0, length - response),
      response: all.slice(length - response),
      advantages: Array(response).fill(b % 2 ? 1 : -1),
      oldLogprobs: Array(response).fill(-5),
      mask: Array(response).fill(1),
    };
  });
}

describe('buffers', () => {
  it('tf.clone, which autograd applies to every tensor it saves, shares the buffer instead of copying it', () => {
    const a = tf.ones([1000]);
    const buffers = tf.memory().numDataBuffers;
    const peak = heap.live;
    const b = tf.clone(a);
    expect(tf.memory().numDataBuffers).toBe(buffers);
    expect(heap.live).toBe(peak);
    a.dispose();
    expect(Array.from(b.dataSync().slice(0, 3))).toEqual([1, 1, 1]);
    b.dispose();
  });

  it('loaded weights and loaded or fresh LoRA adapters hold one buffer each, also after they are updated', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'empo2-memory-'));
    dirs.push(dir);
    const source = Qwen2Model.random(config(2), 1, { lora: { r: 2, alpha: 4, dropout: 0, targetModules: ['all-linear'] } });
    await saveModelDir(dir, source, tokenizer);
    await saveLoraAdapter(join(dir, 'extra'), source);
    source.dispose();
    const start = tf.memory().numDataBuffers;
    const { model } = loadModelDir(dir);
    const vars = [...model.params.values(), ...model.lora!.variables().values()];
    const held = tf.memory().numDataBuffers - start;
    expect(held).toBe(vars.length + 1); // + the rotary frequencies
    const update = () => vars.forEach((v) => tf.tidy(() => v.assign(v.add(1))));
    update();
    expect(tf.memory().numDataBuffers - start).toBe(held);
    loadLoraAdapter(join(dir, 'extra'), model);
    model.setLora(null);
    model.attachLora({ r: 2, alpha: 4, dropout: 0, targetModules: ['all-linear'] }, 3);
    const fresh = [...model.lora!.variables().values()];
    fresh.forEach((v) => tf.tidy(() => v.assign(v.add(1))));
    expect(tf.memory().numDataBuffers - start).toBe(held);
    model.dispose();
    expect(tf.memory().numDataBuffers).toBe(start);
  });

  it('AdamW holds two moments per parameter after steps and after importing a checkpoint, nothing more', () => {
    const initial = [tf.ones([4, 4]), tf.zeros([4])];
    const params = new Map([
      ['w', tf.variable(initial[0])],
      ['b', tf.variable(initial[1])],
    ]);
    tf.dispose(initial);
    const grads = new Map([
      ['w', tf.fill([4, 4], 0.5)],
      ['b', tf.fill([4], -0.5)],
    ]);
    const start = tf.memory().numDataBuffers;
    const adam = new AdamW({ lr: 0.1, beta1: 0.9, beta2: 0.99, eps: 1e-8, weightDecay: 0.1 });
    adam.apply(params, grads);
    adam.apply(params, grads, 0.1, 0.5);
    expect(tf.memory().numDataBuffers - start).toBe(4);
    const state = adam.exportState();
    const other = new AdamW(adam.config);
    other.importState(state.step, state.tensors);
    other.apply(params, grads);
    expect(tf.memory().numDataBuffers - start).toBe(8);
    adam.dispose();
    other.dispose();
    expect(tf.memory().numDataBuffers).toBe(start);
    tf.dispose([...params.values(), ...grads.values()]);
  });
});

describe('peak memory', () => {
  it("a LoRA training step with checkpointed layers keeps one layer's activations: 8 layers peak little above 2, and within the plan", async () => {
    const peaks: number[] = [];
    const rows = 2;
    const length = 160;
    for (const layers of [2, 8]) {
      const model = Qwen2Model.random(config(layers), 2);
      const e = engine(model, { lora: { r: 4, alpha: 8, dropout: 0.1, targetModules: ['all-linear'] }, checkpointLayers: 'always' });
      const batch = trainBatch(rows, length);
      await e.trainStep(batch, objective); // creates the optimiser's state, which is not activation memory
      peaks.push(await peakOf(() => e.trainStep(batch, objective)));
      const c = model.config;
      // The plan: tokens × per-token bytes plus the chunks' working memory (attention and logits,
      // here smaller than their caps).
      const attention = Math.min(rows * c.num_attention_heads * length * length, ATTENTION_ELEMENTS);
      const logits = Math.min(rows * 8 * c.vocab_size, LOGIT_ELEMENTS);
      const plan = rows * length * trainingBytesPerToken(c, { r: 4, dropout: 0.1 }) + (6 * attention + 8 * logits) * 4;
      expect(peaks[peaks.length - 1]).toBeLessThan(plan);
      expect(peaks[peaks.length - 1]).toBeGreaterThan(plan / 2); // and not so loose that it says nothing
      e.dispose();
    }
    // Six more layers add each layer's kept input and its gradient (2 × hidden floats per token)
    // and their adapters' gradients; activations of all layers at once would add ~30× more.
    const extraPerLayerToken = (peaks[1] - peaks[0]) / (6 * rows * length);
    expect(extraPerLayerToken).toBeLessThan(4 * 2 * 64 * 4);
    expect(peaks[0]).toBeGreaterThan(0);
  });

  it('an un-checkpointed training step (what "auto" runs when it fits) stays within its own plan', async () => {
    const rows = 2;
    const length = 160;
    const adapters: LoraConfig = { r: 4, alpha: 8, dropout: 0.1, targetModules: ['all-linear'] };
    for (const [layers, lora] of [
      [2, null],
      [8, null],
      [8, adapters],
    ] as [number, LoraConfig | null][]) {
      const model = Qwen2Model.random(config(layers), 6);
      const e = engine(model, lora ? { lora } : {});
      const batch = trainBatch(rows, length);
      await e.trainStep(batch, objective);
      const peak = await peakOf(() => e.trainStep(batch, objective));
      const c = model.config;
      const attention = rows * c.num_attention_heads * length * length;
      const plan =
        rows * length * plainTrainingBytesPerToken(c, lora) +
        (6 * attention + 8 * rows * 8 * c.vocab_size) * 4 +
        (lora ? 0 : 3 * countParameters(c) * 4);
      expect(peak).toBeLessThan(plan);
      expect(peak).toBeGreaterThan(plan / 2);
      e.dispose();
    }
  });

  it("scoring frees each layer's input once the layer has run: 8 layers peak as high as 2", async () => {
    const peaks: number[] = [];
    const rows = 4;
    const length = 200;
    for (const layers of [2, 8]) {
      const e = engine(Qwen2Model.random(config(layers), 5));
      const batch = trainBatch(rows, length);
      await e.logprobs(batch);
      peaks.push(await peakOf(() => e.logprobs(batch)));
      e.dispose();
    }
    // Keeping every layer's input would add a hidden vector (256 bytes) per token per layer.
    expect((peaks[1] - peaks[0]) / (6 * rows * length)).toBeLessThan(64);
  });

  it('generation prefills one layer at a time: 8 layers peak little above 2 for a 600-token prompt', async () => {
    const peaks: number[] = [];
    const length = 600;
    for (const layers of [2, 8]) {
      const e = engine(Qwen2Model.random(config(layers), 3));
      const p = Array.from({ length }, (_, i) => 2 + ((i * 13) % 270));
      peaks.push(await peakOf(() => e.generate([p, p.slice(0, 400)], { temperature: 1, topP: 1, maxTokens: 4, seed: 1 })));
      e.dispose();
    }
    // Each extra layer holds its keys and values (2 × 2 heads × 16 floats per token): 256 bytes per token per layer,
    // ×2 while the new-token blocks are merged. All layers' activations would be ~100× that.
    const extraPerLayerToken = (peaks[1] - peaks[0]) / (6 * 2 * length);
    expect(extraPerLayerToken).toBeLessThan(3 * 256);
  });
});

describe('too large to fit', () => {
  it('trainStep and logprobs refuse a sequence the heap cannot hold, before any work, saying what fits and what to use', async () => {
    const model = Qwen2Model.random(config(2), 4);
    const e = engine(model);
    const perToken = trainingBytesPerToken(model.config, null);
    (e.options as EngineOptions).memoryLimitBytes = tf.memory().numBytes + (chunkReserveBytes() + 100 * perToken) / HEAP_SAFETY;
    const before = new Map([...model.params].map(([k, v]) => [k, Float32Array.from(v.dataSync())]));
    const tensors = tf.memory().numTensors;
    await expect(e.trainStep([...trainBatch(1, 50), ...trainBatch(1, 140)], objective)).rejects.toThrow(
      /^trainStep: sequence 1 has 140 tokens, but the wasm heap has room for (99|100) tokens per pass of this model \(\d+ KiB per token, \d+ [KM]iB free\); use model\.engine: torch/,
    );
    expect(tf.memory().numTensors).toBe(tensors);
    for (const [k, v] of model.params) expect(Array.from(v.dataSync())).toEqual(Array.from(before.get(k)!));
    // Scoring needs less per token, so the same heap scores longer sequences, and still refuses too long ones.
    await e.logprobs(trainBatch(1, 140));
    await expect(e.logprobs(trainBatch(1, 50_000))).rejects.toThrow(
      /^logprobs: sequence 0 has 50000 tokens, but the wasm heap has room for \d+ tokens per pass/,
    );
    e.dispose();
  });
});
