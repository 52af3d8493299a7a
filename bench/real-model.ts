/**
 * One EMPO² training iteration with a real model (SmolLM2-135M-Instruct by default) on the built-in
 * environment: 8 tasks × 4 rollouts, the instruct prompt with the full history, LoRA r = 16 on all
 * linear layers (and, with --full, full fine-tuning), on each engine asked for. Every configuration
 * runs twice in this one process: with prefix reuse and packed episodes (the defaults) and with both
 * switched off (per step), so `speedup_vs_per_step` compares like with like on the same machine load.
 * Also measured here: 2-thread OpenBLAS sgemm (the yardstick for the update's GFLOPS) and, for the
 * PyTorch worker, its generation against Hugging Face `generate` (bench/worker-generate.py).
 *
 *   npx tsx bench/real-model.ts [--engine torch|tfjs|both] [--model models/smollm2-135m-instruct]
 *     [--full] [--no-per-step] [--compare-shape 2x2x12] [--compare-only] [--threads 2] [--json FILE] [--set key=value ...]
 *   npx tsx bench/real-model.ts --update-variants ["old;new;new,autocast=bfloat16"] [--compare-shape 1x2x30]
 *     [--reps 2] [--requests FILE] [--json FILE]
 *
 * --update-variants times the PyTorch worker's update alone under several settings: one iteration at
 * --compare-shape (LoRA, reuse and packing) records its train_step requests (EMPO2_RECORD_TRAIN_STEPS), then
 * bench/update-variants.py replays that same update under each variant, alternately (A B A B ...), in one
 * process, and prints each variant's time as a ratio to the first one's with the spread over --reps, its
 * peak memory, and its loss and log-probs against the first (variants: see that script). --requests FILE
 * replays an earlier recording instead of running the iteration.
 *
 * Per-step work grows with the square of the episode length: at the full shape (30-step episodes with the
 * whole history) one per-step iteration takes hours here. So `speedup_vs_per_step` is measured at
 * --compare-shape (tasks × rollouts × max steps; both modes at that shape, in this run), and the full
 * shape's own prompt/prefilled and sequence/trained token counts show the work reuse and packing save
 * there. --compare-only skips the full-shape iteration; with --no-per-step too, it times each engine at the
 * small shape only (engines side by side in one run).
 *
 * The update's GFLOPS count model FLOPs only: 2·N per token forward, 2·N more for the activation
 * gradients, and with full fine-tuning 2·N for the weight gradients (N = parameters; attention and
 * recomputation are not counted), over every token of every trained sequence.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { train } from '../src/index.ts';
import { applyOverride, initBackend, registerNativeMatMul, setBlasThreads, tf, validateConfig } from '../src/internals.ts';

const { values: a } = parseArgs({
  options: {
    engine: { type: 'string', default: 'both' },
    model: { type: 'string', default: 'models/smollm2-135m-instruct' },
    full: { type: 'boolean', default: false },
    'no-per-step': { type: 'boolean', default: false },
    'compare-shape': { type: 'string', default: '2x2x12' },
    'compare-only': { type: 'boolean', default: false },
    threads: { type: 'string', default: '2' },
    json: { type: 'string' },
    'update-variants': { type: 'string' },
    reps: { type: 'string', default: '2' },
    requests: { type: 'string' },
    set: { type: 'string', short: 's', multiple: true, default: [] },
  },
});
const engines = a.engine === 'both' ? ['torch', 'tfjs'] : [a.engine!];
for (const e of engines) if (e !== 'torch' && e !== 'tfjs') throw new Error(`--engine: torch, tfjs or both (got ${e})`);
if (!existsSync(join(a.model!, 'config.json')) && !a.model!.endsWith('.gguf'))
  throw new Error(`--model ${a.model}: no model there (npm run setup installs SmolLM2-135M-Instruct into models/)`);
const threads = Number(a.threads);
const shape = /^(\d+)x(\d+)x(\d+)$/.exec(a['compare-shape']!);
if (!shape) throw new Error(`--compare-shape: tasks x rollouts x max steps, e.g. 2x2x12 (got ${a['compare-shape']})`);
const compareShape = { tasks: Number(shape[1]), rollouts: Number(shape[2]), maxSteps: Number(shape[3]) };
type Shape = typeof compareShape | null;
const ALL_LINEAR = ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'];

interface IterationNumbers {
  iteration_s: number;
  rollout_s: number;
  update_s: number;
  optimizer_s: number;
  env_steps: number;
  prompt_tokens: number;
  prefill_tokens: number;
  trained_tokens: number;
  sequence_tokens: number;
  packed_share: number;
  mean_score: number;
}

/** One training iteration in a fresh run folder; its metrics line. */
async function iteration(engine: string, lora: boolean, perStep: boolean, small: Shape = null): Promise<IterationNumbers> {
  const runDir = mkdtempSync(join(tmpdir(), 'empo2-real-model-'));
  const raw: Record<string, unknown> = {
    seed: 0,
    run_dir: runDir,
    env: { name: 'builtin', tasks: ['power', 'clue', 'unlock'], eval_variations: 1, max_steps: small?.maxSteps ?? null },
    model: {
      path: a.model,
      engine,
      torch: { device: 'cpu', threads },
      lora: lora ? { r: 16, alpha: 32, dropout: 0.05, target_modules: ALL_LINEAR } : null,
    },
    rollout: {
      tasks_per_batch: small?.tasks ?? 8,
      group_size: small?.rollouts ?? 4,
      temperature: 1.0,
      constrained: true,
      reuse_prefix: !perStep,
    },
    algo: { name: 'empo2' },
    optim: { lr: 1e-5, pack_episodes: !perStep },
    memory: { embedder: 'hashed', reflector: 'policy' },
    // The run's before/after evaluations (3 episodes each) are outside the measured iteration.
    train: { iterations: 1, eval_every: 0, checkpoint_every: 1 },
  };
  for (const o of a.set!) applyOverride(raw, o);
  const cfg = validateConfig(raw, 'bench/real-model.ts');
  try {
    await train({ config: cfg, log: (l) => console.log(`    ${l}`) });
    const line = readFileSync(join(runDir, 'metrics.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l))
      .find((m) => m.type === 'train');
    return {
      iteration_s: line.rollout_seconds + line.update_seconds,
      rollout_s: line.rollout_seconds,
      update_s: line.update_seconds,
      optimizer_s: line.optimizer_seconds,
      env_steps: line.env_steps,
      prompt_tokens: line.prompt_tokens,
      prefill_tokens: line.prefill_tokens,
      trained_tokens: line.trained_tokens,
      sequence_tokens: line.sequence_tokens,
      packed_share: line.packed_share,
      mean_score: line.mean_score,
    };
  } finally {
    rmSync(runDir, { recursive: true, force: true });
  }
}

/** 2-thread OpenBLAS sgemm through the native path, 1024² square products, for 2 s. */
async function blasGflops(): Promise<number> {
  await initBackend();
  registerNativeMatMul();
  setBlasThreads(2);
  const n = 1024;
  const x = tf.randomNormal([n, n]);
  const y = tf.randomNormal([n, n]);
  tf.matMul(x, y).dispose();
  let reps = 0;
  const t0 = performance.now();
  while (performance.now() - t0 < 2000) {
    tf.matMul(x, y).dispose();
    reps++;
  }
  const seconds = (performance.now() - t0) / 1000;
  tf.dispose([x, y]);
  return (2 * n * n * n * reps) / seconds / 1e9;
}

/** The worker's generation against Hugging Face generate on the same model and batch (bench/worker-generate.py). */
function workerVsGenerate(): number | null {
  const python = join('.venv', 'bin', 'python');
  if (!existsSync(python)) return null;
  const out = join(mkdtempSync(join(tmpdir(), 'empo2-gen-')), 'gen.json');
  const r = spawnSync(
    python,
    [
      'bench/worker-generate.py',
      '--model',
      a.model!,
      '--batch',
      '8',
      '--prompt-len',
      '256',
      '--new-tokens',
      '32',
      '--reps',
      '3',
      '--threads',
      String(threads),
      '--json',
      out,
    ],
    { stdio: ['ignore', 'inherit', 'inherit'] },
  );
  if (r.status !== 0 || !existsSync(out)) return null;
  const report = JSON.parse(readFileSync(out, 'utf8')) as { generate?: Record<string, unknown> };
  // Greedy and sampling each have a ratio; the lower one is reported.
  const ratios = Object.values(report.generate ?? {}).flatMap((m) =>
    typeof m === 'object' && m !== null && typeof (m as { ratio?: unknown }).ratio === 'number' ? [(m as { ratio: number }).ratio] : [],
  );
  return ratios.length ? Math.min(...ratios) : null;
}

const parameters = (() => {
  const c = JSON.parse(readFileSync(join(a.model!, 'config.json'), 'utf8'));
  const h = c.hidden_size;
  const kv = (c.num_key_value_heads * h) / c.num_attention_heads;
  const layer = h * h * 2 + h * kv * 2 + 3 * h * c.intermediate_size;
  return c.num_hidden_layers * layer + c.vocab_size * h;
})();

const results: Record<string, unknown>[] = [];
const show = (label: string, n: IterationNumbers) =>
  console.log(
    `  ${label}: iteration ${n.iteration_s.toFixed(1)} s (rollout ${n.rollout_s.toFixed(1)}, update ${n.update_s.toFixed(1)}, optimiser ${n.optimizer_s.toFixed(1)}), ${n.env_steps} env steps, prompt/prefilled ${n.prompt_tokens}/${n.prefill_tokens}, sequence/trained ${n.sequence_tokens}/${n.trained_tokens}, packed ${(100 * n.packed_share).toFixed(0)}%`,
  );
const save = () => a.json && writeFileSync(a.json, JSON.stringify(results, null, 2) + '\n');
const shapeName = `${compareShape.tasks} tasks × ${compareShape.rollouts} rollouts × ${compareShape.maxSteps} steps`;

if (a['update-variants'] !== undefined) {
  await updateVariants(a['update-variants'] || 'old;new');
  process.exit(0);
}

/** --update-variants: record one update (unless --requests names one), then replay it under each variant. */
async function updateVariants(variants: string): Promise<void> {
  let requests = a.requests;
  if (!requests) {
    requests = join(mkdtempSync(join(tmpdir(), 'empo2-update-')), 'requests.jsonl');
    process.env.EMPO2_RECORD_TRAIN_STEPS = requests;
    console.log(`== recording one update: torch, LoRA r=16 all linear, ${shapeName}, with reuse and packing -> ${requests}`);
    show('recorded iteration', await iteration('torch', true, false, compareShape));
    delete process.env.EMPO2_RECORD_TRAIN_STEPS;
  }
  const args = [
    'bench/update-variants.py',
    '--requests',
    requests,
    '--variants',
    variants,
    '--reps',
    a.reps!,
    '--threads',
    String(threads),
    ...(a.json ? ['--json', a.json] : []),
  ];
  console.log(`== ${join('.venv', 'bin', 'python')} ${args.join(' ')}`);
  const r = spawnSync(join('.venv', 'bin', 'python'), args, { stdio: ['ignore', 'inherit', 'inherit'] });
  if (r.status !== 0) throw new Error(`bench/update-variants.py failed (exit ${r.status})`);
}

const blas = await blasGflops();
console.log(`2-thread OpenBLAS sgemm (1024²): ${blas.toFixed(0)} GFLOPS`);
for (const engine of engines) {
  for (const lora of a.full ? [true, false] : [true]) {
    const label = `${engine}, ${lora ? 'LoRA r=16 all linear' : 'full fine-tuning'}`;
    const row: Record<string, unknown> = { engine, lora, blas_gflops: blas };
    results.push(row);
    try {
      if (!a['compare-only']) {
        console.log(`\n== ${label}: 8 tasks × 4 rollouts, with prefix reuse and packed episodes`);
        const fast = await iteration(engine, lora, false);
        show('reuse + packing', fast);
        const flopsPerToken = 2 * parameters * (lora ? 2 : 3);
        const gflops = (fast.sequence_tokens * flopsPerToken) / fast.optimizer_s / 1e9;
        Object.assign(row, fast, { gflops, gflops_vs_blas: gflops / blas });
        save();
      }
      // --compare-only --no-per-step: the small shape with reuse and packing only (engines side by side).
      if (!a['no-per-step'] || a['compare-only']) {
        console.log(`== ${label}: ${shapeName}, with reuse and packing${a['no-per-step'] ? '' : ', then per step (no reuse, no packing)'}`);
        const smallFast = await iteration(engine, lora, false, compareShape);
        show('reuse + packing', smallFast);
        Object.assign(row, { compare_shape: shapeName, compare_fast: smallFast });
        if (!a['no-per-step']) {
          const smallSlow = await iteration(engine, lora, true, compareShape);
          show('per step', smallSlow);
          Object.assign(row, { per_step: smallSlow, speedup_vs_per_step: smallSlow.iteration_s / smallFast.iteration_s });
        }
        save();
      }
      if (engine === 'torch') {
        row.worker_vs_hf_generate = workerVsGenerate();
        save();
      }
    } catch (e) {
      console.log(`  failed: ${(e as Error).message}`);
      row.error = (e as Error).message;
      save();
    }
  }
}

const fmt = (x: unknown, d = 1) => (typeof x === 'number' ? x.toFixed(d) : '–');
const rows = results.map((r) => {
  const small = r.compare_fast as IterationNumbers | undefined;
  const slow = r.per_step as IterationNumbers | undefined;
  return `| ${r.engine} | ${r.lora ? 'LoRA' : 'full'} | ${fmt(r.iteration_s)} | ${fmt(r.rollout_s)} | ${fmt(r.update_s)} (${fmt(r.optimizer_s)}) | ${r.env_steps ?? '–'} | ${r.prompt_tokens ?? '–'} / ${r.prefill_tokens ?? '–'} | ${r.sequence_tokens ?? '–'} / ${r.trained_tokens ?? '–'} | ${r.packed_share === undefined ? '–' : fmt(100 * (r.packed_share as number), 0) + '%'} | ${fmt(small?.iteration_s)} / ${fmt(slow?.iteration_s)} | ${fmt(r.speedup_vs_per_step, 2)}× | ${r.gflops === undefined ? '–' : `${fmt(r.gflops, 0)} (${fmt(100 * (r.gflops_vs_blas as number), 0)}% of BLAS)`} | ${fmt(r.worker_vs_hf_generate, 2)} |${r.error ? ` failed: ${r.error}` : ''}`;
});
const table = [
  `One EMPO² iteration, ${a.model}, builtin power/clue/unlock, 8 tasks × 4 rollouts (full-length episodes), ${threads} threads; 2-thread sgemm ${blas.toFixed(0)} GFLOPS. Speed-up vs per step measured at ${shapeName}.`,
  '',
  '| engine | weights | iteration s | rollout s | update s (optimiser) | env steps | prompt / prefilled tokens | trained sequence / policy tokens | packed | small shape: reuse+packing / per-step s | speed-up | update GFLOPS | worker / HF generate |',
  '|---|---|---|---|---|---|---|---|---|---|---|---|---|',
  ...rows,
].join('\n');
console.log('\n' + table);
save();
