/**
 * The same training run through the TypeScript engine and through the PyTorch worker (model.engine:
 * torch) agree step for step: greedy rollouts (so both engines take the same actions), groups of
 * one (A = return) and the novelty reward (so every iteration trains).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pythonGate } from '../../test/support/python.ts';
import { loadConfig } from '../config/load.ts';
import { loadModelDir } from '../policy/tfjs/checkpoint.ts';
import { initBackend } from '../policy/tfjs/backend.ts';
import { latestCheckpoint } from '../run/checkpoint.ts';
import { STEP_FILE } from '../run/partial.ts';
import { train } from './trainer.ts';
import { createPlayingEngine } from '../policy/create-engine.ts';
import { evaluateModelDir } from '../cli/commands/eval.ts';
import { existsSync } from 'node:fs';
import { TINY_MODEL } from '../../test/support/tiny.ts';

const gate = pythonGate(['torch', 'transformers']);
const root = mkdtempSync(join(tmpdir(), 'empo2-torch-train-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

const config = (dir: string, engine: 'tfjs' | 'torch', iterations: number, more: string[] = []) =>
  loadConfig(null, [
    `run_dir=${dir}`,
    'seed=5',
    `model.engine=${engine}`,
    'model.torch.device=cpu',
    'model.torch.threads=1',
    ...TINY_MODEL,
    'env.tasks=[fetch, power]',
    'env.eval_variations=1',
    'env.max_steps=4',
    'rollout.tasks_per_batch=2',
    'rollout.group_size=1',
    'rollout.temperature=0',
    'rollout.eval_temperature=0',
    'algo.name=empo2',
    'algo.p=0',
    'algo.intrinsic=novelty',
    'algo.intrinsic_coef=0.1',
    'algo.minibatches=2',
    // ε 1e-6: with 1e-8, AdamW turns gradients that are pure rounding noise into full-size steps.
    'optim.eps=1e-6',
    `train.iterations=${iterations}`,
    'train.checkpoint_every=1',
    'train.eval_every=0',
    ...more,
  ]);

type Line = Record<string, number | string | object>;

/** This process's PyTorch workers (Linux: /proc). */
function workerPids(): number[] {
  return readdirSync('/proc')
    .filter((d) => /^\d+$/.test(d))
    .filter((d) => {
      try {
        const stat = readFileSync(`/proc/${d}/stat`, 'utf8');
        const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
        return ppid === process.pid && readFileSync(`/proc/${d}/cmdline`, 'utf8').includes('worker.py');
      } catch {
        return false; // ended meanwhile
      }
    })
    .map(Number);
}
const trainLines = (dir: string): Line[] =>
  readFileSync(join(dir, 'metrics.jsonl'), 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l))
    .filter((l) => l.type === 'train');

describe.skipIf(!gate.available)(`training through the PyTorch worker (${gate.label})`, () => {
  beforeAll(async () => {
    await initBackend();
  });

  it('3 iterations (2 + resume 1) agree with the TypeScript engine step for step: actions, losses, weights', async () => {
    const tsDir = join(root, 'tfjs');
    const ptDir = join(root, 'torch');
    await train(config(tsDir, 'tfjs', 3), { resume: false, log: () => {} });
    await train(config(ptDir, 'torch', 2), { resume: false, log: () => {} });
    // The budget the worker took from free memory is in config.yaml, and the resume passes it back (here one
    // MiB less, as if the run had started on another machine), whatever is free now.
    const savedConfig = join(ptDir, 'config.yaml');
    const budget = loadConfig(savedConfig).model.torch.activation_mb!;
    expect(Number.isInteger(budget) && budget > 0, `recorded budget ${budget}`).toBe(true);
    writeFileSync(savedConfig, readFileSync(savedConfig, 'utf8').replace(`activation_mb: ${budget}\n`, `activation_mb: ${budget - 1}\n`));
    const resumeLog: string[] = [];
    await train(config(ptDir, 'torch', 3), { resume: true, log: (l) => resumeLog.push(l) });
    expect(resumeLog.join('\n')).toContain(`activation budget ${(budget - 1).toLocaleString('en')} MiB`);
    expect(loadConfig(savedConfig).model.torch.activation_mb).toBe(budget - 1);
    const a = trainLines(tsDir);
    const b = trainLines(ptDir);
    expect(b.map((l) => l.iteration)).toEqual([1, 2, 3]);
    // Every iteration really trains (non-zero advantages, tokens in the loss).
    for (const l of a) expect(l.trained_tokens as number).toBeGreaterThan(0);
    expect(a.some((l) => Math.abs(l.loss as number) > 1e-4)).toBe(true);
    for (let i = 0; i < 3; i++) {
      // Same actions: same env steps, scores and trained tokens.
      for (const k of ['env_steps', 'mean_score', 'sequences', 'trained_tokens']) expect(b[i][k], `iteration ${i + 1} ${k}`).toBe(a[i][k]);
      expect(b[i].loss as number, `iteration ${i + 1} loss`).toBeCloseTo(a[i].loss as number, 4);
      expect(
        Math.abs((b[i].grad_norm as number) - (a[i].grad_norm as number)) / Math.max(1e-6, a[i].grad_norm as number),
        `iteration ${i + 1} grad norm`,
      ).toBeLessThan(1e-3);
    }
    // The worker saved loadable Hugging Face checkpoints; weights agree after 3 iterations (6 optimiser steps).
    const wa = loadModelDir(latestCheckpoint(tsDir)!).model;
    const wb = loadModelDir(latestCheckpoint(ptDir)!).model;
    let worst = 0;
    for (const [k, v] of wa.params) {
      const x = v.dataSync();
      const y = wb.params.get(k)!.dataSync();
      for (let i = 0; i < x.length; i++) worst = Math.max(worst, Math.abs(x[i] - y[i]));
    }
    expect(worst).toBeLessThan(1e-4);
    // ...and they moved: the final weights are not the initial ones.
    const initial = loadModelDir(join(ptDir, 'initial-model')).model;
    let moved = 0;
    for (const [k, v] of initial.params) {
      const x = v.dataSync();
      const y = wb.params.get(k)!.dataSync();
      for (let i = 0; i < x.length; i++) moved = Math.max(moved, Math.abs(x[i] - y[i]));
    }
    expect(moved).toBeGreaterThan(1e-3);
    initial.dispose();
    wa.dispose();
    wb.dispose();
  });

  it('LoRA through the worker, stopped after an optimiser step of an iteration saved part-way: the resumed run ends as the straight one, bit for bit', async () => {
    // With LoRA dropout: the worker keeps torch's random state beside optimizer.pt, so the steps after the resume draw the masks the straight run drew (before it did not: grad norm 0.02246 against 0.02267).
    const lora = [
      'model.lora={r: 4, alpha: 8, dropout: 0.05, target_modules: [q_proj, v_proj]}',
      'rollout.temperature=1',
      'rollout.group_size=2',
    ];
    const straight = join(root, 'partial-straight');
    await train(config(straight, 'torch', 2, lora), { resume: false, log: () => {} });
    const split = join(root, 'partial-split');
    const cfg = config(split, 'torch', 2, [...lora, 'train.partial_save_minutes=0']);
    const stop = (dir: string, progress: { optimizerSteps: number } | null) => {
      if (dir.endsWith('partial-iter-000002') && progress?.optimizerSteps === 1) throw new Error('stopped here');
    };
    await expect(train(cfg, { resume: false, log: () => {}, onPartialSave: stop })).rejects.toThrow('stopped here');
    await train(cfg, { resume: true, log: () => {} });
    const strip = (l: Line) => Object.fromEntries(Object.entries(l).filter(([k]) => !/seconds|per_s|share/.test(k)));
    expect(trainLines(split).map(strip)).toEqual(trainLines(straight).map(strip));
    const adapter = (dir: string) => readFileSync(join(latestCheckpoint(dir)!, 'adapter', 'adapter_model.safetensors'));
    expect(adapter(split).equals(adapter(straight))).toBe(true);
  });

  it('LoRA through the worker, killed inside an optimiser step: the resume goes on from the micro-batches saved in it and ends as the straight run, bit for bit', async () => {
    // minibatches 1 and an 8-token budget: one step per iteration, a micro-batch per sequence, saved after each (partial_save_minutes 0).
    const more = [
      'model.lora={r: 4, alpha: 8, dropout: 0.05, target_modules: [q_proj, v_proj]}',
      'rollout.temperature=1',
      'rollout.group_size=2',
      'algo.minibatches=1',
      'optim.micro_batch_tokens=8',
    ];
    const straight = join(root, 'step-straight');
    await train(config(straight, 'torch', 2, more), { resume: false, log: () => {} });
    const split = join(root, 'step-split');
    const cfg = config(split, 'torch', 2, [...more, 'train.partial_save_minutes=0']);
    const stepFile = join(split, 'checkpoints', 'partial-iter-000002', STEP_FILE);
    let killed = false;
    const watcher = setInterval(() => {
      if (killed || !existsSync(stepFile)) return;
      for (const pid of workerPids()) process.kill(pid, 'SIGKILL');
      killed = true;
    }, 1);
    try {
      await expect(train(cfg, { resume: false, log: () => {} })).rejects.toThrow();
    } finally {
      clearInterval(watcher);
    }
    expect(killed).toBe(true);
    const lines: string[] = [];
    await train(cfg, { resume: true, log: (l) => lines.push(l) });
    const taken = lines
      .map((l) => /^iter 2 update: train step 1 goes on from its part-way save \((\d+)\/(\d+) micro-batches done\)$/.exec(l))
      .find((m) => m);
    expect(taken, lines.join('\n')).toBeTruthy();
    expect(Number(taken![1])).toBeLessThan(Number(taken![2])); // killed inside the step, not after it
    const strip = (l: Line) => Object.fromEntries(Object.entries(l).filter(([k]) => !/seconds|per_s|share/.test(k)));
    expect(trainLines(straight)[1].grad_norm as number).toBeGreaterThan(0); // the step trains
    expect(trainLines(split).map(strip)).toEqual(trainLines(straight).map(strip));
    const adapter = (dir: string) => readFileSync(join(latestCheckpoint(dir)!, 'adapter', 'adapter_model.safetensors'));
    expect(adapter(split).equals(adapter(straight))).toBe(true);
  }, 300_000);

  it('a LoRA checkpoint of the worker (its adapter only) evaluates on either engine, alike', async () => {
    const base = join(root, 'torch', 'initial-model');
    const lora = [`model.path=${base}`, 'model.lora={r: 4, alpha: 8, dropout: 0, target_modules: [q_proj, v_proj]}', 'optim.lr=0.05'];
    const dir = join(root, 'lora');
    await train(config(dir, 'torch', 1, lora), { resume: false, log: () => {} });
    const checkpoint = latestCheckpoint(dir)!;
    expect(existsSync(join(checkpoint, 'adapter', 'adapter_config.json'))).toBe(true);
    expect(existsSync(join(checkpoint, 'model.safetensors'))).toBe(false);
    const playing = await createPlayingEngine(config(join(root, 'x'), 'tfjs', 1, lora), checkpoint);
    expect(playing.description).toMatch(/with its LoRA adapter/);
    playing.engine.dispose();
    const untimed = (r: Awaited<ReturnType<typeof evaluateModelDir>>) => ({ ...r, summary: { ...r.summary, seconds: 0 } });
    const viaWorker = await evaluateModelDir(checkpoint, config(join(root, 'e1'), 'torch', 1, lora));
    const inProcess = await evaluateModelDir(checkpoint, config(join(root, 'e2'), 'tfjs', 1, lora));
    expect(viaWorker.summary.episodes).toBe(2);
    expect(untimed(viaWorker)).toEqual(untimed(inProcess));
  });
});
