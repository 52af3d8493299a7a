/**
 * The PyTorch worker on multi-step episodes: KV caches kept between an episode's generate calls
 * (cacheKeys) give what the same calls give without them, whether the next prompt extends the last,
 * changes a block in the middle (tips) or drops its front (a history window); packed episodes
 * (policyTokens) score and train exactly as the same steps sent one sequence each; stop strings end
 * a response at the first token after which its text contains one.
 *
 * Model: a tiny Qwen2 built and saved by our own code, weights drawn wide (std 0.3) so that
 * attention and the output distribution are far from uniform.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pythonGate } from '../../../test/support/python.ts';
import { saveRandomChatModel } from '../../../test/support/instruct-model.ts';
import { readSafetensorsDir, toFloat32 } from '../safetensors.ts';
import type { Tokenizer } from '../tokenizer.ts';
import type { ObjectiveConfig } from '../../algo/objective.ts';
import { IM_END, END_OF_TEXT } from '../chat-tokens.ts';
import type { GenerateOptions, Generation, ScoredSequence, TrainSequence } from '../types.ts';
import { TorchEngine, type TorchEngineOptions } from './engine.ts';

const gate = pythonGate(['torch', 'transformers']);

const CORPUS = [
  'You are in the hall. You see a red box, a blue drawer and a door to the kitchen.',
  'go to kitchen',
  'go to hall',
  'open red box',
  'open blue drawer',
  'take yellow hat',
  'take red key',
  'The red box is open. Inside it: a yellow hat.',
  'You take the yellow hat.',
  'Task: Find the yellow hat → café.',
  '<tip>',
  '</tip>',
  'Tip: the hat was in the box (score 0.5).',
];

/** With and without cached prefixes: the same computation in other matrix shapes (fp32 rounding). */
const REUSE_LOGPROB_TOL = 1e-5;
/** Packed against per-step sequences: the same causal computation, rounded differently. */
const PACKED_REL_TOL = 1e-5;

let tokenizer: Tokenizer;
let IM_END_ID: number;
let EOT_ID: number;
let modelDir: string;
const tmpDirs: string[] = [];

function tempDir(): string {
  const d = mkdtempSync(join(tmpdir(), 'empo2-torch-episodes-'));
  tmpDirs.push(d);
  return d;
}

function options(o: Partial<TorchEngineOptions> = {}): TorchEngineOptions {
  return {
    modelDir,
    optimizer: { lr: 1e-3, beta1: 0.9, beta2: 0.99, eps: 1e-6, weightDecay: 0.01 },
    maxGradNorm: 0,
    microBatchTokens: 100_000,
    endTokens: [IM_END_ID, EOT_ID],
    padToken: EOT_ID,
    threads: 1,
    ...o,
  };
}

const enc = (text: string) => tokenizer.encode(text);

interface EpisodeState {
  task: string;
  /** Per step: the response tokens and the observation that followed. */
  turns: { response: number[]; observation: string }[];
}

type Variant = 'extend' | 'tips' | 'window';

/**
 * Step t's prompt, built as the trainer builds it: the task and first observation, then per turn the
 * sampled response tokens and the next observation; with 'tips' a tip block (new text every step) in
 * the current user turn only, so the last step's tips sit in the middle of what its cache holds;
 * with 'window' only the last two turns, so the front of the history changes once it slides.
 */
function promptOf(e: EpisodeState, variant: Variant, step: number): number[] {
  const ids = enc(`<|im_start|>user\nTask: ${e.task}\nYou are in the hall.`);
  const turns = variant === 'window' ? e.turns.slice(-2) : e.turns;
  for (const t of turns)
    ids.push(...enc('<|im_end|>\n<|im_start|>assistant\n'), ...t.response, ...enc(`\n<|im_start|>user\n${t.observation}`));
  if (variant === 'tips') ids.push(...enc(`\n\n<tip> Tip: take red key (score 0.${step % 10}). </tip>`));
  ids.push(...enc('<|im_end|>\n<|im_start|>assistant\n'));
  return ids;
}

const OBSERVATIONS = [
  'The red box is open. Inside it: a yellow hat.',
  'You take the yellow hat.',
  'You see a red box, a blue drawer.',
  'go to kitchen',
  'Nothing happens.',
];
const ACTIONS = ['go to kitchen', 'open red box', 'take yellow hat', 'take red key', 'open blue drawer'];

/**
 * Runs 4 lockstep episodes of `steps` steps, each call made twice on the same worker: without keys
 * and with them. Episodes 0 and 1 are constrained to the actions, 2 and 3 are free text. Returns the
 * largest log-prob difference and whether every token agreed.
 */
async function compareEpisodes(engine: TorchEngine, variant: Variant, sampling: Pick<GenerateOptions, 'temperature' | 'topP'>, steps = 5) {
  const episodes: EpisodeState[] = ['Find the yellow hat.', 'Open the blue drawer.', 'Go to the kitchen.', 'Take the red key → café.'].map(
    (task) => ({ task, turns: [] }),
  );
  const keys = episodes.map((_, i) => `${variant}-${sampling.temperature}-${i}`);
  let maxDiff = 0;
  let sameTokens = true;
  let promptTokens = 0;
  for (let step = 0; step < steps; step++) {
    const prompts = episodes.map((e) => promptOf(e, variant, step));
    promptTokens += prompts.reduce((n, p) => n + p.length, 0);
    const opts: GenerateOptions = { ...sampling, maxTokens: 6, seed: 40 + step, allowedTexts: [ACTIONS, ACTIONS.slice(1), null, null] };
    const plain = await engine.generate(prompts, opts);
    const cached = await engine.generate(prompts, { ...opts, cacheKeys: keys });
    plain.forEach((g, i) => {
      if (JSON.stringify(g.tokens) !== JSON.stringify(cached[i].tokens)) sameTokens = false;
      else maxDiff = Math.max(maxDiff, ...g.logprobs.map((lp, j) => Math.abs(lp - cached[i].logprobs[j])));
    });
    episodes.forEach((e, i) => e.turns.push({ response: plain[i].tokens, observation: OBSERVATIONS[(step + i) % OBSERVATIONS.length] }));
  }
  engine.releaseCache(keys);
  return { maxDiff, sameTokens, promptTokens };
}

beforeAll(async () => {
  if (!gate.available) return;
  modelDir = tempDir();
  tokenizer = await saveRandomChatModel(modelDir, { corpus: CORPUS, vocabSize: 320, seed: 23, label: 'episodes test tokenizer' });
  IM_END_ID = tokenizer.requireTokenId(IM_END);
  EOT_ID = tokenizer.requireTokenId(END_OF_TEXT);
});

afterAll(() => {
  for (const d of tmpDirs) rmSync(d, { recursive: true, force: true });
});

describe.skipIf(!gate.available)(`prefix (KV) reuse across an episode's steps (${gate.label})`, () => {
  let engine: TorchEngine;
  beforeAll(async () => {
    engine = await TorchEngine.start(options());
  }, 120_000);
  afterAll(async () => {
    await engine?.close();
  });

  for (const variant of ['extend', 'tips', 'window'] as const) {
    for (const sampling of [
      { temperature: 0, topP: 1 },
      { temperature: 0.9, topP: 0.9 },
    ]) {
      it(`${variant}, temperature ${sampling.temperature}: the same tokens, log-probs within ${REUSE_LOGPROB_TOL}, fewer tokens prefilled`, async () => {
        const p0 = engine.prefill.prefilledTokens;
        const r0 = engine.prefill.reusedTokens;
        const { maxDiff, sameTokens, promptTokens } = await compareEpisodes(engine, variant, sampling);
        expect(sameTokens).toBe(true);
        expect(maxDiff).toBeLessThan(REUSE_LOGPROB_TOL);
        // Half of all prefills ran without keys (every prompt token); the keyed half reused some.
        const reused = engine.prefill.reusedTokens - r0;
        const prefilled = engine.prefill.prefilledTokens - p0;
        expect(prefilled + reused).toBe(2 * promptTokens);
        // 'extend' reuses all but the new turn, 'tips' all but the last tip block and what followed
        // it, 'window' the task and, once the window slides, nothing after it.
        console.log(
          `[${variant} T=${sampling.temperature}] reused ${reused} of ${promptTokens} prompt tokens, max |Δ logprob| ${maxDiff.toExponential(2)}`,
        );
        expect(reused).toBeGreaterThan({ extend: 0.6, tips: 0.35, window: 0.3 }[variant] * promptTokens);
      }, 60_000);
    }
  }

  it('one call mixing rows with long and short new parts (an episode joins, one was evicted) equals the call without keys', async () => {
    const base = (task: string) =>
      enc(
        `<|im_start|>user\nTask: ${task}\nYou are in the hall. You see a red box, a blue drawer and a door to the kitchen.<|im_end|>\n<|im_start|>assistant\n`,
      );
    const prompts = ['Find the yellow hat.', 'Open the blue drawer.', 'Go to the kitchen.'].map(base);
    const opts: GenerateOptions = { temperature: 0.9, topP: 1, maxTokens: 5, seed: 2, cacheKeys: ['m0', 'm1', 'm2'] };
    const first = await engine.generate(prompts, opts);
    engine.releaseCache(['m1']);
    const next = prompts.map((p, i) => [
      ...p,
      ...first[i].tokens,
      ...enc(`\n<|im_start|>user\n${OBSERVATIONS[i]}<|im_end|>\n<|im_start|>assistant\n`),
    ]);
    next.push(base('Take the red key and open the red box, then go to the kitchen.'));
    const keys = ['m0', 'm1', 'm2', 'm3'];
    const r0 = engine.prefill.reusedTokens;
    const keyed = await engine.generate(next, { ...opts, seed: 3, cacheKeys: keys });
    // m0 and m2 reuse their last prompt and response (its last token too when it was run through
    // the model, i.e. when another row kept decoding); m1 (released) and m3 (new) prefill everything.
    const held = [0, 2].reduce((n, i) => n + prompts[i].length + first[i].tokens.length, 0);
    expect(engine.prefill.reusedTokens - r0).toBeGreaterThanOrEqual(held - 2);
    expect(engine.prefill.reusedTokens - r0).toBeLessThanOrEqual(held);
    const plain = await engine.generate(next, { ...opts, seed: 3, cacheKeys: undefined });
    keyed.forEach((g, i) => {
      expect(g.tokens).toEqual(plain[i].tokens);
      g.logprobs.forEach((lp, j) => expect(Math.abs(lp - plain[i].logprobs[j])).toBeLessThan(REUSE_LOGPROB_TOL));
    });
    engine.releaseCache(keys);
  }, 60_000);

  it('releaseCache drops the keys; a train step drops every cache (its keys and values are of the old weights)', async () => {
    const prompts = [
      enc('<|im_start|>user\nTask: Find the yellow hat.<|im_end|>\n<|im_start|>assistant\n'),
      enc('<|im_start|>user\ngo to hall<|im_end|>\n<|im_start|>assistant\n'),
    ];
    const opts: GenerateOptions = { temperature: 0, topP: 1, maxTokens: 4, seed: 1, cacheKeys: ['a', 'b'] };
    await engine.generate(prompts, opts);
    expect((await engine.cacheInfo()).keys).toBe(2);
    engine.releaseCache(['a']);
    expect((await engine.cacheInfo()).keys).toBe(1);
    const first = await engine.generate(prompts, opts);
    const seqs: TrainSequence[] = first.map((g, i) => ({
      prompt: prompts[i],
      response: g.tokens,
      advantages: g.tokens.map(() => (i === 0 ? 1 : -1)),
      oldLogprobs: g.logprobs,
      mask: g.tokens.map(() => 1),
    }));
    const stats = await engine.trainStep(seqs, { clipLow: 0.2, clipHigh: 0.28, dualClip: null, klCoef: 0, lowProbDelta: null }, 1, 0.05);
    expect(stats.gradNorm).toBeGreaterThan(0);
    expect((await engine.cacheInfo()).keys).toBe(0);
    const reusedBefore = engine.prefill.reusedTokens;
    const extended = prompts.map((p, i) => [
      ...p,
      ...first[i].tokens,
      ...enc('\n<|im_start|>user\nYou take the yellow hat.<|im_end|>\n<|im_start|>assistant\n'),
    ]);
    const keyed = await engine.generate(extended, opts);
    expect(engine.prefill.reusedTokens).toBe(reusedBefore);
    const plain = await engine.generate(extended, { ...opts, cacheKeys: undefined });
    keyed.forEach((g, i) => {
      expect(g.tokens).toEqual(plain[i].tokens);
      g.logprobs.forEach((lp, j) => expect(Math.abs(lp - plain[i].logprobs[j])).toBeLessThan(REUSE_LOGPROB_TOL));
    });
    engine.releaseCache(['a', 'b']);
  }, 60_000);

  it('bad keys are refused with the field named', async () => {
    const p = enc('<|im_start|>user\ngo<|im_end|>\n');
    await expect(engine.generate([p, p], { temperature: 0, topP: 1, maxTokens: 2, seed: 0, cacheKeys: ['x', 'x'] })).rejects.toThrow(
      /generate\.cache_keys\[1\] repeats "x" \(also cache_keys\[0\]\)/,
    );
    await expect(engine.generate([p, p], { temperature: 0, topP: 1, maxTokens: 2, seed: 0, cacheKeys: ['x'] })).rejects.toThrow(
      /1 cache keys for 2 prompts/,
    );
  });
});

describe.skipIf(!gate.available)(`the kept caches are bounded (${gate.label})`, () => {
  it('a small kvCacheMb keeps fewer keys, never more bytes than allowed, and results do not change', async () => {
    const engine = await TorchEngine.start(options({ kvCacheMb: 0.03 }));
    try {
      const perToken = engine.info.kv_cache.bytes_per_token;
      expect(perToken).toBe(2 * 2 * 2 * 8 * 4); // layers x (k, v) x kv heads x head dim x fp32
      expect(engine.info.kv_cache.max_bytes).toBe(Math.floor(0.03 * 2 ** 20));
      const { maxDiff, sameTokens } = await compareEpisodes(engine, 'extend', { temperature: 0.9, topP: 1 }, 4);
      expect(sameTokens).toBe(true);
      expect(maxDiff).toBeLessThan(REUSE_LOGPROB_TOL);
      // Four episodes of ~100-200 tokens do not fit in ~120 tokens' worth: some were evicted.
      const prompts = [0, 1, 2, 3].map((i) =>
        enc(`<|im_start|>user\nTask: ${OBSERVATIONS[i]} ${OBSERVATIONS[i + 1]}<|im_end|>\n<|im_start|>assistant\n`),
      );
      await engine.generate(prompts, { temperature: 0, topP: 1, maxTokens: 3, seed: 0, cacheKeys: ['p', 'q', 'r', 's'] });
      const info = await engine.cacheInfo();
      expect(info.bytes).toBeLessThanOrEqual(info.max_bytes);
      expect(info.keys).toBeGreaterThan(0);
      expect(info.keys).toBeLessThan(4);
    } finally {
      await engine.close();
    }
  }, 120_000);
});

// ---------------------------------------------------------------------- packed episodes

interface PackedCase {
  perStep: TrainSequence[];
  packed: TrainSequence[];
}

/**
 * Greedy 3-step episodes from three prompts: each step's sequence (prompt_t, response_t), and the
 * episode packed as prompt_1 + [response_1, observation_2, response_2, …] with policyTokens marking
 * the responses. Per-token values differ by step and by token so a misaligned value changes the
 * result; one episode is sent both ways, the others only packed or only per step.
 */
async function packedCase(engine: TorchEngine): Promise<PackedCase> {
  const tasks = ['Find the yellow hat.', 'Open the blue drawer.', 'Take the red key.'];
  const perStep: TrainSequence[][] = [];
  const packed: TrainSequence[] = [];
  for (const [e, task] of tasks.entries()) {
    const first = enc(`<|im_start|>user\nTask: ${task}\nYou are in the hall.<|im_end|>\n<|im_start|>assistant\n`);
    let prompt = first;
    const steps: TrainSequence[] = [];
    const body: number[] = [];
    const policy: number[] = [];
    for (let t = 0; t < 3; t++) {
      const [g]: Generation[] = await engine.generate([prompt], {
        temperature: 0,
        topP: 1,
        maxTokens: 5,
        seed: 0,
        allowedTexts: [ACTIONS],
      });
      const n = g.tokens.length;
      steps.push({
        prompt,
        response: g.tokens,
        // Mostly positive, so that the loss is not a near-cancelling sum (its relative error would
        // then measure fp32 summation, not the computation).
        advantages: g.tokens.map((_, j) => (e === 1 ? -0.3 : 1) * (0.5 + 0.3 * t - 0.1 * j)),
        // Shifted both ways so that ratios leave [1-ε_low, 1+ε_high] on both sides.
        oldLogprobs: g.logprobs.map((lp, j) => lp + 0.4 * Math.sin(3 * t + j + e)),
        mask: g.tokens.map((_, j) => (t === 1 && j === 0 ? 0 : 1)),
        refLogprobs: g.logprobs.map((lp, j) => lp - 0.2 * Math.cos(t + j)),
      });
      const observation = enc(`\n<|im_start|>user\n${OBSERVATIONS[(t + e) % OBSERVATIONS.length]}<|im_end|>\n<|im_start|>assistant\n`);
      body.push(...g.tokens);
      policy.push(...g.tokens.map(() => 1));
      if (t < 2) {
        body.push(...observation);
        policy.push(...observation.map(() => 0));
      }
      prompt = [...prompt, ...g.tokens, ...observation];
      expect(n).toBeGreaterThan(0);
    }
    perStep.push(steps);
    const cat = (pick: (s: TrainSequence) => number[]) => steps.flatMap(pick);
    packed.push({
      prompt: first,
      response: body,
      policyTokens: policy,
      advantages: cat((s) => s.advantages),
      oldLogprobs: cat((s) => s.oldLogprobs),
      mask: cat((s) => s.mask),
      refLogprobs: cat((s) => s.refLogprobs!),
    });
  }
  return { perStep: perStep.flat(), packed };
}

/** δ = 1e-3 (log -6.9) drops about half of the tiny random model's tokens (log-probs -4 to -11). */
const OBJECTIVE: ObjectiveConfig = { clipLow: 0.2, clipHigh: 0.28, dualClip: 3, klCoef: 0.05, lowProbDelta: 1e-3 };
const rel = (a: number, b: number) => Math.abs(a - b) / Math.max(1e-12, Math.abs(a), Math.abs(b));

describe.skipIf(!gate.available)(`packed episodes (${gate.label})`, () => {
  it(`log-probs of a packed episode equal the per-step sequences' (max |Δ| < ${PACKED_REL_TOL}); bad flags are refused`, async () => {
    const engine = await TorchEngine.start(options());
    try {
      const { perStep, packed } = await packedCase(engine);
      const mixed: ScoredSequence[] = [packed[0], perStep[3], perStep[4], perStep[5], packed[2]];
      const a = (await engine.logprobs(mixed, 0.8)).flat();
      const b = (await engine.logprobs([...perStep.slice(0, 3), ...perStep.slice(3, 6), ...perStep.slice(6)], 0.8)).flat();
      expect(a).toHaveLength(b.length);
      expect(Math.max(...a.map((x, i) => Math.abs(x - b[i])))).toBeLessThan(PACKED_REL_TOL);
      const bad = { ...packed[0], policyTokens: packed[0].policyTokens!.slice(1) };
      await expect(engine.logprobs([bad])).rejects.toThrow(
        /logprobs\.batch\[0\]\.policy_tokens has \d+ flags but the response has \d+ tokens/,
      );
      await expect(engine.trainStep([{ ...packed[1], advantages: packed[1].response.map(() => 1) }], OBJECTIVE)).rejects.toThrow(
        /train_step\.batch\[0\]\.advantages has \d+ values but the sequence has \d+ policy tokens/,
      );
    } finally {
      await engine.close();
    }
  }, 120_000);

  it(`one train step on packed episodes equals the per-step batch: loss, statistics and gradients (through the updated weights) within ${PACKED_REL_TOL} relative`, async () => {
    // AdamW's first step moves a weight by lr·g/(|g| + ε); with ε = 1 and no decay that is a
    // monotone function of the gradient, nearly linear for small g, so equal updates mean equal gradients.
    const gradientLike = { optimizer: { lr: 1, beta1: 0.9, beta2: 0.99, eps: 1, weightDecay: 0 } };
    const packedEngine = await TorchEngine.start(options(gradientLike));
    const perStepEngine = await TorchEngine.start(options(gradientLike));
    try {
      const { perStep, packed } = await packedCase(packedEngine);
      const a = await packedEngine.trainStep(packed, OBJECTIVE, 0.9);
      const b = await perStepEngine.trainStep(perStep, OBJECTIVE, 0.9);
      expect(a.tokens).toBe(b.tokens);
      expect(a.tokens).toBeLessThan(perStep.reduce((n, s) => n + s.mask.reduce((x, y) => x + y, 0), 0)); // the δ mask dropped some
      for (const k of ['loss', 'clipFraction', 'meanRatio', 'kl', 'gradNorm'] as const)
        expect(rel(a[k], b[k]), k).toBeLessThan(PACKED_REL_TOL);
      expect(a.clipFraction).toBeGreaterThan(0);
      const [dirA, dirB] = [tempDir(), tempDir()];
      await packedEngine.save(dirA);
      await perStepEngine.save(dirB);
      const initial = weights(modelDir);
      const [wa, wb] = [weights(dirA), weights(dirB)];
      let maxStep = 0;
      let maxGap = 0;
      for (const [name, w0] of initial) {
        const [x, y] = [wa.get(name)!, wb.get(name)!];
        for (let i = 0; i < w0.length; i++) {
          maxStep = Math.max(maxStep, Math.abs(x[i] - w0[i]));
          maxGap = Math.max(maxGap, Math.abs(x[i] - y[i]));
        }
      }
      expect(maxStep).toBeGreaterThan(1e-2);
      expect(maxGap / maxStep).toBeLessThan(PACKED_REL_TOL);
    } finally {
      await packedEngine.close();
      await perStepEngine.close();
    }
  }, 180_000);
});

describe.skipIf(!gate.available)(`training memory on CPU (${gate.label})`, () => {
  it('an activation budget splits long packed episodes into more micro-batches without changing the step, and refuses one that cannot fit', async () => {
    const unbounded = await TorchEngine.start(options());
    try {
      const { packed } = await packedCase(unbounded);
      // The worker's estimate (engine.py activation_bytes) for the longest packed sequence: room for about one per micro-batch.
      const c = JSON.parse(readFileSync(join(modelDir, 'config.json'), 'utf8'));
      const width = Math.max(...packed.map((x) => x.prompt.length + x.response.length));
      const perToken = c.num_hidden_layers * (16 * c.hidden_size + 4 * c.intermediate_size + 2 * c.num_attention_heads * width) * 4;
      const bounded = await TorchEngine.start(options({ activationMb: (1.5 * width * perToken) / 2 ** 20 }));
      const small = { activationMb: (0.5 * width * perToken) / 2 ** 20 };
      const tooSmall = await TorchEngine.start(options({ ...small, gradientCheckpointing: false }));
      // gradient_checkpointing null (the default): switched on for this step, since the sequence does not
      // fit without it (the estimate with it is under 0.57x for this 2-layer model).
      const auto = await TorchEngine.start(options({ activationMb: (0.7 * width * perToken) / 2 ** 20 }));
      try {
        const a = await unbounded.trainStep(packed, OBJECTIVE, 0.9);
        const b = await bounded.trainStep(packed, OBJECTIVE, 0.9);
        const c = await auto.trainStep(packed, OBJECTIVE, 0.9);
        expect(b.tokens).toBe(a.tokens);
        expect(c.tokens).toBe(a.tokens);
        for (const k of ['loss', 'clipFraction', 'meanRatio', 'kl', 'gradNorm'] as const) {
          expect(rel(a[k], b[k]), k).toBeLessThan(PACKED_REL_TOL);
          expect(rel(a[k], c[k]), `${k} (checkpointing switched on)`).toBeLessThan(PACKED_REL_TOL);
        }
        await expect(tooSmall.trainStep(packed, OBJECTIVE, 0.9)).rejects.toThrow(
          /train_step: a \d+-token sequence needs about .* GiB of activations, over the .* budget \(activation_mb\); set model.torch.gradient_checkpointing: true/,
        );
        // The worker stays usable after the refusal.
        expect((await tooSmall.logprobs(packed.slice(0, 1), 1))[0].length).toBeGreaterThan(0);
      } finally {
        await bounded.close();
        await tooSmall.close();
        await auto.close();
      }
    } finally {
      await unbounded.close();
    }
  }, 180_000);
});

function weights(dir: string): Map<string, Float32Array> {
  return new Map([...readSafetensorsDir(dir).tensors].map(([k, t]) => [k, toFloat32(t)]));
}

// ---------------------------------------------------------------------- stop strings

describe.skipIf(!gate.available)(`stop strings (${gate.label})`, () => {
  /** The response text contains a stop string exactly when it stopped for one, and did not one token earlier. */
  function expectStoppedAtFirstMatch(g: Generation, stops: string[]): boolean {
    const ended = g.tokens.length > 0 && [IM_END_ID, EOT_ID].includes(g.tokens.at(-1)!);
    const text = tokenizer.decode(g.tokens);
    if (!ended) expect(stops.some((s) => text.includes(s))).toBe(g.finish === 'stop');
    expect(stops.some((s) => tokenizer.decode(g.tokens.slice(0, -1)).includes(s))).toBe(false);
    return g.finish === 'stop' && !ended;
  }

  it('a response stops at the first token after which its text contains a stop string, multi-byte ones included', async () => {
    const engine = await TorchEngine.start(options());
    try {
      const prompts = ['go', 'look', 'Task: café →', 'open red box', 'You take the yellow hat.', 'go to kitchen'].map((t) =>
        enc(`<|im_start|>user\n${t}<|im_end|>\n<|im_start|>assistant\n`),
      );
      // Free text: stop strings taken from what the same prompts produce without them, so they occur.
      const free = await engine.generate(prompts, { temperature: 1.6, topP: 1, maxTokens: 24, seed: 9 });
      const pieces = free
        .map((g) => g.text)
        .join('')
        .replace(/[^a-z]+/g, '');
      const stops = [pieces.slice(5, 7), pieces.slice(20, 22), pieces.slice(40, 42)];
      let stopped = 0;
      for (const seed of [9, 10, 11, 12]) {
        const gens = await engine.generate(prompts, { temperature: 1.6, topP: 1, maxTokens: 24, seed, stop: stops });
        for (const g of gens) if (expectStoppedAtFirstMatch(g, stops)) stopped++;
      }
      expect(stopped).toBeGreaterThanOrEqual(3);
      // Constrained to texts with 2- and 3-byte characters (split over byte tokens or not).
      const allowed = ['go to café → now', 'take the café key', 'open → box'];
      for (const stop of [['é'], ['→'], ['é →', 'key'], ['é k']]) {
        const gens = await engine.generate(prompts.slice(0, 3), {
          temperature: 1,
          topP: 1,
          maxTokens: 30,
          seed: 3,
          stop,
          allowedTexts: [allowed, allowed, allowed],
        });
        for (const g of gens) {
          const full = allowed.find((a) => a.startsWith(g.text.slice(0, 4)))!;
          expect(expectStoppedAtFirstMatch(g, stop)).toBe(stop.some((s) => full.includes(s)));
        }
      }
    } finally {
      await engine.close();
    }
  }, 120_000);
});
