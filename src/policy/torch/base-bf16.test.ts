/**
 * model.torch.base_bf16 on the real model `npm run setup` installs (SmolLM2-135M-Instruct, LoRA on every
 * linear layer as configs/real-grpo.yaml): LoRA's frozen base layers multiply in bf16 while the adapters,
 * norms, attention, output layer and log-softmax stay fp32.
 *   - it is off by default: measured on recorded episodes it moves log-probs by up to 0.15
 *     (mean 0.003), beyond the 1e-2 bound asked for (results/smollm2-speed/bf16-parity-2026-12-02.md);
 *   - asked for, it refuses what it cannot do, saying why (autocast, non-fp32 weights, no LoRA, a CPU
 *     without AVX512-BF16 or AMX), and where it runs, a real prompt and answer score near fp32 and
 *     an update trains the fp32 adapters.
 * Skipped, with the reason in its title, when the model or the worker's Python packages are absent.
 */
import { describe, expect, it } from 'vitest';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { REPO_ROOT, pythonGate } from '../../../test/support/python.ts';
import { requireEndTokenIds } from '../chat-tokens.ts';
import { Tokenizer } from '../tokenizer.ts';
import type { TrainSequence } from '../types.ts';
import { TorchEngine, type TorchEngineOptions } from './engine.ts';

const MODEL_DIR = join(REPO_ROOT, 'models', 'smollm2-135m-instruct');
const installed = existsSync(join(MODEL_DIR, 'model.safetensors'));
const gate = installed ? pythonGate(['torch', 'transformers', 'peft']) : { available: false, label: '' };
const label = installed ? gate.label : "SKIPPED: models/smollm2-135m-instruct is absent (run 'npm run setup')";

const LORA = { r: 16, alpha: 32, dropout: 0, targetModules: ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'] };

function options(tokenizer: Tokenizer, o: Partial<TorchEngineOptions> = {}): TorchEngineOptions {
  const ends = requireEndTokenIds(tokenizer, MODEL_DIR);
  return {
    modelDir: MODEL_DIR,
    optimizer: { lr: 1e-4, beta1: 0.9, beta2: 0.999, eps: 1e-8, weightDecay: 0 },
    maxGradNorm: 1,
    microBatchTokens: 4096,
    endTokens: ends,
    padToken: ends[ends.length - 1],
    device: 'cpu',
    lora: LORA,
    seed: 0,
    threads: 1,
    ...o,
  };
}

/** A household-task turn as the built-in environment renders it, and an answer in the model's style. */
function realSequence(tokenizer: Tokenizer): TrainSequence {
  const prompt = tokenizer.encode(
    '<|im_start|>system\nYou are a helpful assistant that solves household tasks step by step.<|im_end|>\n' +
      '<|im_start|>user\nYou are in the middle of a room. Looking quickly around you, you see a cabinet 1, a countertop 1, ' +
      'a drawer 2, a fridge 1, a sinkbasin 1 and a toaster 1.\nYour task is to: put a clean mug in the cabinet.\n' +
      'What do you do next?<|im_end|>\n<|im_start|>assistant\n',
  );
  const response = tokenizer.encode(
    'I need a mug first. Mugs are usually on the countertop or in a drawer, so I will look at the countertop 1.\n' +
      'Action: go to countertop 1<|im_end|>',
  );
  const n = response.length;
  return { prompt, response, advantages: new Array(n).fill(1), oldLogprobs: new Array(n).fill(0), mask: new Array(n).fill(1) };
}

const maxAbsDiff = (a: number[], b: number[]) => a.reduce((m, x, i) => Math.max(m, Math.abs(x - b[i])), 0);
const meanAbsDiff = (a: number[], b: number[]) => a.reduce((s, x, i) => s + Math.abs(x - b[i]), 0) / a.length;

describe.skipIf(!installed || !gate.available)(`model.torch.base_bf16 on SmolLM2-135M-Instruct with LoRA r16 (${label})`, () => {
  it('is off by default; refused where it cannot run; asked for on a bf16 CPU, scores near fp32 and trains the fp32 adapters', async () => {
    const tokenizer = Tokenizer.fromFile(join(MODEL_DIR, 'tokenizer.json'));
    const seq = realSequence(tokenizer);
    await expect(TorchEngine.start(options(tokenizer, { baseBf16: true, lora: null }))).rejects.toThrow(
      /base_bf16 needs LoRA \(lora or adapter_dir\): without adapters no weight is frozen/,
    );
    await expect(TorchEngine.start(options(tokenizer, { baseBf16: true, dtype: 'bfloat16' }))).rejects.toThrow(
      /base_bf16 needs dtype 'float32'/,
    );
    const fp32 = await TorchEngine.start(options(tokenizer));
    let reference: number[];
    try {
      // The default: fp32 even on a CPU with native bf16 (the 1e-2 bound on log-probs is not met).
      expect(fp32.info.base_bf16).toBe(false);
      [reference] = await fp32.logprobs([seq]);
    } finally {
      await fp32.close();
    }
    let bf16: TorchEngine;
    try {
      bf16 = await TorchEngine.start(options(tokenizer, { baseBf16: true }));
    } catch (e) {
      // A CPU without AVX512-BF16 or AMX: refused before the model loads, saying why.
      expect((e as Error).message).toMatch(/base_bf16 needs a CPU with AVX512-BF16 or AMX/);
      return;
    }
    try {
      expect(bf16.info.base_bf16).toBe(true);
      const [before] = await bf16.logprobs([seq]);
      // bf16 rounding of the base's weights and inputs: it moves the log-probs (so the mode is on),
      // by a few thousandths on average and at most about a tenth, as measured on recorded episodes.
      expect(maxAbsDiff(before, reference)).toBeGreaterThan(0);
      expect(maxAbsDiff(before, reference)).toBeLessThan(0.2);
      expect(meanAbsDiff(before, reference)).toBeLessThan(0.02);
      const step = await bf16.trainStep([{ ...seq, oldLogprobs: before }], {
        clipLow: 0.2,
        clipHigh: 0.28,
        dualClip: 3,
        klCoef: 0,
        lowProbDelta: null,
      });
      expect(Math.abs(step.meanRatio - 1)).toBeLessThan(1e-4); // sampler and learner share the arithmetic
      expect(Number.isFinite(step.loss) && step.gradNorm > 0).toBe(true);
      const [after] = await bf16.logprobs([seq]);
      expect(maxAbsDiff(after, before)).toBeGreaterThan(1e-3); // the fp32 adapters trained
    } finally {
      await bf16.close();
    }
    await expect(TorchEngine.start(options(tokenizer, { baseBf16: true, autocast: 'bfloat16' }))).rejects.toThrow(
      /base_bf16 and autocast exclude each other/,
    );
  }, 300_000);
});
