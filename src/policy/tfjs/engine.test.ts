/**
 * The engine against slow, obviously-correct recomputations: scoring vs one unpadded forward pass
 * per prefix, KV-cache decoding vs recomputing the whole sequence every step, autodiff vs central
 * finite differences, micro-batched vs whole-batch updates, save/load round trips.
 *
 * Models are tiny (hidden 32, 2 layers, 4 query / 2 key-value heads, vocabulary ~300) with weights
 * drawn wider than a real init (std 0.3, biases and norm weights perturbed too) so attention and
 * the output distribution are far from uniform and every code path carries signal.
 */
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { mkdtempSync, readFileSync, rmSync, truncateSync, statSync, unlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { initBackend, tf } from './backend.ts';
import { Qwen2Model, type ModelConfig } from './qwen2.ts';
import { TfjsEngine, responseLogprobs, type EngineOptions } from './engine.ts';
import { loadModelDir, saveModelDir } from './checkpoint.ts';
import {
  HEAP_SAFETY,
  PREFILL_TOKENS,
  chunkReserveBytes,
  inferenceBytesPerToken,
  kvBytesPerToken,
  plainTrainingBytesPerToken,
  trainingBytesPerToken,
} from './memory-plan.ts';
import { trainByteLevelBPE, Tokenizer } from '../tokenizer.ts';
import { objectiveTerms, type ObjectiveConfig } from '../../algo/objective.ts';
import { CHAT_SPECIAL_TOKENS, IM_END, END_OF_TEXT } from '../chat-tokens.ts';
import type { Generation, TrainSequence } from '../types.ts';

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

let tokenizer: Tokenizer;
let IM_END_ID: number;
let EOT_ID: number;
const tmpDirs: string[] = [];

function tempDir(): string {
  const d = mkdtempSync(join(tmpdir(), 'empo2-engine-'));
  tmpDirs.push(d);
  return d;
}

function modelConfig(overrides: Partial<ModelConfig> = {}): ModelConfig {
  return {
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
    tie_word_embeddings: false,
    initializer_range: 0.3,
    eos_token_id: IM_END_ID,
    ...overrides,
  };
}

/** Random model whose biases and norm weights are also random (a fresh init has them 0 and 1). */
function makeModel(seed: number, overrides: Partial<ModelConfig> = {}): Qwen2Model {
  const model = Qwen2Model.random(modelConfig(overrides), seed);
  let k = 0;
  for (const [name, v] of model.params) {
    k++;
    if (name.endsWith('.bias')) tf.tidy(() => v.assign(tf.randomNormal(v.shape, 0, 0.3, 'float32', seed * 7919 + k)));
    else if (v.rank === 1) tf.tidy(() => v.assign(tf.randomUniform(v.shape, 0.5, 1.5, 'float32', seed * 7919 + k)));
  }
  return model;
}

function engineOptions(o: Partial<EngineOptions> = {}): EngineOptions {
  return {
    optimizer: { lr: 1e-2, beta1: 0.9, beta2: 0.99, eps: 1e-8, weightDecay: 0 },
    maxGradNorm: 0,
    microBatchTokens: 100_000,
    endTokens: [IM_END_ID, EOT_ID],
    padToken: EOT_ID,
    ...o,
  };
}

function makeEngine(seed: number, o: Partial<EngineOptions> = {}, m: Partial<ModelConfig> = {}): TfjsEngine {
  return new TfjsEngine(makeModel(seed, m), tokenizer, engineOptions(o));
}

/**
 * The slow reference: for each response token, run the model on prompt + response[:j] alone
 * (batch of one, no padding, positions 0..n-1), log-softmax of the last position in double precision.
 */
function referenceLogprobs(model: Qwen2Model, prompt: number[], response: number[], temperature = 1): number[] {
  return response.map((tok, j) => {
    const prefix = [...prompt, ...response.slice(0, j)];
    const n = prefix.length;
    const row = tf.tidy(() => {
      const causal = new Float32Array(n * n);
      for (let q = 0; q < n; q++) for (let k = 0; k < n; k++) causal[q * n + k] = k <= q ? 0 : -1e9;
      const { hidden } = model.forward(
        tf.tensor2d(prefix, [1, n], 'int32'),
        tf.tensor2d([...prefix.keys()], [1, n], 'int32'),
        tf.tensor4d(causal, [1, 1, n, n]),
      );
      const last = hidden.slice([0, n - 1, 0], [1, 1, hidden.shape[2]]).reshape([1, hidden.shape[2]]) as tf.Tensor2D;
      return model.logits(last).dataSync();
    });
    const scaled = Array.from(row, (x) => x / temperature);
    const max = Math.max(...scaled);
    const lse = max + Math.log(scaled.reduce((a, x) => a + Math.exp(x - max), 0));
    return scaled[tok] - lse;
  });
}

const maxAbsDiff = (a: number[], b: number[]) => {
  expect(a).toHaveLength(b.length);
  return a.reduce((m, x, i) => Math.max(m, Math.abs(x - b[i])), 0);
};

function paramsSnapshot(model: Qwen2Model): Map<string, Float32Array> {
  return new Map([...model.params].map(([k, v]) => [k, Float32Array.from(v.dataSync())]));
}

function maxParamDiff(a: Map<string, Float32Array>, b: Map<string, Float32Array>): number {
  let m = 0;
  for (const [k, x] of a) {
    const y = b.get(k)!;
    for (let i = 0; i < x.length; i++) m = Math.max(m, Math.abs(x[i] - y[i]));
  }
  return m;
}

const prompt = (text: string) => tokenizer.encode(`<|im_start|>user\n${text}<|im_end|>\n<|im_start|>assistant\n`);

beforeAll(async () => {
  await initBackend();
  tokenizer = Tokenizer.fromJSON(
    trainByteLevelBPE(CORPUS, { vocabSize: 300, specialTokens: CHAT_SPECIAL_TOKENS }),
    'engine test tokenizer',
  );
  IM_END_ID = tokenizer.requireTokenId(IM_END);
  EOT_ID = tokenizer.requireTokenId(END_OF_TEXT);
});

afterAll(() => {
  for (const d of tmpDirs) rmSync(d, { recursive: true, force: true });
});

describe('scoring: logprobs()', () => {
  const batch = () => [
    { prompt: prompt('go'), response: tokenizer.encode('open red box').concat(IM_END_ID) },
    {
      prompt: prompt('You are in the hall. You see a red box, a blue drawer and a door to the kitchen.'),
      response: tokenizer.encode('take yellow hat'),
    },
    { prompt: [5], response: [17, 200, 3, 3, 42, 250, 9] },
    { prompt: prompt('look'), response: [IM_END_ID] },
  ];

  it('a right-padded batch equals token-by-token recomputation on each prefix alone (max |Δ| < 1e-4)', async () => {
    const engine = makeEngine(1);
    const b = batch();
    const got = await engine.logprobs(b);
    b.forEach((s, i) => {
      expect(maxAbsDiff(got[i], referenceLogprobs(engine.model, s.prompt, s.response))).toBeLessThan(1e-4);
    });
    engine.dispose();
  });

  it('the same at temperature 0.7, and with tied embeddings (max |Δ| < 1e-4)', async () => {
    const engine = makeEngine(2, {}, { tie_word_embeddings: true });
    const b = batch();
    const got = await engine.logprobs(b, 0.7);
    b.forEach((s, i) => {
      expect(maxAbsDiff(got[i], referenceLogprobs(engine.model, s.prompt, s.response, 0.7))).toBeLessThan(1e-4);
    });
    engine.dispose();
  });

  it('micro-batching (a token budget smaller than one sequence) does not change the scores (max |Δ| < 1e-5)', async () => {
    const whole = makeEngine(3);
    const pieces = makeEngine(3, { microBatchTokens: 8 });
    const b = batch();
    const a = await whole.logprobs(b);
    const c = await pieces.logprobs(b);
    a.forEach((row, i) => expect(maxAbsDiff(row, c[i])).toBeLessThan(1e-5));
    whole.dispose();
    pieces.dispose();
  });

  it('refuses an empty prompt, naming the sequence', async () => {
    const engine = makeEngine(1);
    await expect(engine.logprobs([{ prompt: [], response: [3] }])).rejects.toThrow(/sequence 0 has an empty prompt/);
    engine.dispose();
  });

  it('leaves no tensors behind', async () => {
    const engine = makeEngine(1);
    const before = tf.memory().numTensors;
    await engine.logprobs(batch());
    expect(tf.memory().numTensors).toBe(before);
    engine.dispose();
  });
});

describe('generation', () => {
  const prompts = () => [
    prompt('go'),
    prompt('You are in the hall. You see a red box.'),
    prompt('Task: Find the yellow hat and bring it to the pantry. You are in the hall.'),
  ];

  it('prompts have different lengths (so left padding is exercised)', () => {
    const lengths = prompts().map((p) => p.length);
    expect(new Set(lengths).size).toBe(3);
  });

  for (const [label, opts] of [
    ['T = 1', { temperature: 1, topP: 1 }],
    ['T = 0.7, top-p 0.9', { temperature: 0.7, topP: 0.9 }],
    ['greedy', { temperature: 0, topP: 1 }],
  ] as const) {
    it(`KV cache equals recomputation without cache (${label}): same tokens, log-probs within 1e-4`, async () => {
      const engine = makeEngine(4);
      for (const seed of [1, 2, 3]) {
        const cached = await engine.generate(prompts(), { ...opts, maxTokens: 12, seed });
        const plain = await engine.generate(prompts(), { ...opts, maxTokens: 12, seed, useCache: false });
        expect(cached.map((g) => g.tokens)).toEqual(plain.map((g) => g.tokens));
        cached.forEach((g, i) => expect(maxAbsDiff(g.logprobs, plain[i].logprobs)).toBeLessThan(1e-4));
        expect(cached.map((g) => g.finish)).toEqual(plain.map((g) => g.finish));
      }
      engine.dispose();
    });
  }

  it('KV cache equals recomputation under constrained decoding (one row free, two constrained), within 1e-4', async () => {
    const engine = makeEngine(5);
    const allowed = [
      ['open red box', 'open blue drawer', 'go to kitchen'],
      null,
      ['take yellow hat', 'take red key', 'look around', 'inventory'],
    ];
    for (const seed of [1, 2, 3, 4]) {
      const opts = { temperature: 1.2, topP: 1, maxTokens: 16, seed, allowedTexts: allowed };
      const cached = await engine.generate(prompts(), opts);
      const plain = await engine.generate(prompts(), { ...opts, useCache: false });
      expect(cached.map((g) => g.tokens)).toEqual(plain.map((g) => g.tokens));
      cached.forEach((g, i) => expect(maxAbsDiff(g.logprobs, plain[i].logprobs)).toBeLessThan(1e-4));
      expect(allowed[0]).toContain(cached[0].text);
      expect(allowed[2]).toContain(cached[2].text);
    }
    engine.dispose();
  });

  it('greedy decoding of a left-padded batch equals decoding each prompt alone, unpadded', async () => {
    const engine = makeEngine(6);
    const ps = prompts();
    const batched = await engine.generate(ps, { temperature: 0, topP: 1, maxTokens: 10, seed: 0 });
    for (let i = 0; i < ps.length; i++) {
      const [alone] = await engine.generate([ps[i]], { temperature: 0, topP: 1, maxTokens: 10, seed: 0, useCache: false });
      expect(batched[i].tokens).toEqual(alone.tokens);
      expect(maxAbsDiff(batched[i].logprobs, alone.logprobs)).toBeLessThan(1e-4);
    }
    engine.dispose();
  });

  it("the sampler's log-probs equal logprobs() of the same (prompt, response) at the sampling temperature (within 1e-4)", async () => {
    // This is what makes ρ = 1 on the first update of freshly sampled data.
    const engine = makeEngine(7);
    const ps = prompts();
    const gens = await engine.generate(ps, { temperature: 0.8, topP: 1, maxTokens: 10, seed: 9 });
    const scored = await engine.logprobs(
      ps.map((p, i) => ({ prompt: p, response: gens[i].tokens })),
      0.8,
    );
    gens.forEach((g, i) => expect(maxAbsDiff(g.logprobs, scored[i])).toBeLessThan(1e-4));
    engine.dispose();
  });

  it('constrained decoding only ever produces one of the allowed texts, ending in the end token (40 draws at T = 1.5)', async () => {
    const engine = makeEngine(8);
    // Shared prefixes ("go to ...", "open ..."), and one text a prefix of another.
    const allowed = [
      'go to kitchen',
      'go to hall',
      'go to pantry',
      'open red box',
      'open blue drawer',
      'look',
      'look around',
      'put yellow hat in red box',
    ];
    const seen = new Set<string>();
    for (let seed = 0; seed < 10; seed++) {
      const gens = await engine.generate(prompts().concat([prompt('inventory')]), {
        temperature: 1.5,
        topP: 1,
        maxTokens: 32,
        seed,
        allowedTexts: [allowed, allowed, allowed, allowed],
      });
      for (const g of gens) {
        expect(allowed).toContain(g.text);
        expect(g.finish).toBe('stop');
        // Canonical tokenisation of the text plus the end-of-turn token.
        expect(g.tokens).toEqual([...tokenizer.encode(g.text), IM_END_ID]);
        seen.add(g.text);
      }
    }
    // The sampler really chooses among them rather than always the same one.
    expect(seen.size).toBeGreaterThanOrEqual(3);
    engine.dispose();
  });

  it('stops at maxTokens with finish "length", and leaves no tensors behind', async () => {
    const engine = makeEngine(9);
    const before = tf.memory().numTensors;
    // Forbid the end tokens by allowing only a long text and cutting it short.
    const gens = await engine.generate([prompt('go')], {
      temperature: 1,
      topP: 1,
      maxTokens: 2,
      seed: 1,
      allowedTexts: [['put yellow hat in red box']],
    });
    expect(gens[0].tokens).toHaveLength(2);
    expect(gens[0].finish).toBe('length');
    await engine.generate(prompts(), { temperature: 1, topP: 1, maxTokens: 5, seed: 1 });
    expect(tf.memory().numTensors).toBe(before);
    engine.dispose();
  });

  it('refuses an empty prompt, naming its index', async () => {
    const engine = makeEngine(1);
    await expect(engine.generate([prompt('go'), []], { temperature: 1, topP: 1, maxTokens: 2, seed: 1 })).rejects.toThrow(
      /prompt 1 is empty/,
    );
    engine.dispose();
  });
});

describe('gradients', () => {
  it('autodiff of the objective matches central finite differences (h = 1e-2, float32; |Δ| ≤ 2e-2·|g| + 2e-4)', () => {
    const model = makeModel(10);
    const seqs = [
      { prompt: prompt('open red box'), response: tokenizer.encode('take yellow hat').concat(IM_END_ID) },
      { prompt: prompt('look'), response: tokenizer.encode('go to kitchen') },
      { prompt: [7, 8], response: [100, 150, 9] },
    ];
    const n = seqs.reduce((a, s) => a + s.response.length, 0);
    // Old log-probs near the current ones (ratios 0.9-1.1, inside the clip range so the loss is smooth),
    // mixed-sign advantages, and a KL term with its own reference so every part of the loss has a gradient.
    const current = Array.from(tf.tidy(() => responseLogprobs(model, seqs, 1, EOT_ID).dataSync()));
    const wiggle = (i: number, s: number) => 0.1 * Math.sin(1.7 * i + s);
    const oldLogp = current.map((lp, i) => lp + wiggle(i, 0));
    const refLogp = current.map((lp, i) => lp + 3 * wiggle(i, 1));
    const advantages = current.map((_, i) => (i % 3 === 0 ? -1.3 : 0.8));
    const cfg: ObjectiveConfig = { clipLow: 0.2, clipHigh: 0.3, dualClip: 10, klCoef: 0.5, lowProbDelta: null };
    const loss = () =>
      objectiveTerms(
        {
          logp: responseLogprobs(model, seqs, 1, EOT_ID),
          oldLogp: tf.tensor1d(oldLogp),
          advantages: tf.tensor1d(advantages),
          mask: tf.ones([n]) as tf.Tensor1D,
          refLogp: tf.tensor1d(refLogp),
        },
        cfg,
      ).lossSum;
    const lossValue = () => tf.tidy(() => loss().dataSync()[0]);

    const names = [
      'model.embed_tokens.weight',
      'model.layers.0.self_attn.q_proj.weight',
      'model.layers.0.self_attn.q_proj.bias',
      'model.layers.0.self_attn.k_proj.weight',
      'model.layers.0.mlp.gate_proj.weight',
      'model.layers.1.mlp.down_proj.weight',
      'model.layers.0.input_layernorm.weight',
      'model.norm.weight',
      'lm_head.weight',
    ];
    const vars = names.map((nm) => model.params.get(nm)!);
    const { grads, value } = tf.variableGrads(loss, vars);
    value.dispose();
    const h = 1e-2;
    let checked = 0;
    for (const nm of names) {
      const v = model.params.get(nm)!;
      const g = Float32Array.from(grads[v.name].dataSync());
      // The three entries with the largest gradient (where float32 differences are meaningful)
      // plus one fixed entry anywhere.
      const order = [...g.keys()].sort((a, b) => Math.abs(g[b]) - Math.abs(g[a]));
      const entries = [...new Set([...order.slice(0, 3), Math.floor(g.length / 2)])];
      for (const idx of entries) {
        const original = Float32Array.from(v.dataSync());
        const at = (x: number) => {
          const data = Float32Array.from(original);
          data[idx] = x;
          tf.tidy(() => v.assign(tf.tensor(data, v.shape)));
          return lossValue();
        };
        const fd = (at(original[idx] + h) - at(original[idx] - h)) / (2 * h);
        tf.tidy(() => v.assign(tf.tensor(original, v.shape)));
        const tolerance = 2e-2 * Math.abs(g[idx]) + 2e-4;
        if (Math.abs(fd - g[idx]) > tolerance) throw new Error(`${nm}[${idx}]: autodiff ${g[idx]} vs finite difference ${fd}`);
        checked++;
      }
      // The top entry must be a real signal, not float noise, or the comparison says nothing.
      expect(Math.abs(g[order[0]])).toBeGreaterThan(1e-2);
    }
    expect(checked).toBeGreaterThanOrEqual(names.length * 3);
    tf.dispose(Object.values(grads));
    model.dispose();
  });
});

describe('training step', () => {
  const objective: ObjectiveConfig = { clipLow: 0.2, clipHigh: 0.3, dualClip: 10, klCoef: 0, lowProbDelta: null };

  it("a positive advantage raises the sampled response's log-prob; a negative one lowers it", async () => {
    for (const sign of [1, -1]) {
      const engine = makeEngine(11);
      const p = prompt('You are in the hall.');
      const [g] = await engine.generate([p], { temperature: 1, topP: 1, maxTokens: 8, seed: 3 });
      const seq = { prompt: p, response: g.tokens };
      const before = (await engine.logprobs([seq]))[0].reduce((a, b) => a + b, 0);
      const stats = await engine.trainStep(
        [{ ...seq, advantages: g.tokens.map(() => sign), oldLogprobs: g.logprobs, mask: g.tokens.map(() => 1) }],
        objective,
      );
      const after = (await engine.logprobs([seq]))[0].reduce((a, b) => a + b, 0);
      // First step on fresh samples: ρ = 1, so the loss is −A per token.
      expect(stats.meanRatio).toBeCloseTo(1, 4);
      expect(stats.loss).toBeCloseTo(-sign, 4);
      expect(stats.tokens).toBe(g.tokens.length);
      if (sign > 0) expect(after).toBeGreaterThan(before + 0.01);
      else expect(after).toBeLessThan(before - 0.01);
      engine.dispose();
    }
  });

  it('micro-batched accumulation gives the same update as one big batch (parameters within 1e-5)', async () => {
    // Adam's first step is ≈ lr·sign(g); ε = 1e-3 keeps entries whose gradient is float noise from
    // flipping sign between the two summation orders, so the comparison is about the accumulation.
    const o = { optimizer: { lr: 1e-2, beta1: 0.9, beta2: 0.99, eps: 1e-3, weightDecay: 0.01 }, maxGradNorm: 1 };
    const whole = makeEngine(12, { ...o, microBatchTokens: 100_000 });
    const pieces = makeEngine(12, { ...o, microBatchTokens: 20 });
    const initial = paramsSnapshot(whole.model);
    expect(maxParamDiff(initial, paramsSnapshot(pieces.model))).toBe(0);

    const ps = [prompt('go'), prompt('open red box'), prompt('You are in the hall. You see a red box, a blue drawer.'), [3, 4]];
    const gens = await whole.generate(ps, { temperature: 1, topP: 1, maxTokens: 8, seed: 5 });
    const batch: TrainSequence[] = ps.map((p, i) => ({
      prompt: p,
      response: gens[i].tokens,
      advantages: gens[i].tokens.map(() => (i % 2 === 0 ? 1.5 : -0.7)),
      // Shifted old log-probs so some ratios are clipped and the clipping path is in the sum too.
      oldLogprobs: gens[i].logprobs.map((lp, j) => lp + (j % 2 === 0 ? 0.4 : -0.05)),
      mask: gens[i].tokens.map((_, j) => (j === 1 ? 0 : 1)),
    }));
    const a = await whole.trainStep(batch, objective);
    const b = await pieces.trainStep(batch, objective);
    expect(b.tokens).toBe(a.tokens);
    expect(Math.abs(a.loss - b.loss)).toBeLessThan(1e-6);
    expect(Math.abs(a.gradNorm - b.gradNorm)).toBeLessThan(1e-6 * Math.max(1, a.gradNorm));
    expect(Math.abs(a.clipFraction - b.clipFraction)).toBeLessThan(1e-9);
    const after = paramsSnapshot(whole.model);
    // The step moved the weights far more than the tolerance, so the equality is not vacuous.
    expect(maxParamDiff(initial, after)).toBeGreaterThan(1e-3);
    expect(maxParamDiff(after, paramsSnapshot(pieces.model))).toBeLessThan(1e-5);
    whole.dispose();
    pieces.dispose();
  });

  it('two engines live side by side (tfjs variable names are global) and a step on one leaves the other untouched', async () => {
    const a = makeEngine(14);
    const b = makeEngine(14);
    const bBefore = paramsSnapshot(b.model);
    const p = prompt('go');
    const [g] = await a.generate([p], { temperature: 1, topP: 1, maxTokens: 4, seed: 1 });
    await a.trainStep(
      [{ prompt: p, response: g.tokens, advantages: g.tokens.map(() => 1), oldLogprobs: g.logprobs, mask: g.tokens.map(() => 1) }],
      objective,
    );
    expect(maxParamDiff(bBefore, paramsSnapshot(a.model))).toBeGreaterThan(1e-3);
    expect(maxParamDiff(bBefore, paramsSnapshot(b.model))).toBe(0);
    a.dispose();
    b.dispose();
  });

  it('a batch with nothing to train (all masked) changes no weight; a second step creates no new tensors', async () => {
    const engine = makeEngine(13);
    const seq = { prompt: prompt('go'), response: [20, 30, IM_END_ID], oldLogprobs: [-5, -5, -5], advantages: [1, 1, 1] };
    const initial = paramsSnapshot(engine.model);
    const stats = await engine.trainStep([{ ...seq, mask: [0, 0, 0] }], objective);
    expect(stats.tokens).toBe(0);
    expect(maxParamDiff(initial, paramsSnapshot(engine.model))).toBe(0);
    await engine.trainStep([{ ...seq, mask: [1, 1, 1] }], objective);
    const tensors = tf.memory().numTensors;
    await engine.trainStep([{ ...seq, mask: [1, 1, 1] }], objective);
    expect(tf.memory().numTensors).toBe(tensors);
    engine.dispose();
  });
});

describe('save and load', () => {
  const texts = ['<|im_start|>user\nopen red box<|im_end|>\n<|im_start|>assistant\n', 'take yellow hat', 'zebra 123 ünïcode ✓'];

  it('saveModelDir → loadModelDir gives bit-identical logits and identical tokenizer encodings', async () => {
    const engine = makeEngine(14);
    const dir = tempDir();
    await engine.save(dir);
    const loaded = loadModelDir(dir);
    expect(loaded.model.config).toMatchObject(engine.model.config);
    const seqs = [
      { prompt: prompt('go'), response: tokenizer.encode('look around') },
      { prompt: [1, 2, 3], response: [4, 5] },
    ];
    const logitsOf = (m: Qwen2Model) => tf.tidy(() => Array.from(responseLogprobs(m, seqs, 1, EOT_ID).dataSync()));
    expect(logitsOf(loaded.model)).toEqual(logitsOf(engine.model));
    for (const [name, v] of engine.model.params)
      expect(Array.from(loaded.model.params.get(name)!.dataSync())).toEqual(Array.from(v.dataSync()));
    for (const t of texts) expect(loaded.tokenizer.encode(t)).toEqual(tokenizer.encode(t));
    expect(loaded.tokenizer.vocabSize).toBe(tokenizer.vocabSize);
    loaded.model.dispose();
    engine.dispose();
  });

  it('tied embeddings round-trip without an lm_head tensor', async () => {
    const model = makeModel(15, { tie_word_embeddings: true });
    const dir = tempDir();
    await saveModelDir(dir, model, tokenizer);
    const loaded = loadModelDir(dir);
    expect(loaded.model.params.has('lm_head.weight')).toBe(false);
    const seqs = [{ prompt: prompt('go'), response: [40, 41, 42] }];
    const lp = (m: Qwen2Model) => tf.tidy(() => Array.from(responseLogprobs(m, seqs, 1, EOT_ID).dataSync()));
    expect(lp(loaded.model)).toEqual(lp(model));
    loaded.model.dispose();
    model.dispose();
  });

  describe('a corrupt model directory gives an error naming the file', () => {
    let good: string;
    beforeAll(async () => {
      const model = makeModel(16);
      good = tempDir();
      await saveModelDir(good, model, tokenizer);
      model.dispose();
    });
    const copy = () => {
      const d = tempDir();
      for (const f of ['config.json', 'model.safetensors', 'tokenizer.json']) writeFileSync(join(d, f), readFileSync(join(good, f)));
      return d;
    };

    it('truncated model.safetensors', () => {
      const d = copy();
      const file = join(d, 'model.safetensors');
      truncateSync(file, Math.floor(statSync(file).size / 2));
      expect(() => loadModelDir(d)).toThrow(file);
    });

    it('model.safetensors cut inside its 8-byte header length', () => {
      const d = copy();
      const file = join(d, 'model.safetensors');
      truncateSync(file, 5);
      expect(() => loadModelDir(d)).toThrow(new RegExp(`${file.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}: 5 bytes is too short`));
    });

    it('missing config.json', () => {
      const d = copy();
      unlinkSync(join(d, 'config.json'));
      expect(() => loadModelDir(d)).toThrow(`${join(d, 'config.json')} is missing`);
    });

    it('config.json that is not JSON', () => {
      const d = copy();
      writeFileSync(join(d, 'config.json'), '{ "hidden_size": ');
      expect(() => loadModelDir(d)).toThrow(`${join(d, 'config.json')} is not valid JSON`);
    });

    it('a weight whose shape disagrees with config.json (names the directory, the tensor and both shapes)', () => {
      const d = copy();
      const cfg = JSON.parse(readFileSync(join(d, 'config.json'), 'utf8'));
      cfg.intermediate_size = 48;
      writeFileSync(join(d, 'config.json'), JSON.stringify(cfg));
      expect(() => loadModelDir(d)).toThrow(
        `${join(d, 'model.safetensors')}: tensor "model.layers.0.mlp.gate_proj.weight" has shape [64,32] but config.json implies [48,32]`,
      );
    });

    it('missing tokenizer.json and a missing directory', () => {
      const d = copy();
      unlinkSync(join(d, 'tokenizer.json'));
      expect(() => loadModelDir(d)).toThrow(`${join(d, 'tokenizer.json')} is missing`);
      expect(() => loadModelDir(join(d, 'nope'))).toThrow(`model directory not found: ${join(d, 'nope')}`);
    });

    it('an invalid config value names config.json and the key', () => {
      const d = copy();
      const cfg = JSON.parse(readFileSync(join(d, 'config.json'), 'utf8'));
      cfg.num_key_value_heads = 3;
      writeFileSync(join(d, 'config.json'), JSON.stringify(cfg));
      expect(() => loadModelDir(d)).toThrow(/config\.json: num_attention_heads \(4\) must be a multiple of num_key_value_heads \(3\)/);
    });
  });
});

describe('prefix reuse: generate with cacheKeys', () => {
  const obs = [
    'You see a red box.',
    'The red box is open. Inside it: a yellow hat.',
    'You take the yellow hat.',
    'You are in the hall. You see a blue drawer and a door to the kitchen.',
    'Nothing happens.',
  ];
  const turn = (text: string) => tokenizer.encode(`<|im_start|>user\n${text}<|im_end|>\n<|im_start|>assistant\n`);
  let system: number[];
  beforeAll(() => {
    system = tokenizer.encode('<|im_start|>system\nTask: Find the yellow hat and bring it to the pantry.<|im_end|>\n');
  });
  /**
   * Prompt of step t of an episode: system, an optional tip block that changes every step (a middle
   * block that diverges), and the history; with a window, only the last `window` turns (the front is cut).
   */
  const episodePrompt = (history: number[][], t: number, o: { tips: boolean; window: number | null }) => {
    const tip = o.tips ? tokenizer.encode(`<|im_start|>user\ntip ${t % 3}: open red box<|im_end|>\n`) : [];
    const turns = o.window === null ? history : history.slice(Math.max(0, history.length - 2 * o.window + 1));
    return [...system, ...tip, ...turns.flat()];
  };

  /** Runs lockstep episodes (rows) for `steps` steps, with or without keys, and returns every call's generations. */
  async function runEpisodes(
    engine: TfjsEngine,
    keys: boolean,
    sampling: { temperature: number; topP: number },
    o: { tips: boolean; window: number | null },
    steps = 4,
    rows = 3,
    constrained = false,
  ): Promise<Generation[][]> {
    const histories: number[][][] = Array.from({ length: rows }, (_, b) => [turn(obs[b])]);
    const calls: Generation[][] = [];
    for (let t = 0; t < steps; t++) {
      const prompts = histories.map((h) => episodePrompt(h, t, o));
      const gens = await engine.generate(prompts, {
        ...sampling,
        maxTokens: 6,
        seed: 100 + t,
        cacheKeys: keys ? histories.map((_, b) => `episode-${b}`) : undefined,
        allowedTexts: constrained
          ? histories.map((_, b) => (b === 1 ? null : ['open red box', 'go to kitchen', 'take yellow hat', 'look around']))
          : undefined,
      });
      calls.push(gens);
      // The response (tokens as sampled, end token included) and the next observation extend the history.
      histories.forEach((h, b) => h.push(gens[b].tokens, turn(obs[(b + t + 1) % obs.length])));
    }
    if (keys) engine.releaseCache(histories.map((_, b) => `episode-${b}`));
    return calls;
  }

  /**
   * fp32: a cached step multiplies matrices of other shapes than the uncached one (only the new tokens),
   * which OpenBLAS blocks differently. Measured: up to 1.8e-5 with its Zen kernels (AMD EPYC), under 1e-5
   * on the machine CI ran on before; a wrong position or key/value is off by far more, or changes tokens.
   */
  const REUSE_TOL = 5e-5;
  const expectSame = (a: Generation[][], b: Generation[][]) => {
    expect(a.map((c) => c.map((g) => g.tokens))).toEqual(b.map((c) => c.map((g) => g.tokens)));
    a.forEach((call, t) => call.forEach((g, i) => expect(maxAbsDiff(g.logprobs, b[t][i].logprobs)).toBeLessThan(REUSE_TOL)));
  };

  for (const [label, o] of [
    ['prompts that extend the previous prompt + response', { tips: false, window: null }],
    ['a tip block in the middle that changes every step', { tips: true, window: null }],
    ['a history window that cuts the front', { tips: false, window: 2 }],
  ] as const) {
    it(`${label}: same tokens and log-probs (${REUSE_TOL}) as without keys, greedy and seeded sampling`, async () => {
      const engine = makeEngine(21);
      for (const sampling of [
        { temperature: 0, topP: 1 },
        { temperature: 1, topP: 1 },
        { temperature: 0.8, topP: 0.9 },
      ]) {
        const plain = await runEpisodes(engine, false, sampling, o);
        const before = engine.cacheStats();
        const cached = await runEpisodes(engine, true, sampling, o);
        expectSame(cached, plain);
        const stats = engine.cacheStats();
        // Keys were used: the exact extensions reuse every step after the first; nothing is left after release.
        expect(stats.reusedTokens - before.reusedTokens).toBeGreaterThan(0);
        expect(stats.entries).toBe(0);
      }
      engine.dispose();
    });
  }

  it('an exactly extending episode prefills only the new tokens after step 1', async () => {
    const engine = makeEngine(22);
    const histories: number[][] = [[...system, ...turn(obs[0])]];
    let previousLength = 0;
    for (let t = 0; t < 4; t++) {
      const before = engine.cacheStats();
      const [g] = await engine.generate([histories[0]], { temperature: 1, topP: 1, maxTokens: 5, seed: t, cacheKeys: ['e'] });
      const prefilled = engine.cacheStats().prefilledTokens - before.prefilledTokens;
      // The cache holds prompt + every generated token but the last (never fed back), so the new
      // prompt's prefill is that last token plus the observation.
      if (t > 0) expect(prefilled).toBe(histories[0].length - previousLength);
      histories[0].push(...g.tokens, ...turn(obs[t + 1]));
      previousLength = histories[0].length - turn(obs[t + 1]).length - 1;
    }
    engine.dispose();
  });

  it('constrained decoding and rows with different cached lengths (keyed, unkeyed, new key) in one batch', async () => {
    const engine = makeEngine(23);
    const o = { tips: false, window: null };
    expectSame(
      await runEpisodes(engine, true, { temperature: 1, topP: 1 }, o, 3, 3, true),
      await runEpisodes(engine, false, { temperature: 1, topP: 1 }, o, 3, 3, true),
    );
    // Mixed: row 0 keyed with a long cache, row 1 unkeyed, row 2 a new key.
    const long = [...system, ...turn(obs[0])];
    await engine.generate([long], { temperature: 0, topP: 1, maxTokens: 4, seed: 1, cacheKeys: ['a'] });
    const prompts = [[...long, ...turn(obs[1])], prompt('go'), [...system, ...turn(obs[2])]];
    const opts = { temperature: 1, topP: 1, maxTokens: 6, seed: 9 };
    const withKeys = await engine.generate(prompts, { ...opts, cacheKeys: ['a', null, 'b'] });
    const without = await engine.generate(prompts, opts);
    expectSame([withKeys], [without]);
    engine.dispose();
  });

  it('groups split by the memory limit give the same results as one group', async () => {
    const whole = makeEngine(24);
    const split = makeEngine(24);
    // Room for the keys/values of about 200 tokens next to the fixed working memory: one row per group.
    const reserve = chunkReserveBytes() + PREFILL_TOKENS * inferenceBytesPerToken(split.model.config);
    (split.options as EngineOptions).memoryLimitBytes =
      tf.memory().numBytes + (reserve + 400 * kvBytesPerToken(split.model.config)) / HEAP_SAFETY;
    const groups = vi.spyOn(split as unknown as { generateGroup: () => void }, 'generateGroup');
    const o = { tips: true, window: null };
    expectSame(
      await runEpisodes(split, true, { temperature: 1, topP: 1 }, o),
      await runEpisodes(whole, false, { temperature: 1, topP: 1 }, o),
    );
    expect(groups.mock.calls.length).toBeGreaterThanOrEqual(2 * 4);
    whole.dispose();
    split.dispose();
  });

  it('a prompt whose keys/values cannot fit is refused before any work, saying what fits and what to use', async () => {
    const engine = makeEngine(28);
    const reserve = chunkReserveBytes() + PREFILL_TOKENS * inferenceBytesPerToken(engine.model.config);
    (engine.options as EngineOptions).memoryLimitBytes =
      tf.memory().numBytes + (reserve + 50 * kvBytesPerToken(engine.model.config)) / HEAP_SAFETY;
    const before = tf.memory().numTensors;
    const long = Array.from({ length: 80 }, (_, i) => 10 + (i % 50));
    await expect(
      engine.generate([prompt('go'), long], { temperature: 1, topP: 1, maxTokens: 4, seed: 1, cacheKeys: ['a', 'b'] }),
    ).rejects.toThrow(
      /generate: prompt 1 \(80 tokens \+ 4 to generate\) needs 21 KiB of keys\/values, but the wasm heap has room for 1[23] KiB \(prompts up to 4[56] tokens\); use model\.engine: torch/,
    );
    expect(tf.memory().numTensors).toBe(before);
    expect(engine.cacheStats().entries).toBe(0);
    engine.dispose();
  });

  it('a prompt too long for the heap and for the model is refused saying it is beyond the context, not to use another engine', async () => {
    const engine = makeEngine(28, {}, { max_position_embeddings: 64 });
    const reserve = chunkReserveBytes() + PREFILL_TOKENS * inferenceBytesPerToken(engine.model.config);
    (engine.options as EngineOptions).memoryLimitBytes =
      tf.memory().numBytes + (reserve + 50 * kvBytesPerToken(engine.model.config)) / HEAP_SAFETY;
    const long = Array.from({ length: 80 }, (_, i) => 10 + (i % 50));
    const refusal = engine.generate([long], { temperature: 1, topP: 1, maxTokens: 4, seed: 1 });
    await expect(refusal).rejects.toThrow(
      /generate: prompt 0 \(80 tokens \+ 4 to generate\) needs .* it is also longer than the model's context of 64 tokens \(max_position_embeddings\), so no engine would read it: shorten it$/,
    );
    await expect(refusal).rejects.not.toThrow(/model\.engine: torch/);
    engine.dispose();
  });

  it('turns the event loop between prefill chunks without a signal: a Ctrl-C or SIGTERM is handled during a long prompt', async () => {
    const engine = makeEngine(29, { chunks: { prefillTokens: 4 } });
    const long = prompt('You are in the hall. You see a red box, a blue drawer and a door to the kitchen.');
    let turns = 0;
    let generating = true;
    const tick = () => {
      if (!generating) return;
      turns++;
      setImmediate(tick);
    };
    setImmediate(tick);
    await engine.generate([long], { temperature: 1, topP: 1, maxTokens: 1, seed: 1 });
    generating = false;
    expect(long.length).toBeGreaterThan(12);
    expect(turns).toBeGreaterThanOrEqual(Math.ceil(long.length / 4) - 1);
    engine.dispose();
  });

  it('stays within its count and byte limits (least recently used dropped first), and results do not change', async () => {
    const engine = makeEngine(25, { kvCache: { maxEntries: 2, maxBytes: 1e9 } });
    const ps = [prompt('go'), prompt('look'), prompt('open red box')];
    const opts = { temperature: 1, topP: 1, maxTokens: 4, seed: 3 };
    await engine.generate(ps, { ...opts, cacheKeys: ['x', 'y', 'z'] });
    expect(engine.cacheStats().entries).toBe(2);
    expect(engine.cacheStats().evictions).toBe(1);
    const tiny = makeEngine(25, { kvCache: { maxEntries: 10, maxBytes: 100 } });
    const a = await tiny.generate(ps, { ...opts, cacheKeys: ['x', 'y', 'z'] });
    expect(tiny.cacheStats()).toMatchObject({ entries: 0, bytes: 0, evictions: 3 });
    const b = await tiny.generate(ps, { ...opts, cacheKeys: ['x', 'y', 'z'] });
    expect(b.map((g) => g.tokens)).toEqual(a.map((g) => g.tokens));
    expect(() => makeEngine(1, { kvCache: { maxEntries: -1, maxBytes: 1 } })).toThrow(
      /kvCache: "maxEntries" must be a non-negative integer/,
    );
    engine.dispose();
    tiny.dispose();
  });

  it('a cache computed before a training step is not reused after it (the weights changed)', async () => {
    const engine = makeEngine(26);
    const p = [...system, ...turn(obs[0])];
    const [g] = await engine.generate([p], { temperature: 1, topP: 1, maxTokens: 5, seed: 1, cacheKeys: ['e'] });
    await engine.trainStep(
      [{ prompt: p, response: g.tokens, advantages: g.tokens.map(() => 1), oldLogprobs: g.logprobs, mask: g.tokens.map(() => 1) }],
      { clipLow: 0.2, clipHigh: 0.3, dualClip: null, klCoef: 0, lowProbDelta: null },
    );
    const next = [...p, ...g.tokens, ...turn(obs[1])];
    const opts = { temperature: 1, topP: 1, maxTokens: 5, seed: 2 };
    const keyed = await engine.generate([next], { ...opts, cacheKeys: ['e'] });
    expect(engine.cacheStats().stale).toBe(1);
    const plain = await engine.generate([next], opts);
    expectSame([keyed], [plain]);
    engine.dispose();
  });

  it('refuses malformed keys, and leaves no tensors behind', async () => {
    const engine = makeEngine(27);
    const opts = { temperature: 1, topP: 1, maxTokens: 3, seed: 1 };
    await expect(engine.generate([prompt('go'), prompt('look')], { ...opts, cacheKeys: ['a'] })).rejects.toThrow(
      /cacheKeys has 1 entries for 2 prompts/,
    );
    await expect(engine.generate([prompt('go'), prompt('look')], { ...opts, cacheKeys: ['a', 'a'] })).rejects.toThrow(
      /cacheKeys\[1\] repeats cacheKeys\[0\] \("a"\)/,
    );
    const before = tf.memory().numTensors;
    await engine.generate([prompt('go'), prompt('look')], { ...opts, cacheKeys: ['a', 'b'] });
    await engine.generate([[...prompt('go'), 5, 6], prompt('look')], { ...opts, cacheKeys: ['a', 'b'] });
    expect(tf.memory().numTensors).toBe(before);
    engine.dispose();
  });
});

describe('jump-forward: a forced run of tokens in one pass', () => {
  // Texts whose tokens after the first few are forced (one allowed token at a time), as a tool call's wrapper is.
  const calls = ['put yellow hat in red box', 'put yellow hat in blue drawer', 'take red key', 'open blue drawer'];
  const prompts = () => [
    prompt('go'),
    prompt('You are in the hall. You see a red box.'),
    prompt('Task: Find the yellow hat and bring it to the pantry. You are in the hall.'),
    prompt('inventory'),
  ];
  /** A TokenConstraint (not a trie) that forces one text token by token, then the end token. */
  const exactly = (text: string) => {
    const ids = [...tokenizer.encode(text), IM_END_ID];
    return { allowedAfter: (prefix: readonly number[]) => (prefix.length < ids.length ? [ids[prefix.length]] : []) };
  };
  const TOL = 5e-5; // other matrix shapes than one token per pass (see prefix reuse's REUSE_TOL)

  const compare = async (engine: TfjsEngine, opts: Parameters<TfjsEngine['generate']>[1], ps = prompts()) => {
    const passes = vi.spyOn(engine as unknown as { runLayers: () => unknown }, 'runLayers');
    const stepwise = await engine.generate(ps, opts);
    const stepPasses = passes.mock.calls.length;
    passes.mockClear();
    const jumped = await engine.generate(ps, { ...opts, jumpForward: true });
    const jumpPasses = passes.mock.calls.length;
    passes.mockRestore();
    expect(jumped.map((g) => g.tokens)).toEqual(stepwise.map((g) => g.tokens));
    expect(jumped.map((g) => g.finish)).toEqual(stepwise.map((g) => g.finish));
    expect(jumped.map((g) => g.text)).toEqual(stepwise.map((g) => g.text));
    jumped.forEach((g, i) => expect(maxAbsDiff(g.logprobs, stepwise[i].logprobs)).toBeLessThan(TOL));
    return { stepwise, jumped, stepPasses, jumpPasses };
  };

  for (const [label, sampling] of [
    ['T = 1', { temperature: 1, topP: 1 }],
    ['T = 0.7, top-p 0.9', { temperature: 0.7, topP: 0.9 }],
    ['greedy', { temperature: 0, topP: 1 }],
  ] as const) {
    it(`same tokens, draws and finish as token by token, log-probs within ${TOL}, in fewer passes (${label})`, async () => {
      const engine = makeEngine(31);
      for (const seed of [1, 2, 3]) {
        const { stepwise, stepPasses, jumpPasses } = await compare(engine, {
          ...sampling,
          maxTokens: 24,
          seed,
          allowedTexts: [calls, null, calls, null],
          constraints: [null, exactly('put yellow hat in red box'), null, null],
        });
        expect(calls).toContain(stepwise[0].text);
        expect(stepwise[1].text).toBe('put yellow hat in red box');
        expect(calls).toContain(stepwise[2].text);
        // A free row keeps the batch running; the constrained rows took their forced runs in one pass each.
        expect(jumpPasses).toBeLessThanOrEqual(stepPasses);
      }
      engine.dispose();
    });
  }

  it('all rows constrained: the passes drop to the branching points (plus the prefill)', async () => {
    const engine = makeEngine(32);
    const { stepwise, stepPasses, jumpPasses } = await compare(engine, {
      temperature: 1,
      topP: 1,
      maxTokens: 24,
      seed: 4,
      allowedTexts: [calls, calls, calls, calls],
    });
    const longest = Math.max(...stepwise.map((g) => g.tokens.length));
    expect(stepPasses).toBe(longest); // the prefill, then one pass per token but the last
    expect(jumpPasses).toBeLessThan(stepPasses / 2);
    engine.dispose();
  });

  it('a forced run cut by maxTokens, and by a stop text inside it: the same as token by token', async () => {
    const engine = makeEngine(33);
    for (const seed of [5, 6]) {
      await compare(engine, { temperature: 1, topP: 1, maxTokens: 4, seed, allowedTexts: [calls, calls, null, calls] });
      const { stepwise } = await compare(engine, {
        temperature: 1,
        topP: 1,
        maxTokens: 24,
        seed,
        stop: ['hat'],
        allowedTexts: [calls, calls, calls, calls],
      });
      stepwise.filter((g) => g.text.startsWith('put')).forEach((g) => expect(g.finish).toBe('stop'));
    }
    engine.dispose();
  });

  it('with cacheKeys over an episode: the same as token by token, and the next prompt reuses the fed tokens', async () => {
    const run = async (jumpForward: boolean) => {
      const engine = makeEngine(34);
      const histories = prompts().map((p) => [p]);
      const out: Generation[][] = [];
      for (let t = 0; t < 3; t++) {
        const ps = histories.map((h) => h.flat());
        const gens = await engine.generate(ps, {
          temperature: 1,
          topP: 1,
          maxTokens: 24,
          seed: 50 + t,
          allowedTexts: [calls, calls, null, calls],
          cacheKeys: histories.map((_, b) => `e${b}`),
          jumpForward,
        });
        out.push(gens);
        histories.forEach((h, b) =>
          h.push(gens[b].tokens, tokenizer.encode(`<|im_start|>user\nYou see a red box.<|im_end|>\n<|im_start|>assistant\n`)),
        );
      }
      const stats = engine.prefillCounts();
      engine.dispose();
      return { out, stats };
    };
    const a = await run(false);
    const b = await run(true);
    expect(b.out.map((c) => c.map((g) => g.tokens))).toEqual(a.out.map((c) => c.map((g) => g.tokens)));
    b.out.forEach((c, t) => c.forEach((g, i) => expect(maxAbsDiff(g.logprobs, a.out[t][i].logprobs)).toBeLessThan(TOL)));
    // Every call after the first prefilled only the new turn (the response's tokens were in the cache).
    expect(b.stats).toEqual(a.stats);
    expect(b.stats.reusedTokens).toBeGreaterThan(0);
  });
});

describe('packed episodes: policyTokens', () => {
  const objective: ObjectiveConfig = { clipLow: 0.2, clipHigh: 0.3, dualClip: 3, klCoef: 0.1, lowProbDelta: 2e-3 };
  /**
   * An episode of three steps: prompt₁ response₁ obs₂ response₂ obs₃ response₃. Per step: the prompt is
   * everything before the response. Packed: one sequence, observations marked 0.
   */
  function episode(seed: number) {
    const prompt1 = prompt('You are in the hall. You see a red box.');
    const responses = [
      tokenizer.encode('open red box').concat(IM_END_ID),
      tokenizer.encode('take yellow hat').concat(IM_END_ID),
      tokenizer.encode('go to kitchen').concat(IM_END_ID),
    ];
    const observations = [prompt('The red box is open. Inside it: a yellow hat.').slice(0, 5 + seed), prompt('You take the yellow hat.')];
    const steps: { prompt: number[]; response: number[] }[] = [];
    let context = prompt1;
    responses.forEach((r, t) => {
      steps.push({ prompt: context, response: r });
      context = [...context, ...r, ...(observations[t] ?? [])];
    });
    const packedResponse: number[] = [];
    const policyTokens: number[] = [];
    responses.forEach((r, t) => {
      packedResponse.push(...r);
      policyTokens.push(...r.map(() => 1));
      if (t < observations.length) {
        packedResponse.push(...observations[t]);
        policyTokens.push(...observations[t].map(() => 0));
      }
    });
    return { steps, packed: { prompt: prompt1, response: packedResponse, policyTokens } };
  }

  it('logprobs of a packed episode equal the per-step scores, one value per policy token (1e-5)', async () => {
    const engine = makeEngine(31);
    const eps = [episode(0), episode(2)];
    const packed = await engine.logprobs(
      eps.map((e) => e.packed),
      0.9,
    );
    const perStep = await engine.logprobs(
      eps.flatMap((e) => e.steps),
      0.9,
    );
    expect(packed[0]).toHaveLength(eps[0].packed.policyTokens.filter((x) => x === 1).length);
    expect(maxAbsDiff(packed.flat(), perStep.flat())).toBeLessThan(1e-5);
    engine.dispose();
  });

  for (const lora of [false, true]) {
    it(`trainStep on packed episodes equals the per-step batch: loss, stats (1e-5 relative) and updated weights (1e-5)${lora ? ', LoRA' : ''}`, async () => {
      const o = {
        optimizer: { lr: 1e-2, beta1: 0.9, beta2: 0.99, eps: 1e-3, weightDecay: 0.01 },
        maxGradNorm: 1,
        ...(lora ? { lora: { r: 4, alpha: 8, dropout: 0, targetModules: ['all-linear'] }, loraSeed: 3 } : {}),
      };
      const a = makeEngine(32, o);
      const b = makeEngine(32, o);
      if (lora)
        for (const e of [a, b])
          for (const { B } of e.model.lora!.modules.values()) tf.tidy(() => B.assign(tf.randomNormal(B.shape, 0, 0.2, 'float32', 5)));
      const eps = [episode(0), episode(1)];
      const steps = eps.flatMap((e) => e.steps);
      const current = await a.logprobs(steps);
      // Per token: old log-probs off by a wiggle (some ratios clipped), mixed advantages, masks, a reference.
      const perStep: TrainSequence[] = steps.map((s, i) => ({
        ...s,
        oldLogprobs: current[i].map((lp, j) => lp + 0.3 * Math.sin(3 * i + j)),
        advantages: s.response.map((_, j) => (i % 2 === 0 ? 1.2 : -0.6) + 0.1 * j),
        mask: s.response.map((_, j) => (i === 1 && j === 0 ? 0 : 1)),
        refLogprobs: current[i].map((lp, j) => lp - 0.2 * Math.cos(i + j)),
      }));
      // The packed form carries the same per-token values, concatenated per episode.
      const packed: TrainSequence[] = eps.map((e, k) => {
        const own = perStep.slice(3 * k, 3 * k + 3);
        return {
          ...e.packed,
          oldLogprobs: own.flatMap((s) => s.oldLogprobs),
          advantages: own.flatMap((s) => s.advantages),
          mask: own.flatMap((s) => s.mask),
          refLogprobs: own.flatMap((s) => s.refLogprobs!),
        };
      });
      const snap = (e: TfjsEngine) =>
        lora ? new Map([...e.model.lora!.variables()].map(([k, v]) => [k, Float32Array.from(v.dataSync())])) : paramsSnapshot(e.model);
      const before = snap(a);
      const sa = await a.trainStep(perStep, objective);
      const sb = await b.trainStep(packed, objective);
      const rel = (x: number, y: number) => Math.abs(x - y) / Math.max(1e-8, Math.abs(x));
      // Some tokens fall under δ and one is masked, so the count says both forms dropped the same ones.
      expect(sa.tokens).toBeGreaterThan(5);
      expect(sa.tokens).toBeLessThan(perStep.reduce((n, x) => n + x.response.length, 0));
      expect(sb.tokens).toBe(sa.tokens);
      for (const k of ['loss', 'clipFraction', 'meanRatio', 'kl', 'gradNorm'] as const) expect(rel(sa[k], sb[k])).toBeLessThan(1e-5);
      expect(sa.clipFraction).toBeGreaterThan(0);
      expect(maxParamDiff(before, snap(a))).toBeGreaterThan(1e-3);
      expect(maxParamDiff(snap(a), snap(b))).toBeLessThan(1e-5);
      a.dispose();
      b.dispose();
    });
  }

  it('the low-probability mask and the δ threshold apply per policy token as they do per step', async () => {
    const a = makeEngine(33);
    const b = makeEngine(33);
    const e = episode(0);
    const current = await a.logprobs(e.steps);
    const perStep: TrainSequence[] = e.steps.map((s, i) => ({
      ...s,
      oldLogprobs: current[i],
      advantages: s.response.map(() => 1),
      mask: s.response.map(() => 1),
    }));
    const packed: TrainSequence = {
      ...e.packed,
      oldLogprobs: current.flat(),
      advantages: current.flat().map(() => 1),
      mask: current.flat().map(() => 1),
    };
    const sa = await a.trainStep(perStep, objective);
    const sb = await b.trainStep([packed], objective);
    expect(sb.tokens).toBe(sa.tokens);
    expect(Math.abs(sa.loss - sb.loss)).toBeLessThan(1e-5 * Math.max(1, Math.abs(sa.loss)));
    a.dispose();
    b.dispose();
  });

  it('refuses malformed packed sequences, naming the sequence and the array', async () => {
    const engine = makeEngine(34);
    const e = episode(0).packed;
    const n = e.policyTokens.filter((x) => x === 1).length;
    const seq = (o: Partial<TrainSequence>): TrainSequence => ({
      ...e,
      oldLogprobs: Array(n).fill(-1),
      advantages: Array(n).fill(1),
      mask: Array(n).fill(1),
      ...o,
    });
    await expect(engine.logprobs([{ ...e, policyTokens: e.policyTokens.slice(1) }])).rejects.toThrow(
      `logprobs: sequence 0: policyTokens has ${e.response.length - 1} entries but the response has ${e.response.length} tokens`,
    );
    await expect(engine.logprobs([{ ...e, policyTokens: e.policyTokens.map((x) => x * 2) }])).rejects.toThrow(
      /policyTokens\[0\] is 2, not 0 or 1/,
    );
    await expect(engine.trainStep([seq({}), seq({ advantages: Array(e.response.length).fill(1) })], objective)).rejects.toThrow(
      `trainStep: sequence 1: "advantages" has ${e.response.length} values, expected ${n} (one per policy token)`,
    );
    await expect(
      engine.trainStep([{ prompt: [3], response: [4, 5], oldLogprobs: [-1], advantages: [1, 1], mask: [1, 1] }], objective),
    ).rejects.toThrow('trainStep: sequence 0: "oldLogprobs" has 1 values, expected 2 (one per response token)');
    engine.dispose();
  });
});

describe('memory-bounded passes', () => {
  const seqs = () => [
    {
      prompt: prompt('You are in the hall. You see a red box, a blue drawer and a door to the kitchen.'),
      response: tokenizer.encode('open red box').concat(IM_END_ID),
    },
    {
      prompt: prompt('go'),
      response: tokenizer.encode('take yellow hat'),
      policyTokens: tokenizer.encode('take yellow hat').map((_, j) => (j % 3 === 1 ? 0 : 1)),
    },
    { prompt: [5, 6], response: [17, 200, 3, 3, 42] },
  ];

  /** The plain computation: Qwen2Model.forward over everything, the output layer on every scored row at once. */
  function plainLogprobs(model: Qwen2Model, batch: ReturnType<typeof seqs>, temperature: number): tf.Tensor1D {
    const B = batch.length;
    const L = Math.max(...batch.map((s) => s.prompt.length + s.response.length));
    const ids = new Int32Array(B * L).fill(EOT_ID);
    const pos = new Int32Array(B * L);
    const rows: number[] = [];
    const targets: number[] = [];
    batch.forEach((s, b) => {
      [...s.prompt, ...s.response].forEach((t, j) => ((ids[b * L + j] = t), (pos[b * L + j] = j)));
      s.response.forEach((t, j) => {
        if (s.policyTokens && s.policyTokens[j] === 0) return;
        rows.push(b * L + s.prompt.length + j - 1);
        targets.push(t);
      });
    });
    const causal = new Float32Array(L * L).map((_, i) => (i % L <= Math.floor(i / L) ? 0 : -1e9));
    const { hidden } = model.forward(
      tf.tensor2d(ids, [B, L], 'int32'),
      tf.tensor2d(pos, [B, L], 'int32'),
      tf.tensor4d(causal, [1, 1, L, L]),
    );
    const logits = model.logits(tf.gather(hidden.reshape([B * L, hidden.shape[2]]), rows) as tf.Tensor2D).div(temperature) as tf.Tensor2D;
    const V = logits.shape[1];
    return tf
      .gather(
        logits.reshape([-1]),
        targets.map((t, i) => i * V + t),
      )
      .sub(tf.logSumExp(logits, 1)) as tf.Tensor1D;
  }

  for (const [lora, checkpoint] of [
    [false, false],
    [false, true],
    [true, true],
  ] as const) {
    it(`${checkpoint ? 'checkpointed layers, ' : ''}attention in query chunks and the output layer in row chunks give the plain pass's log-probs and gradients (1e-5)${lora ? ', LoRA with dropout' : ''}`, () => {
      const model = makeModel(41, { tie_word_embeddings: lora });
      if (lora) {
        model.attachLora({ r: 4, alpha: 8, dropout: 0.3, targetModules: ['all-linear'] }, 2);
        for (const { B } of model.lora!.modules.values()) tf.tidy(() => B.assign(tf.randomNormal(B.shape, 0, 0.3, 'float32', 9)));
        model.training = true; // dropout on: the recomputation must replay the forward pass's masks
      }
      const vars = [...model.trainableParams().values()];
      const batch = seqs();
      const n = batch.reduce((a, s) => a + (s.policyTokens ? s.policyTokens.filter((x) => x === 1).length : s.response.length), 0);
      const weights = Array.from({ length: n }, (_, i) => Math.sin(i + 1));
      const run = (f: () => tf.Tensor1D) => {
        if (model.lora) model.lora.dropoutCalls = 0;
        let values: number[] = [];
        const { value, grads } = tf.variableGrads(() => {
          const lp = f();
          values = Array.from(lp.dataSync());
          return lp.mul(weights).sum() as tf.Scalar;
        }, vars);
        value.dispose();
        const g = vars.map((v) => Float32Array.from(grads[v.name].dataSync()));
        tf.dispose(Object.values(grads));
        return { values, g };
      };
      const plain = run(() => plainLogprobs(model, batch, 0.8));
      // Chunks of 2 query times (of ~25) and of 3 scored rows: every chunked path runs many times.
      const chunked = run(() =>
        responseLogprobs(
          model,
          batch,
          0.8,
          EOT_ID,
          { attentionElements: 2 * 4 * 30, logitElements: 3 * tokenizer.vocabSize, prefillTokens: 1 },
          { differentiable: true, checkpoint },
        ),
      );
      expect(chunked.values).toHaveLength(n);
      expect(maxAbsDiff(chunked.values, plain.values)).toBeLessThan(1e-5);
      plain.g.forEach((g, k) => {
        const scale = g.reduce((m, x) => Math.max(m, Math.abs(x)), 0);
        expect(scale).toBeGreaterThan(1e-4);
        expect(maxAbsDiff(Array.from(chunked.g[k]), Array.from(g))).toBeLessThan(1e-5 * Math.max(1, scale));
      });
      model.training = false;
      model.dispose();
    });
  }

  it('a micro-batch whose activations would not fit un-checkpointed is trained with checkpointed layers, to the same update', async () => {
    const o = {
      optimizer: { lr: 1e-2, beta1: 0.9, beta2: 0.99, eps: 1e-3, weightDecay: 0 },
      maxGradNorm: 1,
      chunks: { attentionElements: 4096, logitElements: 4096, prefillTokens: 64 },
    };
    const roomy = makeEngine(43, o);
    const tight = makeEngine(43, o);
    const batch: TrainSequence[] = [
      prompt('You are in the hall. You see a red box, a blue drawer and a door to the kitchen.'),
      prompt('go to kitchen'),
    ].map((p, i) => ({
      prompt: p,
      response: [40 + i, 41, 42, IM_END_ID],
      advantages: [1, -1, 0.5, 1],
      oldLogprobs: [-5, -5, -5, -5],
      mask: [1, 1, 1, 1],
    }));
    const tokens = 2 * Math.max(...batch.map((s) => s.prompt.length + s.response.length));
    const c = tight.model.config;
    // Room for the checkpointed pass, not for every layer's activations.
    (tight.options as EngineOptions).memoryLimitBytes =
      tf.memory().numBytes +
      (chunkReserveBytes({ attentionElements: 4096, logitElements: 4096, prefillTokens: 64 }) +
        1.2 * tokens * trainingBytesPerToken(c, null)) /
        HEAP_SAFETY;
    expect(1.2 * trainingBytesPerToken(c, null)).toBeLessThan(plainTrainingBytesPerToken(c, null));
    const passes: boolean[] = [];
    for (const e of [roomy, tight]) {
      const original = e.model.hiddenStates.bind(e.model);
      vi.spyOn(e.model, 'hiddenStates').mockImplementation((...args) => (passes.push(args[4].checkpoint), original(...args)));
    }
    const objective: ObjectiveConfig = { clipLow: 0.2, clipHigh: 0.3, dualClip: 3, klCoef: 0, lowProbDelta: null };
    const [sa, sb] = [await roomy.trainStep(batch, objective), await tight.trainStep(batch, objective)];
    expect(passes).toEqual([false, true]);
    expect(Math.abs(sa.loss - sb.loss)).toBeLessThan(1e-6);
    expect(maxParamDiff(paramsSnapshot(roomy.model), paramsSnapshot(tight.model))).toBeLessThan(1e-5);
    roomy.dispose();
    tight.dispose();
  });

  it('an engine with tiny chunks (prefill 5 tokens, attention and logits in small pieces) generates, scores and trains as one with the defaults', async () => {
    const chunks = { attentionElements: 3 * 4 * 40, logitElements: 2 * tokenizer.vocabSize, prefillTokens: 5 };
    const o = { optimizer: { lr: 1e-2, beta1: 0.9, beta2: 0.99, eps: 1e-3, weightDecay: 0 }, maxGradNorm: 1 };
    const small = makeEngine(42, { ...o, chunks });
    const big = makeEngine(42, o);
    const ps = [
      prompt('You are in the hall. You see a red box, a blue drawer and a door to the kitchen.'),
      prompt('go'),
      prompt('Task: Find the yellow hat.'),
    ];
    for (const keys of [undefined, ['a', 'b', 'c']]) {
      for (const step of [0, 1]) {
        const opts = { temperature: 1, topP: 1, maxTokens: 6, seed: step, cacheKeys: keys };
        const [a, b] = [await small.generate(ps, opts), await big.generate(ps, opts)];
        expect(a.map((g) => g.tokens)).toEqual(b.map((g) => g.tokens));
        a.forEach((g, i) => expect(maxAbsDiff(g.logprobs, b[i].logprobs)).toBeLessThan(1e-5));
        ps.forEach((p, i) => p.push(...a[i].tokens, ...prompt('Nothing happens.')));
      }
    }
    const batch = ps.map((p) => ({ prompt: p.slice(0, 20), response: p.slice(20) }));
    const [la, lb] = [await small.logprobs(batch), await big.logprobs(batch)];
    la.forEach((row, i) => expect(maxAbsDiff(row, lb[i])).toBeLessThan(1e-5));
    const train = batch.map((s, i) => ({
      ...s,
      oldLogprobs: la[i].map((x) => x + 0.1),
      advantages: la[i].map((_, j) => (j % 2 ? 1 : -0.5)),
      mask: la[i].map(() => 1),
    }));
    const objective: ObjectiveConfig = { clipLow: 0.2, clipHigh: 0.3, dualClip: 3, klCoef: 0, lowProbDelta: null };
    const [sa, sb] = [await small.trainStep(train, objective), await big.trainStep(train, objective)];
    expect(Math.abs(sa.loss - sb.loss)).toBeLessThan(1e-5 * Math.max(1, Math.abs(sb.loss)));
    expect(maxParamDiff(paramsSnapshot(small.model), paramsSnapshot(big.model))).toBeLessThan(1e-5);
    small.dispose();
    big.dispose();
  });
});
