/**
 * What a memory iteration of EMPO² costs against a plain one (results/memory-overhead/). Runs of the same
 * command from the same seed, two iterations each, differing only in the mode schedule (and one in how
 * it trains):
 *
 *   plain           algo.p = 0              (no memory: GRPO's rollouts, with EMPO²'s novelty reward)
 *   tips-off        algo.p = 1, algo.q = 1  (tips shown, updated off-policy: tips removed)
 *   tips-on         algo.p = 1, algo.q = 0  (tips shown, updated on-policy with the tips)
 *   tips-on-before  the same, each step scored as a sequence of its own (optim.tip_branches false): the
 *                   on-policy update as it was before that study (PyTorch worker only; --no-before leaves it out)
 *
 * That study changed nothing else on the PyTorch worker's path (its rollouts reuse cached prefixes as
 * before, the plain and off-policy updates pack episodes as before), so the other arms are their own "before".
 * On the worker the activation budget, which decides micro-batches and gradient checkpointing, is fixed
 * (--activation-mb, default 3072) rather than a share of whatever memory is free when each run starts.
 *
 * Iteration 1 fills the memory (nothing to retrieve yet) and is the same work in all three; iteration 2
 * is the one measured: its rollout, memory (embedding, retrieval, reflection), update and whole-iteration
 * seconds, the tokens prefilled, scored and trained, and each time as a ratio to the plain run's. The
 * runs go one after another in one process tree, so they see the same machine.
 *
 *   npx tsx bench/memory-iteration.ts                                   # the tiny default's shape
 *   npx tsx bench/memory-iteration.ts -c configs/real-empo2.yaml --set env.max_steps=10   # the real-model study's, shorter episodes
 *
 * A run whose metrics already hold iteration 2 is read back, not run again (--fresh runs it again).
 * --arms tips-off,tips-on runs (or reads back) only those arms and plain.
 * --json FILE also writes the figures (per arm: seconds, tokens, ratios to plain) for a script to read:
 * bench/memory-iteration-gpu.sh runs this bench on the GPU path (vLLM rollouts) and reads it.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';

const { values } = parseArgs({
  options: {
    config: { type: 'string', short: 'c' },
    seed: { type: 'string', default: '0' },
    out: { type: 'string', default: 'runs/memory-iteration' },
    set: { type: 'string', multiple: true, default: [] },
    fresh: { type: 'boolean', default: false },
    'no-before': { type: 'boolean', default: false },
    arms: { type: 'string' },
    'activation-mb': { type: 'string', default: '3072' },
    json: { type: 'string' },
  },
});
const activationMb = Number(values['activation-mb']);
if (!(activationMb > 0)) throw new Error(`--activation-mb: ${JSON.stringify(values['activation-mb'])} is not a positive number of MiB`);
const seed = Number(values.seed);
if (!Number.isInteger(seed) || seed < 0) throw new Error(`--seed: ${JSON.stringify(values.seed)} is not a non-negative integer`);
const out = resolve(values.out);
mkdirSync(out, { recursive: true });
const cli = resolve(import.meta.dirname, '..', 'bin', 'empo2.js');

interface Arm {
  name: string;
  sets: string[];
}
const ALL_ARMS: Arm[] = [
  { name: 'plain', sets: ['algo.p=0'] },
  { name: 'tips-off', sets: ['algo.p=1', 'algo.q=1'] },
  { name: 'tips-on', sets: ['algo.p=1', 'algo.q=0'] },
  ...(values['no-before'] ? [] : [{ name: 'tips-on-before', sets: ['algo.p=1', 'algo.q=0', 'optim.tip_branches=false'] }]),
];
// --arms plain,tips-off: only those (plain always, the ratios' base), e.g. one at a time for a caller that
// looks at the rollout server between arms (bench/vllm-rollouts.ts); finished arms are read back as ever.
const wanted = values.arms?.split(',').map((a) => a.trim());
for (const a of wanted ?? [])
  if (!ALL_ARMS.some((arm) => arm.name === a)) throw new Error(`--arms: no arm ${a} (${ALL_ARMS.map((arm) => arm.name).join(', ')})`);
const ARMS = ALL_ARMS.filter((arm) => arm.name === 'plain' || !wanted || wanted.includes(arm.name));

interface Line {
  type: string;
  iteration: number;
  elapsed_seconds: number;
  rollout_seconds: number;
  // The update phase: intrinsic rewards, the optimiser (optimizer_seconds: preparing the batch and its
  // steps) and the tips written at the episodes' ends (part of memory_seconds).
  update_seconds: number;
  optimizer_seconds: number;
  memory_seconds?: number;
  prefill_tokens?: number;
  sequence_tokens?: number;
  trained_tokens?: number;
  mean_prompt_tokens?: number;
  env_steps: number;
  modes: Record<string, number>;
}

function trainLines(dir: string): Line[] {
  const file = join(dir, 'metrics.jsonl');
  if (!existsSync(file)) return [];
  return readFileSync(file, 'utf8')
    .split('\n')
    .filter((l) => l.trim())
    .map((l) => JSON.parse(l) as Line)
    .filter((l) => l.type === 'train');
}

function runArm(arm: Arm): { it1: Line; it2: Line } {
  const dir = join(out, arm.name);
  if (values.fresh) rmSync(dir, { recursive: true, force: true });
  let lines = trainLines(dir);
  if (lines.length < 2) {
    rmSync(dir, { recursive: true, force: true });
    const args = [cli, 'train', ...(values.config ? ['-c', values.config] : []), '--seed', String(seed), '--run-dir', dir];
    // A run always evaluates at its start and its end, outside the iterations measured: one episode per task.
    const fixed = [
      'algo.name=empo2',
      `model.torch.activation_mb=${activationMb}`,
      'env.eval_variations=1',
      ...values.set,
      'train.iterations=2',
      'train.eval_every=0',
    ];
    for (const s of [...fixed, ...arm.sets]) args.push('--set', s);
    console.log(`\n== ${arm.name}: empo2 ${args.slice(1).join(' ')}`);
    const r = spawnSync(process.execPath, args, { stdio: ['ignore', 'inherit', 'inherit'] });
    if (r.status !== 0) throw new Error(`${arm.name}: empo2 train exited with ${r.status ?? r.signal}`);
    lines = trainLines(dir);
  }
  const [it1, it2] = lines;
  if (!it1 || !it2) throw new Error(`${arm.name}: ${dir}/metrics.jsonl has no iteration 2`);
  return { it1, it2 };
}

const results = ARMS.map((arm) => ({ arm, ...runArm(arm) }));
const seconds = (r: (typeof results)[number]) => r.it2.elapsed_seconds - r.it1.elapsed_seconds;
const plain = results[0];
const ratio = (x: number, base: number) => (base > 0 ? `${(x / base).toFixed(2)}×` : '—');
const n = (x: number | undefined) => (x === undefined ? '—' : Math.round(x).toLocaleString('en-US'));

console.log(
  `\nIteration 2 of each run (seed ${seed}${values.config ? `, ${values.config}` : ''}${values.set.length ? `, ${values.set.join(' ')}` : ''}):\n`,
);
console.log(
  '| run | modes | env steps | mean prompt tokens | prefilled tokens | update sequence tokens | rollout s | memory s | update s | optimiser s | iteration s | iteration vs plain | rollout vs plain | optimiser vs plain |',
);
console.log('|---|---|---|---|---|---|---|---|---|---|---|---|---|---|');
const optimiser = (l: Line) => l.optimizer_seconds;
for (const r of results) {
  const modes = Object.entries(r.it2.modes)
    .filter(([, k]) => k > 0)
    .map(([m, k]) => `${m} ${k}`)
    .join(', ');
  console.log(
    `| ${r.arm.name} | ${modes} | ${r.it2.env_steps - r.it1.env_steps} | ${n(r.it2.mean_prompt_tokens)} | ${n(r.it2.prefill_tokens)} | ${n(r.it2.sequence_tokens)} | ` +
      `${r.it2.rollout_seconds.toFixed(1)} | ${(r.it2.memory_seconds ?? 0).toFixed(1)} | ${r.it2.update_seconds.toFixed(1)} | ${optimiser(r.it2).toFixed(1)} | ` +
      `${seconds(r).toFixed(1)} | ${ratio(seconds(r), seconds(plain))} | ${ratio(r.it2.rollout_seconds, plain.it2.rollout_seconds)} | ` +
      `${ratio(optimiser(r.it2), optimiser(plain.it2))} |`,
  );
}
const now = results.filter((r) => r.arm.name !== 'plain' && r.arm.name !== 'tips-on-before');
const worst = now.length > 0 ? Math.max(...now.map((r) => seconds(r) / seconds(plain))) : NaN;
if (now.length > 0) console.log(`\nslowest memory iteration: ${worst.toFixed(2)}× a plain one (the target: at most 1.3×)`);
const [after, before] = ['tips-on', 'tips-on-before'].map((name) => results.find((r) => r.arm.name === name));
if (after && before)
  console.log(
    `on-policy update with tips (optimiser), before → after: ${optimiser(before.it2).toFixed(1)} → ${optimiser(after.it2).toFixed(1)} s ` +
      `(${ratio(optimiser(after.it2), optimiser(before.it2))}), ${n(before.it2.sequence_tokens)} → ${n(after.it2.sequence_tokens)} sequence tokens; ` +
      `iteration ${seconds(before).toFixed(1)} → ${seconds(after).toFixed(1)} s`,
  );
if (values.json) {
  const arms = results.map((r) => ({
    arm: r.arm.name,
    modes: r.it2.modes,
    env_steps: r.it2.env_steps - r.it1.env_steps,
    prefill_tokens: r.it2.prefill_tokens ?? null,
    sequence_tokens: r.it2.sequence_tokens ?? null,
    iteration_s: seconds(r),
    rollout_s: r.it2.rollout_seconds,
    memory_s: r.it2.memory_seconds ?? 0,
    optimiser_s: optimiser(r.it2),
    iteration_vs_plain: seconds(r) / seconds(plain),
    rollout_vs_plain: r.it2.rollout_seconds / plain.it2.rollout_seconds,
  }));
  const figures = { seed, config: values.config ?? null, sets: values.set, arms, slowest_memory_vs_plain: worst, target: 1.3 };
  writeFileSync(values.json, JSON.stringify(figures, null, 2) + '\n');
}
