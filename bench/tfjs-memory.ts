/**
 * Memory and speed of the TypeScript engine on a real model, one workload per process (the wasm
 * heap never shrinks, so its size at the end is the peak the workload needed):
 *
 *   npx tsx bench/tfjs-memory.ts <modelDir> gen   [rows] [promptTokens] [newTokens]   (default 4 × 1000, 8 new)
 *   npx tsx bench/tfjs-memory.ts <modelDir> score [rows] [tokens] [scored]             (default 16 × 300, last 20)
 *   npx tsx bench/tfjs-memory.ts <modelDir> lora  [rows] [tokens]                      (default 8 × 300, r = 16 all-linear)
 *   npx tsx bench/tfjs-memory.ts <modelDir> full  [rows] [tokens]                      (full fine-tuning step)
 *   npx tsx bench/tfjs-memory.ts <modelDir> episode [rows] [steps] [obsTokens] [firstPrompt] (growing prompts, with and without cacheKeys)
 *
 * Prints one JSON line: the workload, seconds, tokens/s, the wasm heap's size at the end (it only
 * grows: the peak reserved), the peak bytes of tensor buffers malloc'd during the workload above
 * what the loaded model held, or the error the engine stopped with. Asserts nothing.
 */
import type { BackendWasm } from '@tensorflow/tfjs-backend-wasm';
import { initBackend, loadModelDir, tf, TfjsEngine, type ObjectiveConfig, type TrainSequence } from '../src/internals.ts';

const [modelDir, mode = 'gen', ...rest] = process.argv.slice(2);
if (!modelDir) throw new Error('usage: npx tsx bench/tfjs-memory.ts <modelDir> gen|score|lora|full|episode [sizes...]');
const num = (i: number, fallback: number) => {
  if (rest[i] === undefined) return fallback;
  const v = Number(rest[i]);
  if (!Number.isInteger(v) || v <= 0) throw new Error(`argument ${i + 3} must be a positive integer, got ${rest[i]}`);
  return v;
};

const backend = await initBackend();
const heapBytes = () =>
  backend === 'wasm' ? ((tf.backend() as BackendWasm).wasm as unknown as { HEAPU8: Uint8Array }).HEAPU8.buffer.byteLength : NaN;
const GiB = (b: number) => +(b / 2 ** 30).toFixed(3);
const heapAtStart = heapBytes();
// Every tensor buffer goes through the wasm module's malloc/free: wrap them to see the live peak.
const tensorHeap = { live: 0, peak: 0 };
if (backend === 'wasm') {
  const wasm = (tf.backend() as BackendWasm).wasm as unknown as { _malloc: (n: number) => number; _free: (p: number) => void };
  wasm._free(wasm._malloc(16)); // emscripten binds these lazily, replacing the property on first call
  const malloc = wasm._malloc.bind(wasm);
  const free = wasm._free.bind(wasm);
  const sizes = new Map<number, number>();
  wasm._malloc = (n: number) => {
    const p = malloc(n);
    sizes.set(p >>> 0, n);
    tensorHeap.live += n;
    tensorHeap.peak = Math.max(tensorHeap.peak, tensorHeap.live);
    return p;
  };
  wasm._free = (p: number) => {
    tensorHeap.live -= sizes.get(p >>> 0) ?? 0;
    sizes.delete(p >>> 0);
    free(p);
  };
}
const lora = mode === 'lora' ? { r: 16, alpha: 32, dropout: 0.05, targetModules: ['all-linear'] } : undefined;
const { model, tokenizer } = loadModelDir(modelDir, { lora });
const eos = typeof model.config.eos_token_id === 'number' ? model.config.eos_token_id : 2;
const engine = new TfjsEngine(model, tokenizer, {
  optimizer: { lr: 1e-5, beta1: 0.9, beta2: 0.99, eps: 1e-8, weightDecay: 0 },
  maxGradNorm: 1,
  microBatchTokens: 16384,
  endTokens: [eos],
  padToken: eos,
});
const heapAfterLoad = heapBytes();
const liveAfterLoad = tensorHeap.live;
tensorHeap.peak = tensorHeap.live;

const filler = tokenizer.encode(
  'You are in the hallway. To the north is the kitchen, to the east a bedroom with a closed wooden door. ' +
    'On the table you see a red key, a folded note and a lamp that is switched off. Your task is to find the yellow hat. ',
);
const tokens = (n: number, salt: number) => Array.from({ length: n }, (_, i) => filler[(i + 7 * salt) % filler.length]);
const objective: ObjectiveConfig = { clipLow: 0.2, clipHigh: 0.28, dualClip: 3, klCoef: 0, lowProbDelta: null };

const report: Record<string, unknown> = {
  mode,
  model: modelDir,
  backend,
  heapAtStartGiB: GiB(heapAtStart),
  heapAfterLoadGiB: GiB(heapAfterLoad),
};
const t0 = performance.now();
try {
  if (mode === 'gen') {
    const [rows, len, maxTokens] = [num(0, 4), num(1, 1000), num(2, 8)];
    const gens = await engine.generate(
      Array.from({ length: rows }, (_, i) => tokens(len, i)),
      { temperature: 1, topP: 1, maxTokens, seed: 1 },
    );
    const generated = gens.reduce((n, g) => n + g.tokens.length, 0);
    Object.assign(report, { rows, promptTokens: len, generated, promptTokensPerS: (rows * len) / ((performance.now() - t0) / 1000) });
  } else if (mode === 'score') {
    const [rows, len, scored] = [num(0, 16), num(1, 300), num(2, 20)];
    const batch = Array.from({ length: rows }, (_, i) => {
      const all = tokens(len, i);
      return { prompt: all.slice(0, len - scored), response: all.slice(len - scored) };
    });
    await engine.logprobs(batch);
    Object.assign(report, { rows, tokens: len, scored, tokensPerS: (rows * len) / ((performance.now() - t0) / 1000) });
  } else if (mode === 'lora' || mode === 'full') {
    const [rows, len] = [num(0, 8), num(1, 300)];
    const response = 20;
    const batch: TrainSequence[] = Array.from({ length: rows }, (_, i) => {
      const all = tokens(len, i);
      return {
        prompt: all.slice(0, len - response),
        response: all.slice(len - response),
        advantages: Array(response).fill(i % 2 === 0 ? 1 : -1),
        oldLogprobs: Array(response).fill(-2),
        mask: Array(response).fill(1),
      };
    });
    const stats = await engine.trainStep(batch, objective);
    Object.assign(report, { rows, tokens: len, loss: stats.loss, tokensPerS: (rows * len) / ((performance.now() - t0) / 1000) });
  } else if (mode === 'episode') {
    // Lockstep episodes whose prompts grow by a response and an observation each step, once with
    // cacheKeys (prefix reuse) and once without.
    const [rows, steps, obs, first] = [num(0, 4), num(1, 6), num(2, 100), num(3, 300)];
    let heldAtEnd = 0;
    const run = async (keys: boolean) => {
      const prompts = Array.from({ length: rows }, (_, i) => tokens(first, i));
      const start = performance.now();
      for (let s = 0; s < steps; s++) {
        const gens = await engine.generate(prompts, {
          temperature: 1,
          topP: 1,
          maxTokens: 6,
          seed: s,
          cacheKeys: keys ? prompts.map((_, i) => `episode-${i}`) : undefined,
        });
        gens.forEach((g, i) => prompts[i].push(...g.tokens, ...tokens(obs, s * rows + i)));
      }
      if (keys) {
        heldAtEnd = engine.cacheStats().bytes;
        engine.releaseCache(prompts.map((_, i) => `episode-${i}`));
      }
      return (performance.now() - start) / 1000;
    };
    const withKeys = await run(true);
    const stats = engine.cacheStats();
    const without = await run(false);
    Object.assign(report, {
      rows,
      steps,
      obs,
      first,
      secondsWithKeys: +withKeys.toFixed(2),
      secondsWithout: +without.toFixed(2),
      speedup: +(without / withKeys).toFixed(2),
      reusedTokens: stats.reusedTokens,
      prefilledWithKeys: stats.prefilledTokens,
      cacheCopySeconds: +(stats.copyMs / 1000).toFixed(2),
      cacheGiBHeldAtEnd: GiB(heldAtEnd),
    });
  } else throw new Error(`unknown mode ${mode}`);
  report.ok = true;
} catch (e) {
  report.ok = false;
  report.error = String((e as Error).message ?? e)
    .split('\n')[0]
    .slice(0, 300);
}
Object.assign(report, {
  seconds: +((performance.now() - t0) / 1000).toFixed(2),
  heapEndGiB: GiB(heapBytes()),
  modelTensorGiB: GiB(liveAfterLoad),
  peakAboveModelGiB: GiB(tensorHeap.peak - liveAfterLoad),
});
console.log(JSON.stringify(report));
engine.dispose();
