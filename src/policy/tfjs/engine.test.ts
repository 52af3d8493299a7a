/**
 * The engine against slow, obviously-correct recomputations: scoring vs one unpadded forward pass
 * per prefix, KV-cache decoding vs recomputing the whole sequence every step, autodiff vs central
 * finite differences, micro-batched vs whole-batch updates, save/load round trips.
 *
 * Models are tiny (hidden 32, 2 layers, 4 query / 2 key-value heads, vocabulary ~300) with weights
 * drawn wider than a real init (std 0.3, biases and norm weights perturbed too) so attention and
 * the output distribution are far from uniform and every code path carries signal.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync, readFileSync, rmSync, truncateSync, statSync, unlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { initBackend, tf } from './backend.ts';
import { Qwen2Model, type ModelConfig } from './qwen2.ts';
import { TfjsEngine, responseLogprobs, type EngineOptions } from './engine.ts';
import { loadModelDir, saveModelDir } from './checkpoint.ts';
import { trainByteLevelBPE, Tokenizer } from '../tokenizer.ts';
import { objectiveTerms, type ObjectiveConfig } from '../../algo/objective.ts';
import { CHAT_SPECIAL_TOKENS, IM_END, END_OF_TEXT } from '../../trainer/prompt.ts';
import type { TrainSequence } from '../types.ts';

const CORPUS = [
  'You are in the hall. You see a red box, a blue drawer and a door to the kitchen.',
  'go to kitchen', 'go to hall', 'go to pantry', 'open red box', 'open blue drawer', 'take yellow hat',
  'take red key', 'put yellow hat in red box', 'look around', 'inventory', 'turn on lamp', 'read note',
  'The red box is open. Inside it: a yellow hat.', 'You take the yellow hat.', 'Task: Find the yellow hat and bring it to the pantry.',
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
      const { hidden } = model.forward(tf.tensor2d(prefix, [1, n], 'int32'), tf.tensor2d([...prefix.keys()], [1, n], 'int32'), tf.tensor4d(causal, [1, 1, n, n]));
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
  tokenizer = Tokenizer.fromJSON(trainByteLevelBPE(CORPUS, { vocabSize: 300, specialTokens: CHAT_SPECIAL_TOKENS }), 'engine test tokenizer');
  IM_END_ID = tokenizer.requireTokenId(IM_END);
  EOT_ID = tokenizer.requireTokenId(END_OF_TEXT);
});

afterAll(() => {
  for (const d of tmpDirs) rmSync(d, { recursive: true, force: true });
});

describe('scoring: logprobs()', () => {
  const batch = () => [
    { prompt: prompt('go'), response: tokenizer.encode('open red box').concat(IM_END_ID) },
    { prompt: prompt('You are in the hall. You see a red box, a blue drawer and a door to the kitchen.'), response: tokenizer.encode('take yellow hat') },
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
  const prompts = () => [prompt('go'), prompt('You are in the hall. You see a red box.'), prompt('Task: Find the yellow hat and bring it to the pantry. You are in the hall.')];

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
    const allowed = [['open red box', 'open blue drawer', 'go to kitchen'], null, ['take yellow hat', 'take red key', 'look around', 'inventory']];
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
    const scored = await engine.logprobs(ps.map((p, i) => ({ prompt: p, response: gens[i].tokens })), 0.8);
    gens.forEach((g, i) => expect(maxAbsDiff(g.logprobs, scored[i])).toBeLessThan(1e-4));
    engine.dispose();
  });

  it('constrained decoding only ever produces one of the allowed texts, ending in the end token (40 draws at T = 1.5)', async () => {
    const engine = makeEngine(8);
    // Shared prefixes ("go to ...", "open ..."), and one text a prefix of another.
    const allowed = ['go to kitchen', 'go to hall', 'go to pantry', 'open red box', 'open blue drawer', 'look', 'look around', 'put yellow hat in red box'];
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
    const gens = await engine.generate([prompt('go')], { temperature: 1, topP: 1, maxTokens: 2, seed: 1, allowedTexts: [['put yellow hat in red box']] });
    expect(gens[0].tokens).toHaveLength(2);
    expect(gens[0].finish).toBe('length');
    await engine.generate(prompts(), { temperature: 1, topP: 1, maxTokens: 5, seed: 1 });
    expect(tf.memory().numTensors).toBe(before);
    engine.dispose();
  });

  it('refuses an empty prompt, naming its index', async () => {
    const engine = makeEngine(1);
    await expect(engine.generate([prompt('go'), []], { temperature: 1, topP: 1, maxTokens: 2, seed: 1 })).rejects.toThrow(/prompt 1 is empty/);
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

  it('a positive advantage raises the sampled response\'s log-prob; a negative one lowers it', async () => {
    for (const sign of [1, -1]) {
      const engine = makeEngine(11);
      const p = prompt('You are in the hall.');
      const [g] = await engine.generate([p], { temperature: 1, topP: 1, maxTokens: 8, seed: 3 });
      const seq = { prompt: p, response: g.tokens };
      const before = (await engine.logprobs([seq]))[0].reduce((a, b) => a + b, 0);
      const stats = await engine.trainStep([{ ...seq, advantages: g.tokens.map(() => sign), oldLogprobs: g.logprobs, mask: g.tokens.map(() => 1) }], objective);
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
    await a.trainStep([{ prompt: p, response: g.tokens, advantages: g.tokens.map(() => 1), oldLogprobs: g.logprobs, mask: g.tokens.map(() => 1) }], objective);
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
    const seqs = [{ prompt: prompt('go'), response: tokenizer.encode('look around') }, { prompt: [1, 2, 3], response: [4, 5] }];
    const logitsOf = (m: Qwen2Model) => tf.tidy(() => Array.from(responseLogprobs(m, seqs, 1, EOT_ID).dataSync()));
    expect(logitsOf(loaded.model)).toEqual(logitsOf(engine.model));
    for (const [name, v] of engine.model.params) expect(Array.from(loaded.model.params.get(name)!.dataSync())).toEqual(Array.from(v.dataSync()));
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
      expect(() => loadModelDir(d)).toThrow(`${join(d, 'model.safetensors')}: tensor "model.layers.0.mlp.gate_proj.weight" has shape [64,32] but config.json implies [48,32]`);
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
