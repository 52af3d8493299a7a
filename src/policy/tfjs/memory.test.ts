/**
 * The engine's memory on the wasm heap: no second copy of weights or optimiser state outlives an
 * update, and autograd's saved tensors share buffers.
 *
 * Heap bytes are measured by wrapping the wasm module's malloc/free, which every tensor buffer goes
 * through (tf.memory().numBytes counts a shared buffer once per tensor, so it is no measure).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { BackendWasm } from '@tensorflow/tfjs-backend-wasm';
import { initBackend, tf } from './backend.ts';
import { Qwen2Model, type ModelConfig } from './qwen2.ts';
import { AdamW } from './adamw.ts';
import { loadModelDir, saveModelDir } from './checkpoint.ts';
import { loadLoraAdapter, saveLoraAdapter } from './lora.ts';
import { trainByteLevelBPE, Tokenizer } from '../tokenizer.ts';

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


beforeAll(async () => {
  await initBackend();
  heap = trackHeap();
  tokenizer = Tokenizer.fromJSON(trainByteLevelBPE(['open red box', 'take yellow hat', 'go to kitchen'], { vocabSize: 280, specialTokens: ['<|endoftext|>', '<|im_end|>'] }));
});
afterAll(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));

function config(layers: number, o: Partial<ModelConfig> = {}): ModelConfig {
  return {
    model_type: 'llama', vocab_size: tokenizer.vocabSize, hidden_size: 64, intermediate_size: 128, num_hidden_layers: layers,
    num_attention_heads: 4, num_key_value_heads: 2, max_position_embeddings: 4096, rms_norm_eps: 1e-6, rope_theta: 10000,
    tie_word_embeddings: true, initializer_range: 0.1, ...o,
  };
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
    const params = new Map([['w', tf.variable(initial[0])], ['b', tf.variable(initial[1])]]);
    tf.dispose(initial);
    const grads = new Map([['w', tf.fill([4, 4], 0.5)], ['b', tf.fill([4], -0.5)]]);
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
