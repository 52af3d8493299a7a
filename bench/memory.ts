/**
 * Memory overhead of EMPO²: time spent embedding states, retrieving tips, computing the intrinsic
 * reward and writing tips, as a share of rollout time (the reference spends ~19%; target ≤ 2%).
 * Runs a few EMPO² iterations where every batch rolls out with memory (p = 1), so the memory works
 * on every step, and prints per-iteration and total shares.
 *   npx tsx bench/memory.ts [--embedder hashed|minilm] [--iterations 4] [--top-k 10]
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadConfig, train } from '../src/index.ts';

const arg = (name: string, fallback: string) => {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : fallback;
};
const embedder = arg('embedder', 'hashed');
const iterations = Number(arg('iterations', '4'));
const topK = arg('top-k', '10');
const dir = mkdtempSync(join(tmpdir(), 'empo2-bench-memory-'));
try {
  const cfg = loadConfig(null, {
    set: [
      `run_dir=${dir}`,
      'algo.name=empo2',
      'algo.p=1',
      'algo.q=0.68',
      'algo.mode_draw=task',
      'algo.intrinsic=novelty',
      `memory.embedder=${embedder}`,
      `memory.top_k=${topK}`,
      `train.iterations=${iterations}`,
      'train.eval_every=0',
      'env.eval_variations=1',
    ],
  });
  await train({ config: cfg, log: (l) => (l.startsWith('iter') || l.startsWith('algo') ? console.log(l) : undefined) });
  const lines = readFileSync(join(dir, 'metrics.jsonl'), 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l))
    .filter((l) => l.type === 'train');
  let rollout = 0;
  let memory = 0;
  console.log('\n| iteration | rollout s | memory s | memory / rollout | tips in memory | prompt tokens |');
  console.log('|---|---|---|---|---|---|');
  for (const l of lines) {
    rollout += l.rollout_seconds;
    memory += l.memory_seconds;
    console.log(
      `| ${l.iteration} | ${l.rollout_seconds.toFixed(2)} | ${l.memory_seconds.toFixed(3)} | ${(100 * l.memory_share_of_rollout).toFixed(2)}% | ${l.memory_size} | ${l.mean_prompt_tokens.toFixed(0)} |`,
    );
  }
  console.log(
    `\nmemory overhead (${embedder} embedder, top ${topK}): ${memory.toFixed(3)} s of ${rollout.toFixed(1)} s rollout = ${((100 * memory) / rollout).toFixed(2)}% (reference ~19%, target <= 2%)`,
  );
} finally {
  rmSync(dir, { recursive: true, force: true });
}
