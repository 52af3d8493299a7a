/**
 * The worker under `torchrun --nproc_per_node=2` (FSDP2 over gloo, two CPU processes) against the same
 * worker in one process, on the same tiny model and batches: scoring, greedy decoding, one AdamW step
 * (loss, gradient norm, the weights written after it), full fine-tuning and LoRA, and a checkpoint
 * saved under torchrun that a fresh torchrun group, and one process, resume from, ending where the
 * one process does after two straight steps. The batch is uneven across ranks (5 sequences, 8-token micro-batches), so
 * the rank with less work runs its zero-weight passes.
 *
 * Measured (torch 2.15, CPU, fp32): log-probs and the loss identical (each rank scores whole sequences
 * with the same arithmetic), gradient norm within 5e-9 relative, weights within 6.4e-8 after the first
 * step and after the resumed second, full and LoRA alike: the gradients are summed in another order by
 * two ranks than by one. LoRA dropout is 0 here: with dropout each rank draws its own masks, so a
 * sharded step equals the one-process step only in distribution.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { pythonGate } from '../../../test/support/python.ts';
import { TINY_MODEL } from '../../../test/support/tiny.ts';
import { loadConfig } from '../../config/load.ts';
import { createEngine } from '../create-engine.ts';
import { environmentCorpus } from '../../envs/index.ts';
import { initBackend } from '../tfjs/backend.ts';
import { readSafetensors, readSafetensorsDir, toFloat32 } from '../safetensors.ts';
import type { Tokenizer } from '../tokenizer.ts';
import type { TrainSequence } from '../types.ts';
import type { ObjectiveConfig } from '../../algo/objective.ts';
import { TorchEngine, type TorchEngineOptions } from './engine.ts';
import { projectPython } from './python.ts';

const gate = pythonGate(['torch', 'transformers', 'peft']);

const LOGPROB_TOL = 1e-6;
const REL_TOL = 1e-6;
const WEIGHT_TOL = 1e-6;
/** ε 1e-6: AdamW turns a gradient of pure rounding noise into up to a full step with 1e-8 (engine.test.ts says why). */
const OPTIMIZER = { lr: 1e-3, beta1: 0.9, beta2: 0.99, eps: 1e-6, weightDecay: 0.01 };
const OBJECTIVE: ObjectiveConfig = { clipLow: 0.2, clipHigh: 0.28, dualClip: 3, klCoef: 0.05, lowProbDelta: null };
const LORA = { r: 4, alpha: 8, dropout: 0, targetModules: ['q_proj', 'v_proj', 'down_proj'] };

const root = mkdtempSync(join(tmpdir(), 'empo2-fsdp-'));
const modelDir = join(root, 'model');
let tokenizer: Tokenizer;
let ends: number[];

beforeAll(async () => {
  if (!gate.available) return;
  await initBackend();
  const cfg = loadConfig(null, [`run_dir=${join(root, 'run')}`, 'seed=5', ...TINY_MODEL, 'model.num_hidden_layers=2', 'env.tasks=[fetch]']);
  const { engine } = await createEngine(cfg, 'fresh', () => environmentCorpus(cfg.env));
  await engine.save(modelDir);
  tokenizer = engine.tokenizer as Tokenizer;
  ends = engine.options.endTokens;
  engine.dispose();
}, 120_000);
afterAll(() => rmSync(root, { recursive: true, force: true }));

function options(o: Partial<TorchEngineOptions> = {}): TorchEngineOptions {
  return {
    modelDir,
    optimizer: OPTIMIZER,
    maxGradNorm: 0.5,
    microBatchTokens: 8,
    endTokens: ends,
    padToken: ends[ends.length - 1],
    threads: 1,
    seed: 1,
    ...o,
  };
}

/** Two CPU ranks: the venv's torchrun, a free port of its own (--standalone). */
const twoRanks = (o: Partial<TorchEngineOptions> = {}) =>
  options({ launcher: [join(dirname(projectPython()), 'torchrun'), '--standalone', '--nproc_per_node=2'], ...o });

const texts = ['go to kitchen', 'open red box and take the yellow hat', 'look', 'put yellow hat in red box', 'inventory'];

async function batchFrom(engine: TorchEngine, shift: number): Promise<TrainSequence[]> {
  const seqs = texts.map((t, i) => ({ prompt: tokenizer.encode(`task ${i}: ${t}`), response: tokenizer.encode(texts[(i + 1) % 5]) }));
  const current = await engine.logprobs(seqs);
  return seqs.map((s, i) => ({
    ...s,
    advantages: s.response.map(() => [1.3, -0.9, 0.6, -1.7, 0.4][i]),
    oldLogprobs: current[i].map((lp, j) => lp + shift * (j % 2 === 0 ? 1 : -0.5)),
    mask: s.response.map((_, j) => (i === 2 && j === 0 ? 0 : 1)),
    refLogprobs: current[i].map((lp, j) => lp - 0.1 * Math.sin(j + i)),
  }));
}

/** A saved model's weights, or with LoRA the adapter's. */
function weights(dir: string): Map<string, Float32Array> {
  const adapter = join(dir, 'adapter_model.safetensors');
  const tensors = existsSync(adapter) ? readSafetensors(adapter).tensors : readSafetensorsDir(dir).tensors;
  return new Map([...tensors].map(([k, t]) => [k, toFloat32(t)]));
}

function maxWeightDiff(a: Map<string, Float32Array>, b: Map<string, Float32Array>): number {
  expect([...b.keys()].sort()).toEqual([...a.keys()].sort());
  let m = 0;
  for (const [name, x] of a) x.forEach((v, i) => (m = Math.max(m, Math.abs(v - b.get(name)![i]))));
  return m;
}

const rel = (x: number, y: number) => Math.abs(x - y) / Math.max(1e-9, Math.abs(x), Math.abs(y));

describe.skipIf(!gate.available)(`FSDP2 over two CPU ranks (torchrun, gloo) equals one process (${gate.label})`, () => {
  it.each([
    ['full fine-tuning', {}],
    ['LoRA', { lora: LORA }],
  ] as const)(
    '%s: scoring, greedy decoding, a step (loss, gradient norm, weights), its checkpoint resumed by a new torchrun group and by one process',
    async (_name, extra) => {
      const lora = 'lora' in extra;
      const dir = (name: string) => join(root, `${lora ? 'lora' : 'full'}-${name}`);
      // The reference: one process, two steps straight, saved after each.
      const one = await TorchEngine.start(options(extra));
      let batch1: TrainSequence[], batch2: TrainSequence[], logprobs1: number[][], greedy1: number[][];
      let step1: Awaited<ReturnType<TorchEngine['trainStep']>>, step2: typeof step1;
      try {
        batch1 = await batchFrom(one, 0.5);
        logprobs1 = await one.logprobs(batch1);
        greedy1 = (
          await one.generate(
            batch1.map((s) => s.prompt),
            { maxTokens: 6, temperature: 0, topP: 1, seed: 0 },
          )
        ).map((g) => g.tokens);
        step1 = await one.trainStep(batch1, OBJECTIVE);
        await one.save(dir('one-1'));
        batch2 = await batchFrom(one, -0.3);
        step2 = await one.trainStep(batch2, OBJECTIVE);
        await one.save(dir('one-2'));
      } finally {
        await one.close();
      }

      const sharded = await TorchEngine.start(twoRanks(extra));
      try {
        expect(sharded.info).toMatchObject({ world_size: 2, device: 'cpu', lora });
        const lp = await sharded.logprobs(batch1);
        lp.forEach((row, i) => row.forEach((x, j) => expect(Math.abs(x - logprobs1[i][j])).toBeLessThan(LOGPROB_TOL)));
        const greedy = await sharded.generate(
          batch1.map((s) => s.prompt),
          { maxTokens: 6, temperature: 0, topP: 1, seed: 0 },
        );
        expect(greedy.map((g) => g.tokens)).toEqual(greedy1);
        const s1 = await sharded.trainStep(batch1, OBJECTIVE);
        expect(s1.tokens).toBe(step1.tokens);
        expect(s1.clipFraction).toBeCloseTo(step1.clipFraction, 9);
        expect(rel(s1.loss, step1.loss)).toBeLessThan(REL_TOL);
        expect(rel(s1.gradNorm, step1.gradNorm)).toBeLessThan(REL_TOL);
        expect(rel(s1.kl, step1.kl)).toBeLessThan(1e-4);
        await sharded.save(dir('fsdp-1'), { optimizer: true });
      } finally {
        await sharded.close();
      }
      expect(maxWeightDiff(weights(dir('one-1')), weights(dir('fsdp-1')))).toBeLessThan(WEIGHT_TOL);

      // The torchrun checkpoint (weights or adapter, optimizer.pt, one random state per rank) resumed by a
      // new group, and by one process: the file is the same whatever the world size.
      const checkpoint = dir('fsdp-1');
      const from = lora
        ? { ...extra, adapterDir: checkpoint, optimizerState: join(checkpoint, 'optimizer.pt') }
        : { modelDir: checkpoint, optimizerState: join(checkpoint, 'optimizer.pt') };
      for (const [name, start] of [
        ['fsdp-2', twoRanks(from)],
        ['one-from-fsdp-2', options(from)],
      ] as const) {
        const resumed = await TorchEngine.start(start);
        try {
          const s2 = await resumed.trainStep(batch2, OBJECTIVE);
          expect(rel(s2.loss, step2.loss)).toBeLessThan(REL_TOL);
          expect(rel(s2.gradNorm, step2.gradNorm)).toBeLessThan(REL_TOL);
          await resumed.save(dir(name));
        } finally {
          await resumed.close();
        }
        // Without AdamW's moments from the file the second step would move every weight by about lr.
        expect(maxWeightDiff(weights(dir('one-2')), weights(dir(name))), name).toBeLessThan(WEIGHT_TOL);
      }
    },
    600_000,
  );
});
