/**
 * Throughput of the TypeScript engine vs the PyTorch worker on CPU, same model (the default tiny
 * policy unless a model directory is given), same batches, one run: generated tokens/s (sampling
 * with KV cache) and trained tokens/s (prompt + response tokens through forward + backward +
 * AdamW). Prints numbers and the ratio; asserts nothing.
 *
 *   npx tsx bench/torch-vs-tfjs.ts [modelDir] [--threads N] [--reps N]
 *
 * Needs the project venv (npm run setup:test) for the worker.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { environmentCorpus } from '../src/index.ts';
import {
  ConfigSchema,
  countParameters,
  createEngine,
  initBackend,
  loadModelDir,
  nativeMatMulStatus,
  saveModelDir,
  TfjsEngine,
  TorchEngine,
  type ObjectiveConfig,
  type PolicyEngine,
  type TrainSequence,
} from '../src/internals.ts';

const args = process.argv.slice(2);
const flag = (name: string, fallback: number) => {
  const i = args.indexOf(name);
  if (i < 0) return fallback;
  const v = Number(args[i + 1]);
  if (!Number.isInteger(v) || v <= 0) throw new Error(`${name} must be a positive integer, got ${args[i + 1]}`);
  args.splice(i, 2);
  return v;
};
const threads = flag('--threads', 2);
const reps = flag('--reps', 3);
const givenDir = args[0];

const backend = await initBackend();
const cfg = ConfigSchema.parse({ run_dir: '/tmp/empo2-bench-torch' });
const { engine: base } = await createEngine(cfg, 'fresh', () => environmentCorpus(cfg.env));
const scratch = mkdtempSync(join(tmpdir(), 'empo2-bench-torch-'));
const modelDir = givenDir ?? join(scratch, 'model');
if (!givenDir) await saveModelDir(modelDir, base.model, base.tokenizer);
const endTokens = base.options.endTokens;
const padToken = base.options.padToken;
base.dispose();

const { model, tokenizer } = loadModelDir(modelDir);
const engineOptions = {
  optimizer: { lr: 1e-4, beta1: 0.9, beta2: 0.99, eps: 1e-8, weightDecay: 0 },
  maxGradNorm: 1,
  microBatchTokens: cfg.optim.micro_batch_tokens,
  endTokens,
  padToken,
};
const ts = new TfjsEngine(model, tokenizer, engineOptions);
const torch = await TorchEngine.start({ modelDir, ...engineOptions, threads });
console.log(
  `model ${modelDir === join(scratch, 'model') ? 'default tiny policy' : modelDir}: ${countParameters(model.config).toLocaleString()} parameters | ` +
    `tfjs backend ${backend}, native matmul ${JSON.stringify(nativeMatMulStatus())} | torch ${torch.versions.torch}, ${torch.info.threads} threads`,
);

// Prompts of a realistic length for this setting (a task, an observation, a few turns).
const text =
  'You are in the hall. You see a red box, a blue drawer and a door to the kitchen. Task: find the yellow hat and bring it to the pantry.';
const prompts = Array.from({ length: 16 }, (_, i) =>
  tokenizer.encode(`<|im_start|>user\n${text.slice(0, 60 + 5 * i)}<|im_end|>\n<|im_start|>assistant\n`),
);
// Rows that sample an end token stop early; tokens/s counts the tokens actually generated.
const GEN = { temperature: 1, topP: 1, maxTokens: 24, seed: 1 };

async function timeGenerate(engine: PolicyEngine): Promise<{ tokensPerSecond: number; tokens: number }> {
  await engine.generate(prompts.slice(0, 2), { ...GEN, maxTokens: 4 }); // warm-up
  let tokens = 0;
  const t0 = performance.now();
  for (let r = 0; r < reps; r++) for (const g of await engine.generate(prompts, { ...GEN, seed: r })) tokens += g.tokens.length;
  return { tokensPerSecond: tokens / ((performance.now() - t0) / 1000), tokens };
}

const responses = prompts.map((_, i) =>
  tokenizer.encode(['go to kitchen', 'open red box', 'take yellow hat in the hall now', 'look around'][i % 4]).concat(endTokens[0]),
);
const oldLogprobs = await ts.logprobs(prompts.map((p, i) => ({ prompt: p, response: responses[i] })));
const batch: TrainSequence[] = prompts.map((p, i) => ({
  prompt: p,
  response: responses[i],
  advantages: responses[i].map(() => (i % 2 === 0 ? 1 : -1)),
  oldLogprobs: oldLogprobs[i],
  mask: responses[i].map(() => 1),
}));
const objective: ObjectiveConfig = { clipLow: 0.2, clipHigh: 0.28, dualClip: 3, klCoef: 0, lowProbDelta: null };
const batchTokens = batch.reduce((n, s) => n + s.prompt.length + s.response.length, 0);

async function timeTrain(engine: PolicyEngine): Promise<{ tokensPerSecond: number; losses: number[] }> {
  await engine.trainStep(batch.slice(0, 2), objective); // warm-up
  const losses: number[] = [];
  const t0 = performance.now();
  for (let r = 0; r < reps; r++) losses.push((await engine.trainStep(batch, objective)).loss);
  return { tokensPerSecond: (reps * batchTokens) / ((performance.now() - t0) / 1000), losses };
}

try {
  const genTs = await timeGenerate(ts);
  const genTorch = await timeGenerate(torch);
  const trainTs = await timeTrain(ts);
  const trainTorch = await timeTrain(torch);
  const row = (name: string, a: number, b: number) =>
    console.log(
      `${name.padEnd(34)} tfjs ${a.toFixed(0).padStart(8)} tok/s   torch ${b.toFixed(0).padStart(8)} tok/s   torch/tfjs ${(b / a).toFixed(2)}x`,
    );
  console.log(
    `generation: ${prompts.length} prompts (${Math.min(...prompts.map((p) => p.length))}-${Math.max(...prompts.map((p) => p.length))} tokens), ${GEN.maxTokens} sampled tokens each, ${reps} runs`,
  );
  row('  generated tokens/s', genTs.tokensPerSecond, genTorch.tokensPerSecond);
  console.log(`training: ${batch.length} sequences, ${batchTokens} tokens per step, ${reps} steps`);
  row('  trained tokens/s', trainTs.tokensPerSecond, trainTorch.tokensPerSecond);
  console.log(
    `  losses per step: tfjs ${trainTs.losses.map((l) => l.toFixed(5)).join(' ')} | torch ${trainTorch.losses.map((l) => l.toFixed(5)).join(' ')}`,
  );
} finally {
  ts.dispose();
  await torch.close();
  rmSync(scratch, { recursive: true, force: true });
}
