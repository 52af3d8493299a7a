/**
 * The PyTorch worker against the TypeScript engine on the same tiny Qwen2 model (built and saved
 * by our own code, loaded by `transformers` on the other side) and the same batches: log-probs,
 * the loss and its statistics, the weights after one and after three AdamW steps, and a short
 * greedy "run" (generate → score → train) agreeing step for step. Also the worker's error
 * handling, sampling, stop strings, constrained decoding and LoRA through PEFT.
 *
 * Weights are drawn wider than a real init (std 0.3, biases and norms perturbed) so attention and
 * the output distribution are far from uniform and every code path carries signal.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { toolCallConstraint } from '../json-constraint.ts';
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pythonGate } from '../../../test/support/python.ts';
import { initBackend, tf } from '../tfjs/backend.ts';
import { Qwen2Model, type ModelConfig } from '../tfjs/qwen2.ts';
import { TfjsEngine, type EngineOptions } from '../tfjs/engine.ts';
import { loadModelDir, saveModelDir } from '../tfjs/checkpoint.ts';
import { readSafetensorsDir, toFloat32 } from '../safetensors.ts';
import { trainByteLevelBPE, Tokenizer } from '../tokenizer.ts';
import type { ObjectiveConfig } from '../../algo/objective.ts';
import { CHAT_SPECIAL_TOKENS, IM_END, END_OF_TEXT } from '../chat-tokens.ts';
import type { TrainSequence } from '../types.ts';
import { TorchEngine, type TorchEngineOptions } from './engine.ts';
import { projectPython, TORCH_WORKER_SCRIPT } from './python.ts';

const gate = pythonGate(['torch', 'transformers', 'peft']);

const CORPUS = [
  'You are in the hall. You see a red box, a blue drawer and a door to the kitchen.',
  'go to kitchen',
  'go to hall',
  'go to pantry',
  'open red box',
  'open blue drawer',
  'take yellow hat',
  'take red key',
  'put yellow hat in red box',
  'look around',
  'inventory',
  'turn on lamp',
  'read note',
  'The red box is open. Inside it: a yellow hat.',
  'You take the yellow hat.',
  'Task: Find the yellow hat and bring it to the pantry.',
];

/** Tolerances (fp32 on both sides). Measured: log-probs 9e-6, loss 2e-6 relative, weights 4e-6. */
const LOGPROB_TOL = 1e-4;
const LOSS_REL_TOL = 1e-4;
/** Max |Δw| after AdamW steps at lr 1e-3: a few ulps of the update, far below one step (1e-3). */
const WEIGHT_TOL = 2e-5;

/**
 * ε = 1e-6 rather than the config's 1e-8: AdamW divides by |g| + ε, so an element whose gradient is
 * ~1e-8 (pure rounding noise, e.g. a direction the loss is flat in) turns fp32 noise into up to a
 * full lr step, in either engine. With 1e-8 the measured max |Δw| is 3e-5 (3% of a step); with
 * 1e-6 it is 4e-6, which lets the tolerance catch real mistakes.
 */
const OPTIMIZER = { lr: 1e-3, beta1: 0.9, beta2: 0.99, eps: 1e-6, weightDecay: 0.01 };
const MAX_GRAD_NORM = 0.5;
const OBJECTIVE: ObjectiveConfig = { clipLow: 0.2, clipHigh: 0.28, dualClip: 3, klCoef: 0.05, lowProbDelta: null };

let tokenizer: Tokenizer;
let IM_END_ID: number;
let EOT_ID: number;
let modelDir: string;
const tmpDirs: string[] = [];

function tempDir(): string {
  const d = mkdtempSync(join(tmpdir(), 'empo2-torch-'));
  tmpDirs.push(d);
  return d;
}

function makeModel(seed: number): Qwen2Model {
  const config: ModelConfig = {
    model_type: 'qwen2',
    vocab_size: tokenizer.vocabSize,
    hidden_size: 32,
    intermediate_size: 64,
    num_hidden_layers: 2,
    num_attention_heads: 4,
    num_key_value_heads: 2,
    max_position_embeddings: 512,
    rms_norm_eps: 1e-6,
    rope_theta: 10000,
    tie_word_embeddings: true,
    initializer_range: 0.3,
    eos_token_id: IM_END_ID,
  };
  const model = Qwen2Model.random(config, seed);
  let k = 0;
  for (const [name, v] of model.params) {
    k++;
    if (name.endsWith('.bias')) tf.tidy(() => v.assign(tf.randomNormal(v.shape, 0, 0.3, 'float32', seed * 7919 + k)));
    else if (v.rank === 1) tf.tidy(() => v.assign(tf.randomUniform(v.shape, 0.5, 1.5, 'float32', seed * 7919 + k)));
  }
  return model;
}

function tfjsOptions(o: Partial<EngineOptions> = {}): EngineOptions {
  return {
    optimizer: OPTIMIZER,
    maxGradNorm: MAX_GRAD_NORM,
    microBatchTokens: 100_000,
    endTokens: [IM_END_ID, EOT_ID],
    padToken: EOT_ID,
    ...o,
  };
}

/** A TS engine on exactly the weights in modelDir (the file the worker loads too). */
function tfjsEngine(o: Partial<EngineOptions> = {}): TfjsEngine {
  const { model } = loadModelDir(modelDir);
  return new TfjsEngine(model, tokenizer, tfjsOptions(o));
}

function torchOptions(o: Partial<TorchEngineOptions> = {}): TorchEngineOptions {
  const { lora: _tsLora, loraSeed: _tsSeed, ...shared } = tfjsOptions();
  return { modelDir, ...shared, threads: 1, ...o };
}

const prompt = (text: string) => tokenizer.encode(`<|im_start|>user\n${text}<|im_end|>\n<|im_start|>assistant\n`);

const maxAbsDiff = (a: number[], b: number[]) => {
  expect(a).toHaveLength(b.length);
  return a.reduce((m, x, i) => Math.max(m, Math.abs(x - b[i])), 0);
};

/**
 * Sequences of different lengths with advantages of both signs, old log-probs shifted so that
 * ratios fall outside [1-ε_low, 1+ε_high] on both sides, masked tokens and reference log-probs.
 */
async function trainBatch(reference: TfjsEngine): Promise<TrainSequence[]> {
  const seqs = [
    { prompt: prompt('go'), response: tokenizer.encode('open red box').concat(IM_END_ID) },
    {
      prompt: prompt('You are in the hall. You see a red box, a blue drawer and a door to the kitchen.'),
      response: tokenizer.encode('take yellow hat').concat(IM_END_ID),
    },
    { prompt: prompt('look'), response: tokenizer.encode('go to pantry') },
    { prompt: prompt('Task: Find the yellow hat.'), response: tokenizer.encode('inventory').concat(IM_END_ID) },
  ];
  const current = await reference.logprobs(seqs);
  const advantages = [1.3, -0.9, 0.6, -1.7];
  const shifts = [0.6, -0.5, -0.1, 0.4];
  return seqs.map((s, i) => ({
    ...s,
    advantages: s.response.map(() => advantages[i]),
    oldLogprobs: current[i].map((lp, j) => lp + shifts[i] * (j % 2 === 0 ? 1 : -0.5)),
    mask: s.response.map((_, j) => (i === 2 && j === 0 ? 0 : 1)),
    refLogprobs: current[i].map((lp, j) => lp - 0.1 * Math.sin(j + i)),
  }));
}

function tfjsWeights(engine: TfjsEngine): Map<string, Float32Array> {
  return new Map([...engine.model.params].map(([k, v]) => [k, v.dataSync() as Float32Array]));
}

function savedWeights(dir: string): Map<string, Float32Array> {
  const contents = readSafetensorsDir(dir);
  return new Map([...contents.tensors].map(([k, t]) => [k, toFloat32(t)]));
}

function maxWeightDiff(a: Map<string, Float32Array>, b: Map<string, Float32Array>): number {
  let m = 0;
  for (const [name, x] of a) {
    const y = b.get(name);
    if (!y) throw new Error(`weights: ${name} missing on the other side`);
    for (let i = 0; i < x.length; i++) m = Math.max(m, Math.abs(x[i] - y[i]));
  }
  return m;
}

function expectStatsClose(
  a: { loss: number; tokens: number; clipFraction: number; meanRatio: number; kl: number; gradNorm: number },
  b: typeof a,
): void {
  const rel = (x: number, y: number) => Math.abs(x - y) / Math.max(1e-6, Math.abs(x), Math.abs(y));
  expect(b.tokens).toBe(a.tokens);
  expect(rel(a.loss, b.loss)).toBeLessThan(LOSS_REL_TOL);
  expect(b.clipFraction).toBeCloseTo(a.clipFraction, 6);
  expect(rel(a.meanRatio, b.meanRatio)).toBeLessThan(LOSS_REL_TOL);
  expect(rel(a.kl, b.kl)).toBeLessThan(1e-3); // a small number: relative error is larger
  expect(rel(a.gradNorm, b.gradNorm)).toBeLessThan(LOSS_REL_TOL);
}

beforeAll(async () => {
  if (!gate.available) return;
  await initBackend();
  tokenizer = Tokenizer.fromJSON(trainByteLevelBPE(CORPUS, { vocabSize: 300, specialTokens: CHAT_SPECIAL_TOKENS }), 'torch test tokenizer');
  IM_END_ID = tokenizer.requireTokenId(IM_END);
  EOT_ID = tokenizer.requireTokenId(END_OF_TEXT);
  modelDir = tempDir();
  const model = makeModel(11);
  await saveModelDir(modelDir, model, tokenizer);
  model.dispose();
});

afterAll(() => {
  for (const d of tmpDirs) rmSync(d, { recursive: true, force: true });
});

describe.skipIf(!gate.available)(`TorchEngine agrees with TfjsEngine (${gate.label})`, () => {
  let ts: TfjsEngine;
  let torch: TorchEngine;
  let batch: TrainSequence[];

  beforeAll(async () => {
    ts = tfjsEngine();
    torch = await TorchEngine.start(torchOptions());
    batch = await trainBatch(ts);
  }, 120_000);

  afterAll(async () => {
    ts?.dispose();
    await torch?.close();
  });

  it('reports the model it loaded', () => {
    expect(torch.info).toMatchObject({
      model_type: 'qwen2',
      vocab_size: tokenizer.vocabSize,
      device: 'cpu',
      dtype: 'float32',
      lora: false,
      world_size: 1,
    });
    expect(torch.info.trainable_parameters).toBe(torch.info.parameters);
  });

  it(`log-probs of a padded batch agree at temperature 1 and 0.7 (max |Δ| < ${LOGPROB_TOL})`, async () => {
    for (const t of [1, 0.7]) {
      const a = await ts.logprobs(batch, t);
      const b = await torch.logprobs(batch, t);
      a.forEach((row, i) => expect(maxAbsDiff(row, b[i])).toBeLessThan(LOGPROB_TOL));
    }
  });

  it(`one train step: loss and statistics agree, gradients are clipped, weights agree (max |Δw| < ${WEIGHT_TOL})`, async () => {
    const before = new Map([...tfjsWeights(ts)].map(([k, v]) => [k, Float32Array.from(v)]));
    const a = await ts.trainStep(batch, OBJECTIVE, 1);
    const b = await torch.trainStep(batch, OBJECTIVE, 1);
    expectStatsClose(a, b);
    // The batch is built so that every branch of the objective is live.
    expect(a.clipFraction).toBeGreaterThan(0.2);
    expect(a.clipFraction).toBeLessThan(0.9);
    expect(a.kl).toBeGreaterThan(0);
    expect(a.gradNorm).toBeGreaterThan(MAX_GRAD_NORM);
    const dir = tempDir();
    await torch.save(dir);
    const after = tfjsWeights(ts);
    expect(maxWeightDiff(before, after)).toBeGreaterThan(5e-4); // the step moved the weights
    expect(maxWeightDiff(after, savedWeights(dir))).toBeLessThan(WEIGHT_TOL);
  });

  it(`two more steps (one at another lr, one with the δ mask and temperature 0.8): weights still agree (max |Δw| < ${WEIGHT_TOL})`, async () => {
    const withDelta: ObjectiveConfig = { ...OBJECTIVE, lowProbDelta: 2e-3 };
    expectStatsClose(await ts.trainStep(batch, OBJECTIVE, 1, 3e-4), await torch.trainStep(batch, OBJECTIVE, 1, 3e-4));
    const a = await ts.trainStep(batch, withDelta, 0.8);
    const b = await torch.trainStep(batch, withDelta, 0.8);
    expectStatsClose(a, b);
    const total = batch.reduce((n, s) => n + s.mask.reduce((x, y) => x + y, 0), 0);
    expect(a.tokens).toBeLessThan(total); // δ dropped some tokens, the same ones on both sides
    const dir = tempDir();
    await torch.save(dir);
    expect(maxWeightDiff(tfjsWeights(ts), savedWeights(dir))).toBeLessThan(WEIGHT_TOL);
    // The directory the worker wrote is a policy the TypeScript engine loads as is.
    const reloaded = loadModelDir(dir);
    expect(
      maxWeightDiff(tfjsWeights(ts), new Map([...reloaded.model.params].map(([k, v]) => [k, v.dataSync() as Float32Array]))),
    ).toBeLessThan(WEIGHT_TOL);
    reloaded.model.dispose();
  });

  it(`the δ mask applies only where a sample asks for it (EMPO²: off-policy samples): mixed batches agree (max |Δw| < ${WEIGHT_TOL})`, async () => {
    // δ above a third of the tokens' probabilities, halfway between two that are well apart, so that
    // the two engines' log-probs (within 1e-4 of each other) fall on the same side of it.
    const current = await ts.logprobs(batch);
    const sorted = current.flat().sort((a, b) => a - b);
    let k = Math.floor(sorted.length / 3);
    while (sorted[k + 1] - sorted[k] < 1e-3) k++;
    const delta = Math.exp((sorted[k] + sorted[k + 1]) / 2);
    const withDelta: ObjectiveConfig = { ...OBJECTIVE, lowProbDelta: delta };
    const below = (i: number) => current[i].filter((lp, j) => batch[i].mask[j] === 1 && lp < Math.log(delta)).length;
    // Off-policy (masked) and on-policy (unmasked) samples alike hold tokens below δ.
    const mixed: TrainSequence[] = batch.map((s, i) => ({ ...s, lowProbMask: i % 2 === 1 }));
    expect(mixed.filter((s, i) => s.lowProbMask && below(i) > 0).length).toBeGreaterThan(0);
    expect(mixed.filter((s, i) => !s.lowProbMask && below(i) > 0).length).toBeGreaterThan(0);
    // One more batch: the same sequences with the flag left out (the default: masked).
    const unflagged: TrainSequence[] = batch.map(({ lowProbMask: _, ...s }) => s);
    for (const b of [mixed, unflagged]) {
      const a = await ts.trainStep(b, withDelta);
      const t = await torch.trainStep(b, withDelta);
      expectStatsClose(a, t);
      const counted = b.reduce((n, s, i) => n + s.mask.reduce((x, y) => x + y, 0) - (s.lowProbMask === false ? 0 : below(i)), 0);
      // Not exact for both: the first step moved the weights before the second scored its tokens.
      if (b === mixed) expect(a.tokens).toBe(counted);
    }
    const dir = tempDir();
    await torch.save(dir);
    expect(maxWeightDiff(tfjsWeights(ts), savedWeights(dir))).toBeLessThan(WEIGHT_TOL);
  });

  it('random batches under the default objective (δ 1e-3, off-policy scope): same counted tokens and loss in both engines', async () => {
    // The measurement: random mixes of masked and unmasked samples, old log-probs near the
    // current ones, advantages of both signs; lr 0 so every batch scores the same weights.
    const defaults: ObjectiveConfig = { clipLow: 0.2, clipHigh: 0.3, dualClip: 10, klCoef: 0, lowProbDelta: 1e-3 };
    let seed = 12345;
    const rand = () => (seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31;
    const pool = batch.map((s) => ({ prompt: s.prompt, response: s.response }));
    const current = await ts.logprobs(pool);
    let differingBefore = 0;
    for (let k = 0; k < 20; k++) {
      const b: TrainSequence[] = pool.map((s, i) => ({
        ...s,
        advantages: s.response.map(() => rand() * 2 - 1),
        oldLogprobs: current[i].map((lp) => lp + (rand() - 0.5)),
        mask: s.response.map(() => 1),
        lowProbMask: rand() < 0.5,
      }));
      const a = await ts.trainStep(b, defaults, 1, 0);
      const t = await torch.trainStep(b, defaults, 1, 0);
      expect(t.tokens, `batch ${k}`).toBe(a.tokens);
      expect(Math.abs(a.loss - t.loss) / Math.max(1e-6, Math.abs(a.loss)), `batch ${k}`).toBeLessThan(LOSS_REL_TOL);
      const everyTokenMasked = await ts.trainStep(
        b.map((s) => ({ ...s, lowProbMask: true })),
        defaults,
        1,
        0,
      );
      if (everyTokenMasked.tokens !== a.tokens) differingBefore++;
    }
    // The batches exercise the scope: masking every sample (the worker's old behaviour) changes the count.
    expect(differingBefore).toBeGreaterThan(0);
  });

  it("sampling: seeded, reproducible, and the reported log-probs are the policy's own (temperature 0.9, top-p 0.9)", async () => {
    const prompts = [prompt('go'), prompt('You are in the hall. You see a red box.'), prompt('look')];
    const opts = { temperature: 0.9, topP: 0.9, maxTokens: 8, seed: 5 };
    const first = await torch.generate(prompts, opts);
    const again = await torch.generate(prompts, opts);
    expect(again.map((g) => g.tokens)).toEqual(first.map((g) => g.tokens));
    const other = await torch.generate(prompts, { ...opts, seed: 6 });
    expect(other.map((g) => g.tokens)).not.toEqual(first.map((g) => g.tokens));
    const rescored = await torch.logprobs(
      prompts.map((p, i) => ({ prompt: p, response: first[i].tokens })),
      0.9,
    );
    first.forEach((g, i) => {
      expect(g.tokens.length).toBeGreaterThan(0);
      expect(g.tokens.every((t) => t >= 0 && t < tokenizer.vocabSize)).toBe(true);
      expect(g.finish).toBe(g.tokens.at(-1) === IM_END_ID || g.tokens.at(-1) === EOT_ID ? 'stop' : 'length');
      expect(maxAbsDiff(g.logprobs, rescored[i])).toBeLessThan(LOGPROB_TOL);
    });
  });

  it('constrained decoding returns one of the allowed texts; stop strings end a response', async () => {
    const allowed = ['go to kitchen', 'take yellow hat', 'open red box'];
    const gens = await torch.generate([prompt('go'), prompt('look'), prompt('read note')], {
      temperature: 1,
      topP: 1,
      maxTokens: 20,
      seed: 3,
      allowedTexts: [allowed, allowed, null],
    });
    for (const g of gens.slice(0, 2)) {
      expect(allowed).toContain(g.text);
      expect(g.finish).toBe('stop');
      expect(g.tokens.at(-1)).toBe(IM_END_ID);
    }
    const [stopped] = await torch.generate([prompt('go')], {
      temperature: 1,
      topP: 1,
      maxTokens: 20,
      seed: 3,
      allowedTexts: [['open red box']],
      stop: ['red'],
    });
    expect(stopped.finish).toBe('stop');
    expect(stopped.text).toMatch(/^open red/);
    expect(stopped.text).not.toMatch(/box/);
  });

  it('a tool-call constraint with finite texts goes to the worker as those texts; one with free values is refused, naming the row', async () => {
    const action = { type: 'object', properties: { action: { enum: ['go to kitchen', 'open red box'] } }, required: ['action'] };
    const finite = toolCallConstraint({
      tools: [{ name: 'act', parameters: action }],
      choice: 'required',
      parser: 'hermes',
      tokenizer,
      endTokens: [IM_END_ID],
    });
    const gens = await torch.generate([prompt('go'), prompt('look')], {
      temperature: 1,
      topP: 1,
      maxTokens: 150,
      seed: 4,
      constraints: [finite, null],
    });
    expect(finite.finiteTexts()).toContain(gens[0].text);
    expect(gens[0].tokens.at(-1)).toBe(IM_END_ID);
    const free = toolCallConstraint({
      tools: [{ name: 'say', parameters: { type: 'object', properties: { text: { type: 'string' } }, required: ['text'] } }],
      choice: 'required',
      parser: 'hermes',
      tokenizer,
      endTokens: [IM_END_ID],
    });
    await expect(
      torch.generate([prompt('go'), prompt('look')], { temperature: 1, topP: 1, maxTokens: 8, seed: 4, constraints: [null, free] }),
    ).rejects.toThrow(/constraints\[1\] allows free values .* the PyTorch worker constrains decoding only to a list of texts/);
  });

  it('a bad request gets an error naming the field, and the worker keeps serving', async () => {
    await expect(
      torch.logprobs([
        { prompt: [3], response: [1] },
        { prompt: [], response: [1] },
      ]),
    ).rejects.toThrow(/logprobs\.batch\[1\]\.prompt is empty/);
    await expect(torch.logprobs([{ prompt: [3, 99_999], response: [1] }])).rejects.toThrow(
      /batch\[0\]\.prompt\[1\] = 99999 is outside the vocabulary \(0\.\.\d+\)/,
    );
    const bad = { ...batch[0], advantages: [1] };
    await expect(torch.trainStep([bad], OBJECTIVE)).rejects.toThrow(
      /train_step\.batch\[0\]\.advantages has 1 values but the response has \d+ tokens/,
    );
    await expect(torch.trainStep(batch, { ...OBJECTIVE, clipLow: 1.5 })).rejects.toThrow(
      /objective\.clip_low must be a number in \[0, 1\)/,
    );
    const flagged = { ...batch[0], lowProbMask: 'yes' as unknown as boolean };
    await expect(torch.trainStep([flagged], OBJECTIVE)).rejects.toThrow(
      /train_step\.batch\[0\]\.low_prob_mask must be true or false \(got "yes"\)/,
    );
    const a = await ts.logprobs(batch.slice(0, 1));
    const b = await torch.logprobs(batch.slice(0, 1));
    expect(maxAbsDiff(a[0], b[0])).toBeLessThan(LOGPROB_TOL);
  });
});

describe.skipIf(!gate.available)(`a short run through each engine agrees step for step (${gate.label})`, () => {
  it('greedy generate → score → train, 4 iterations; the worker micro-batches (8-token budget) and checkpoints activations, the TS engine does neither', async () => {
    const ts = tfjsEngine();
    const torch = await TorchEngine.start(torchOptions({ microBatchTokens: 8, gradientCheckpointing: true }));
    expect(torch.info.gradient_checkpointing).toBe(true);
    try {
      const prompts = [prompt('go'), prompt('You are in the hall.'), prompt('look'), prompt('Task: Find the yellow hat.')];
      const losses: [number, number][] = [];
      const initial = tfjsWeights(ts);
      for (let step = 0; step < 4; step++) {
        const opts = { temperature: 0, topP: 1, maxTokens: 6, seed: step };
        const [ga, gb] = [await ts.generate(prompts, opts), await torch.generate(prompts, opts)];
        expect(gb.map((g) => g.tokens)).toEqual(ga.map((g) => g.tokens));
        ga.forEach((g, i) => expect(maxAbsDiff(g.logprobs, gb[i].logprobs)).toBeLessThan(LOGPROB_TOL));
        // A deterministic reward of the response, centred over the group (GRPO-style).
        const rewards = ga.map((g) => (g.tokens.reduce((s, t) => s + t, 0) % 7) / 7);
        const mean = rewards.reduce((s, r) => s + r, 0) / rewards.length;
        const seqs: TrainSequence[] = ga.map((g, i) => ({
          prompt: prompts[i],
          response: g.tokens,
          advantages: g.tokens.map(() => rewards[i] - mean + 0.1 * (i - 1.5)),
          oldLogprobs: g.logprobs.map((lp, j) => lp + (j % 3 === 0 ? 0.4 : -0.3)),
          mask: g.tokens.map(() => 1),
          refLogprobs: g.logprobs,
        }));
        const [a, b] = [await ts.trainStep(seqs, OBJECTIVE), await torch.trainStep(seqs, OBJECTIVE)];
        expectStatsClose(a, b);
        losses.push([a.loss, b.loss]);
      }
      // The run moved: the losses change and the weights left their initial values.
      expect(new Set(losses.map(([a]) => a.toFixed(6))).size).toBeGreaterThan(1);
      expect(maxWeightDiff(initial, tfjsWeights(ts))).toBeGreaterThan(1e-4);
      const dir = tempDir();
      await torch.save(dir);
      expect(maxWeightDiff(tfjsWeights(ts), savedWeights(dir))).toBeLessThan(WEIGHT_TOL);
    } finally {
      ts.dispose();
      await torch.close();
    }
  }, 120_000);
});

describe.skipIf(!gate.available)(`LoRA through PEFT (${gate.label})`, () => {
  it("only adapters train; the first step equals the full model's loss; adapter and merged saves", async () => {
    const lora = { r: 4, alpha: 8, dropout: 0, targetModules: ['q_proj', 'v_proj', 'down_proj'] };
    const torch = await TorchEngine.start(torchOptions({ lora, seed: 1 }));
    const ts = tfjsEngine();
    try {
      expect(torch.info.lora).toBe(true);
      // A (r x in) + B (out x r) per wrapped matrix, 2 layers.
      const perLayer = 4 * (32 + 32) + 4 * (32 + 16) + 4 * (64 + 32);
      expect(torch.info.trainable_parameters).toBe(2 * perLayer);
      const batch = await trainBatch(ts);
      // PEFT starts B at zero, so before the first step the policy is the base model.
      const a = await ts.logprobs(batch);
      const b = await torch.logprobs(batch);
      a.forEach((row, i) => expect(maxAbsDiff(row, b[i])).toBeLessThan(LOGPROB_TOL));
      // The loss is a function of the forward pass only, so it equals the full model's; the
      // gradient norm does not (only B has a gradient while B is zero).
      const first = await torch.trainStep(batch, OBJECTIVE);
      const full = await ts.trainStep(batch, OBJECTIVE);
      expect(first.tokens).toBe(full.tokens);
      expect(Math.abs(first.loss - full.loss) / Math.abs(full.loss)).toBeLessThan(LOSS_REL_TOL);
      expect(first.clipFraction).toBeCloseTo(full.clipFraction, 6);
      expect(first.gradNorm).toBeGreaterThan(0);
      await torch.trainStep(batch, OBJECTIVE);
      const adapterDir = tempDir();
      const saved = await torch.saveWithResult(adapterDir);
      expect(saved.format).toBe('peft-adapter');
      expect(saved.files).toEqual(expect.arrayContaining(['adapter_config.json', 'adapter_model.safetensors', 'tokenizer.json']));
      const adapterConfig = JSON.parse(readFileSync(join(adapterDir, 'adapter_config.json'), 'utf8'));
      expect(adapterConfig).toMatchObject({ r: 4, lora_alpha: 8, peft_type: 'LORA' });
      expect([...adapterConfig.target_modules].sort()).toEqual(['down_proj', 'q_proj', 'v_proj']);
      // The merged model is an ordinary checkpoint: the TS engine scores like the worker.
      const mergedDir = tempDir();
      expect((await torch.saveWithResult(mergedDir, { merged: true })).format).toBe('model');
      expect(existsSync(join(mergedDir, 'tokenizer.json'))).toBe(true);
      const merged = new TfjsEngine(loadModelDir(mergedDir).model, tokenizer, tfjsOptions());
      const afterWorker = await torch.logprobs(batch);
      const afterMerged = await merged.logprobs(batch);
      afterWorker.forEach((row, i) => expect(maxAbsDiff(row, afterMerged[i])).toBeLessThan(LOGPROB_TOL));
      expect(Math.max(...afterWorker.map((row, i) => maxAbsDiff(row, b[i])))).toBeGreaterThan(1e-3); // the adapters did move the policy
      merged.dispose();
    } finally {
      ts.dispose();
      await torch.close();
    }
  }, 120_000);
});

describe.skipIf(!gate.available)(`a long train step saved between micro-batches (${gate.label})`, () => {
  it('a worker killed inside a step: the next one goes on from the saved micro-batches and ends as the straight step, bit for bit (LoRA dropout 0.05); a file saved for another step is refused', async () => {
    // 8-token budget: every sequence is a micro-batch of its own, 16 in the step.
    const options = torchOptions({
      lora: { r: 4, alpha: 8, dropout: 0.05, targetModules: ['q_proj', 'v_proj'] },
      seed: 3,
      microBatchTokens: 8,
    });
    const ts = tfjsEngine();
    const batch = [...(await trainBatch(ts)), ...(await trainBatch(ts)), ...(await trainBatch(ts)), ...(await trainBatch(ts))];
    ts.dispose();
    const adapterOf = async (engine: TorchEngine) => {
      const dir = tempDir();
      await engine.save(dir);
      return readFileSync(join(dir, 'adapter_model.safetensors'));
    };

    const straight = await TorchEngine.start(options);
    const expected = [await straight.trainStep(batch, OBJECTIVE), await straight.trainStep(batch, OBJECTIVE)];
    const expectedAdapter = await adapterOf(straight);
    await straight.close();

    const file = join(tempDir(), 'train-step.pt');
    const resume = { file, everySeconds: 0 };
    const killed = await TorchEngine.start(options);
    let total = 0;
    killed.setProgressListener((op, done, n) => {
      total = n;
      if (op === 'train_step' && done === 3) process.kill(killed.pid, 'SIGKILL');
    });
    await expect(killed.trainStep(batch, OBJECTIVE, 1, undefined, resume)).rejects.toThrow();
    expect(total).toBe(16);
    expect(existsSync(file)).toBe(true);

    const resumed = await TorchEngine.start(options);
    try {
      const first = await resumed.trainStep(batch, OBJECTIVE, 1, undefined, resume);
      // The kill lands while the worker runs on: at least the 3 reported micro-batches were saved, not all 16.
      expect(first.resumedMicroBatches).toBeGreaterThanOrEqual(3);
      expect(first.resumedMicroBatches).toBeLessThan(16);
      const { resumedMicroBatches: _, ...stats } = first;
      expect(stats).toEqual(expected[0]);
      // Dropout's generator was restored with the sums: the next step draws the straight run's masks.
      expect(await resumed.trainStep(batch, OBJECTIVE)).toEqual(expected[1]);
      expect((await adapterOf(resumed)).equals(expectedAdapter)).toBe(true);
      // The file now belongs to weights these have left, and to that batch only.
      await expect(resumed.trainStep(batch, OBJECTIVE, 1, undefined, resume)).rejects.toThrow(
        `train_step.resume.file ${file} was saved for other starting weights; remove it to run the step from its start`,
      );
      await expect(resumed.trainStep(batch.slice(1), OBJECTIVE, 1, undefined, resume)).rejects.toThrow(
        'was saved for another batch, objective or learning rate',
      );
      await expect(
        resumed.trainStep(batch, OBJECTIVE, 1, undefined, { file: join(tempDir(), 'missing', 'step.pt'), everySeconds: 0 }),
      ).rejects.toThrow(/train_step.resume.file .*missing\/step.pt: its folder does not exist/);
    } finally {
      await resumed.close();
    }
  }, 180_000);
});

describe.skipIf(!gate.available)(`bf16 autocast on CPU (${gate.label})`, () => {
  it('float16 is refused with a clear message; bfloat16 runs where the CPU multiplies bf16 natively: log-probs near fp32, LoRA merged in fp32', async () => {
    await expect(TorchEngine.start(torchOptions({ device: 'cpu', autocast: 'float16' }))).rejects.toThrow(
      /autocast 'float16' is for GPUs; on CPU use autocast 'bfloat16'/,
    );
    await expect(TorchEngine.start(torchOptions({ device: 'cpu', autocast: 'bfloat16', dtype: 'bfloat16' }))).rejects.toThrow(
      /autocast on CPU needs dtype 'float32'/,
    );
    const lora = { r: 4, alpha: 8, dropout: 0, targetModules: ['q_proj', 'v_proj', 'down_proj'] };
    let bf16: TorchEngine;
    try {
      bf16 = await TorchEngine.start(torchOptions({ device: 'cpu', autocast: 'bfloat16', lora, seed: 1 }));
    } catch (e) {
      // A CPU without AVX512-BF16 or AMX: refused before any work, saying why.
      expect((e as Error).message).toMatch(/autocast 'bfloat16' on CPU needs a CPU with AVX512-BF16 or AMX/);
      return;
    }
    const ts = tfjsEngine();
    try {
      expect(bf16.info.autocast).toBe('bfloat16');
      const batch = await trainBatch(ts);
      // bf16 products: log-probs move by about a hundredth here (fp32 agrees to 1e-5).
      const reference = await ts.logprobs(batch);
      const before = await bf16.logprobs(batch);
      const drift = Math.max(...before.map((row, i) => maxAbsDiff(row, reference[i])));
      expect(drift).toBeGreaterThan(0);
      expect(drift).toBeLessThan(0.1);
      const step = await bf16.trainStep(batch, OBJECTIVE);
      expect(Number.isFinite(step.loss) && step.gradNorm > 0).toBe(true);
      const sampled = await bf16.generate([batch[0].prompt], { maxTokens: 4, temperature: 1, topP: 1, seed: 3 });
      expect(sampled[0].tokens.length).toBeGreaterThan(0);
      // The merged model is fp32 (base weights as the worker used them, rounded to bf16, plus the
      // adapters' update merged in fp32): the TS engine scores it like the bf16 worker does.
      const mergedDir = tempDir();
      await bf16.saveWithResult(mergedDir, { merged: true });
      expect(readSafetensorsDir(mergedDir).tensors.get('model.layers.0.self_attn.q_proj.weight')?.dtype).toBe('F32');
      const merged = new TfjsEngine(loadModelDir(mergedDir).model, tokenizer, tfjsOptions());
      const after = await bf16.logprobs(batch);
      const mergedScores = await merged.logprobs(batch);
      expect(Math.max(...after.map((row, i) => maxAbsDiff(row, mergedScores[i])))).toBeLessThan(0.1);
      expect(Math.max(...mergedScores.map((row, i) => maxAbsDiff(row, reference[i])))).toBeGreaterThan(1e-3); // the update survived the merge
      merged.dispose();
    } finally {
      ts.dispose();
      await bf16.close();
    }
  }, 120_000);
});

describe('start-up failures are explained', () => {
  it('a missing interpreter names the path and the set-up command', async () => {
    await expect(TorchEngine.start({ ...fallbackOptions(), python: '/nonexistent/bin/python' })).rejects.toThrow(
      /no Python at \/nonexistent\/bin\/python: run 'npm run setup:test'/,
    );
  });

  it('a missing launcher (e.g. torchrun) is reported as not found', async () => {
    await expect(TorchEngine.start({ ...fallbackOptions(), launcher: ['/nonexistent/torchrun', '--nproc_per_node=2'] })).rejects.toThrow(
      /cannot start \/nonexistent\/torchrun .*not found.*npm run setup:test/,
    );
  });

  it('a Python without torch gets the set-up advice', async () => {
    const bare = spawnSync('python3', ['-c', 'import torch'], { encoding: 'utf8' });
    if (bare.error || bare.status === 0) return; // no torch-free Python on this machine to try it with
    await expect(TorchEngine.start({ ...fallbackOptions(), python: 'python3', launcher: ['python3'] })).rejects.toThrow(
      /cannot import torch.*npm run setup:test/,
    );
  });

  it('a worker that does not come up in time is stopped with a clear message', async () => {
    if (!gate.available) return;
    await expect(TorchEngine.start({ ...torchOptions(), startTimeoutMs: 50 })).rejects.toThrow(/did not start within 0\.05s/);
  });

  it('a model directory without tokenizer.json is refused before Python starts', async () => {
    await expect(TorchEngine.start({ ...fallbackOptions(), modelDir: tempDir() })).rejects.toThrow(
      /tokenizer file not found: .*tokenizer\.json/,
    );
  });
});

/**
 * A stand-in worker (node, started through `launcher`) that answers init at once and train_step after
 * `steps` × 150 ms, reporting progress after each step when `report` is set: the call timeout is a
 * bound on silence, not on the length of a call.
 */
function fakeWorker(report: boolean, steps: number): string[] {
  const script = `
const rl = require('node:readline').createInterface({ input: process.stdin });
const send = (m) => process.stdout.write(JSON.stringify(m) + '\\n');
send({ event: 'ready', protocol: 2, pid: process.pid, versions: {} });
rl.on('line', (line) => {
  const req = JSON.parse(line);
  if (req.op === 'init') return send({ id: req.id, ok: true, result: { vocab_size: 1000 } });
  if (req.op === 'shutdown') { send({ id: req.id, ok: true, result: {} }); process.exit(0); }
  let done = 0;
  const tick = setInterval(() => {
    done++;
    if (${report}) send({ event: 'progress', id: req.id, done, total: ${steps} });
    if (done === ${steps}) { clearInterval(tick); send({ id: req.id, ok: true, result: { loss: 0, tokens: 1, clip_fraction: 0, mean_ratio: 1, kl: 0, grad_norm: 0 } }); }
  }, 150);
});`;
  return [process.execPath, '-e', script];
}

describe.skipIf(!gate.available)(`the worker reports progress after each micro-batch (${gate.label})`, () => {
  it('train_step and logprobs', async () => {
    const seen: string[] = [];
    // 12-token budget per forward pass: each of these sequences is a micro-batch of its own.
    const engine = await TorchEngine.start(
      torchOptions({ microBatchTokens: 12, onProgress: (op, done, total) => seen.push(`${op} ${done}/${total}`) }),
    );
    try {
      const seqs = ['go to kitchen', 'open red box', 'read note'].map((t) => {
        const response = tokenizer.encode(t);
        return {
          prompt: tokenizer.encode('look'),
          response,
          advantages: response.map(() => 1),
          oldLogprobs: response.map(() => -2),
          mask: response.map(() => 1),
        };
      });
      await engine.logprobs(seqs);
      await engine.trainStep(seqs, { ...OBJECTIVE, klCoef: 0 }, 1);
      expect(seen).toEqual(['logprobs 1/3', 'logprobs 2/3', 'logprobs 3/3', 'train_step 1/3', 'train_step 2/3', 'train_step 3/3']);
      // The listener can be replaced and removed on a running engine (the trainer watches each update).
      const later: number[] = [];
      engine.setProgressListener((_op, done) => later.push(done));
      await engine.logprobs(seqs.slice(0, 2));
      engine.setProgressListener(null);
      await engine.logprobs(seqs);
      expect(later).toEqual([1, 2]);
      expect(seen).toHaveLength(6);
    } finally {
      await engine.close();
    }
  }, 120_000);
});

describe('the call timeout bounds silence, not the length of a call', () => {
  const seq = { prompt: [5, 6], response: [7], advantages: [1], oldLogprobs: [-1], mask: [1] };

  it('a train_step that reports progress runs past the timeout to its answer', async () => {
    const seen: string[] = [];
    const engine = await TorchEngine.start({
      ...fallbackOptions(),
      launcher: fakeWorker(true, 8),
      callTimeoutMs: 600,
      onProgress: (op, done, total) => seen.push(`${op} ${done}/${total}`),
    });
    try {
      const t0 = Date.now();
      await expect(engine.trainStep([seq], OBJECTIVE, 1)).resolves.toMatchObject({ tokens: 1 });
      expect(Date.now() - t0).toBeGreaterThan(1000); // 8 × 150 ms: longer than the 600 ms timeout
      expect(seen).toEqual(Array.from({ length: 8 }, (_, i) => `train_step ${i + 1}/8`));
    } finally {
      await engine.close();
    }
  }, 30_000);

  it('a silent one is stopped with a message that says so', async () => {
    const engine = await TorchEngine.start({ ...fallbackOptions(), launcher: fakeWorker(false, 8), callTimeoutMs: 600 });
    try {
      await expect(engine.trainStep([seq], OBJECTIVE, 1)).rejects.toThrow(
        /'train_step' did not answer or report progress within 0\.6s; the worker was stopped/,
      );
    } finally {
      await engine.close();
    }
  }, 30_000);

  it('a worker of another protocol version is refused at start-up', async () => {
    const old = fakeWorker(true, 1);
    old[2] = old[2].replace('protocol: 2', 'protocol: 1');
    await expect(TorchEngine.start({ ...fallbackOptions(), launcher: old })).rejects.toThrow(/speaks protocol 1, this engine 2/);
  }, 30_000);
});

describe.skipIf(!gate.available || process.platform !== 'linux')(
  `a worker does not outlive the process that started it (${gate.label})`,
  () => {
    it('its parent killed with SIGKILL while its stdin stays open: the worker exits too', async () => {
      // sh starts the worker reading from a pipe that \`sleep\` holds open after sh is gone, so the
      // worker cannot notice the end of its input; only the parent-death signal can stop it.
      const sh = spawn('sh', ['-c', `sleep 60 | "$0" "$1" & wait`, projectPython(), TORCH_WORKER_SCRIPT], {
        stdio: ['ignore', 'pipe', 'ignore'],
      });
      try {
        const ready = await new Promise<{ pid: number }>((done, fail) => {
          let out = '';
          sh.stdout.on('data', (d: Buffer) => {
            out += d.toString();
            const line = out.split('\n').find((l) => l.includes('"ready"'));
            if (line) done(JSON.parse(line));
          });
          sh.on('exit', () => fail(new Error(`sh exited before the worker was ready: ${out}`)));
        });
        const alive = () => {
          try {
            process.kill(ready.pid, 0);
            return true;
          } catch {
            return false;
          }
        };
        expect(alive()).toBe(true);
        sh.kill('SIGKILL');
        const t0 = Date.now();
        while (alive() && Date.now() - t0 < 10_000) await new Promise((r) => setTimeout(r, 100));
        expect(alive()).toBe(false);
      } finally {
        sh.kill('SIGKILL');
      }
    }, 60_000);
  },
);

/** Options for start-up tests, which fail before the model is used. */
function fallbackOptions(): TorchEngineOptions {
  const dir = modelDir ?? writeFallbackModelDir();
  return { modelDir: dir, optimizer: OPTIMIZER, maxGradNorm: 0, microBatchTokens: 1000, endTokens: [2], padToken: 0 };
}

/** Without the Python gate beforeAll builds nothing; these tests only need a tokenizer.json. */
function writeFallbackModelDir(): string {
  const dir = tempDir();
  Tokenizer.fromJSON(trainByteLevelBPE(CORPUS, { vocabSize: 300, specialTokens: CHAT_SPECIAL_TOKENS }), 'fallback').save(
    join(dir, 'tokenizer.json'),
  );
  return dir;
}
