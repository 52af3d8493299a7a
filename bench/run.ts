/**
 * `npm run bench`: throughput of the pieces a training run spends its time in, measured in one run
 * on this machine. Prints numbers; asserts nothing.
 *   1. engine forward+backward on the default tiny model (tokens/s, achieved GFLOPS ≈ 6·params·tokens/s)
 *   2. engine sampling with KV cache (prompt + generated tokens/s)
 *   3. built-in environment steps/s (random valid actions)
 *   4. rollout steps/s with the policy in the loop (lockstep batch of 32 episodes)
 *   5. matrix products: the engine's kernel vs the machine's BLAS through numpy (bench/matmul.ts)
 */
import { spawnSync } from 'node:child_process';
import { createEnv, environmentCorpus, Rng } from '../src/index.ts';
import {
  ConfigSchema,
  countParameters,
  createEngine,
  initBackend,
  nativeMatMulStatus,
  promptSettings,
  rolloutSettings,
  runEpisodes,
  tf,
} from '../src/internals.ts';

const backend = await initBackend();
const cfg = ConfigSchema.parse({ run_dir: '/tmp/empo2-bench' });
const { engine } = await createEngine(cfg, 'fresh', () => environmentCorpus(cfg.env));
const params = countParameters(engine.model.config);
console.log(
  `backend ${backend} | native matmul: ${JSON.stringify(nativeMatMulStatus())} | default model ${params.toLocaleString()} parameters`,
);

// Realistic shapes: prompts as long as the default history window makes them.
const env = await createEnv(cfg.env);
const rng = new Rng(1);
const prompts: number[][] = [];
for (let i = 0; i < 32; i++) {
  const task = env.tasks()[i % env.tasks().length];
  const first = await env.reset(task, env.variations(task, 'train')[i]);
  let text = `<|im_start|>user\nTask: ${first.task}\n${first.observation}<|im_end|>\n<|im_start|>assistant\n`;
  let valid = first.validActions;
  for (let t = 0; t < (promptSettings(cfg).history ?? 4); t++) {
    const a = rng.pick(valid);
    const r = await env.step(a);
    text += `${a}<|im_end|>\n<|im_start|>user\n${r.observation}<|im_end|>\n<|im_start|>assistant\n`;
    valid = r.validActions;
  }
  prompts.push(engine.tokenizer.encode(text));
}
const meanPrompt = prompts.reduce((a, p) => a + p.length, 0) / prompts.length;

// 1. forward + backward
const batch = prompts.map((p) => ({
  prompt: p,
  response: p.slice(-6),
  advantages: new Array(6).fill(1),
  oldLogprobs: new Array(6).fill(-3),
  mask: new Array(6).fill(1),
}));
const objective = { clipLow: 0.2, clipHigh: 0.3, dualClip: 10, klCoef: 0, lowProbDelta: null };
await engine.trainStep(batch, objective); // warm-up
const reps = 3;
let t0 = performance.now();
for (let i = 0; i < reps; i++) await engine.trainStep(batch, objective);
let seconds = (performance.now() - t0) / 1000 / reps;
const tokens = batch.reduce((a, s) => a + s.prompt.length + s.response.length, 0);
console.log(
  `train step: ${tokens} tokens (32 sequences, mean prompt ${meanPrompt.toFixed(0)}) in ${(seconds * 1000).toFixed(0)} ms -> ${(tokens / seconds).toFixed(0)} tokens/s, ${((6 * params * tokens) / seconds / 1e9).toFixed(2)} GFLOPS (6·N·T)`,
);

// 2. sampling
t0 = performance.now();
const gens = await engine.generate(prompts, { temperature: 1, topP: 1, maxTokens: 8, seed: 1 });
seconds = (performance.now() - t0) / 1000;
const generated = gens.reduce((a, g) => a + g.tokens.length, 0);
console.log(
  `sampling: 32 prompts + ${generated} generated tokens in ${(seconds * 1000).toFixed(0)} ms -> ${((prompts.flat().length + generated) / seconds).toFixed(0)} tokens/s`,
);

// 3. environment alone
let steps = 0;
t0 = performance.now();
while (performance.now() - t0 < 2000) {
  const task = env.tasks()[steps % env.tasks().length];
  let r = await env.reset(task, steps % 200);
  let valid = r.validActions;
  for (let k = 0; k < 20; k++) {
    const s = await env.step(rng.pick(valid));
    steps++;
    valid = s.validActions;
    if (s.done) break;
  }
  void r;
}
console.log(`builtin env: ${(steps / ((performance.now() - t0) / 1000)).toFixed(0)} steps/s (random valid actions)`);

// 4. rollouts with the policy in the loop
const envs = await Promise.all(Array.from({ length: 32 }, () => createEnv(cfg.env)));
const jobs = Array.from({ length: 32 }, (_, i) => ({ task: env.tasks()[i % 6], variation: i, group: i % 4 }));
t0 = performance.now();
const { stats } = await runEpisodes(envs, engine, jobs, { settings: rolloutSettings(cfg, false, 3) });
seconds = (performance.now() - t0) / 1000;
console.log(
  `rollouts: ${stats.envSteps} env steps in ${seconds.toFixed(1)} s -> ${(stats.envSteps / seconds).toFixed(1)} steps/s (policy ${stats.policySeconds.toFixed(1)} s, env ${stats.envSeconds.toFixed(2)} s)`,
);
engine.dispose();
console.log(`tensors alive: ${tf.memory().numTensors}`);

// 5. matmul vs BLAS
console.log('\nmatrix products (bench/matmul.ts):');
spawnSync(process.execPath, ['--import', 'tsx', new URL('./matmul.ts', import.meta.url).pathname], { stdio: 'inherit' });
