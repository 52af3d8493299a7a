/**
 * The PyTorch worker on trunk-plus-branches sequences (ScoredSequence.branches, built by
 * ../../trainer/packing.ts packEpisodeBranches): an on-policy episode with tips scored as its tip-free
 * trunk plus one branch per tipped step gives the log-probs, the loss and statistics of a train step and
 * the updated weights that the same steps give sent one sequence each (today's path), whether the
 * branches run in one batch or one at a time, with gradient checkpointing or without.
 *
 * The branch attention itself (workers/torch/check_branches.py): both of its forms (two CPU flash passes
 * merged by their log-sum-exps, and one causal pass with placeholder queries) against SDPA under an
 * explicit mask, values and gradients, on random batches of branches.
 *
 * Model: a tiny Qwen2 built and saved by our own code, weights drawn wide (std 0.3) so that attention and
 * the output distribution are far from uniform (as in episodes.test.ts).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pythonGate, REPO_ROOT, runPython } from '../../../test/support/python.ts';
import { saveRandomChatModel } from '../../../test/support/instruct-model.ts';
import { readSafetensorsDir, toFloat32 } from '../safetensors.ts';
import type { Tokenizer } from '../tokenizer.ts';
import type { ObjectiveConfig } from '../../algo/objective.ts';
import { IM_END, END_OF_TEXT } from '../chat-tokens.ts';
import type { TrainSequence } from '../types.ts';
import { packEpisodeBranches } from '../../trainer/packing.ts';
import { TorchEngine, type TorchEngineOptions } from './engine.ts';

const gate = pythonGate(['torch', 'transformers']);

const CORPUS = [
  'You are in the hall. You see a red box, a blue drawer and a door to the kitchen.',
  'go to kitchen',
  'open red box',
  'take yellow hat',
  'The red box is open. Inside it: a yellow hat.',
  'You take the yellow hat.',
  'Task: Find the yellow hat.',
  '<tip>',
  '</tip>',
  'Tip: the hat was in the box (score 0.5).',
];
const ACTIONS = ['go to kitchen', 'open red box', 'take yellow hat', 'take red key'];
const OBSERVATIONS = ['The red box is open. Inside it: a yellow hat.', 'You take the yellow hat.', 'Nothing happens.'];

/** Branches against per-step sequences: the same causal computation, rounded differently (fp32). */
const LOGPROB_TOL = 1e-5;
const REL_TOL = 1e-5;
const OBJECTIVE: ObjectiveConfig = { clipLow: 0.2, clipHigh: 0.28, dualClip: 3, klCoef: 0.05, lowProbDelta: 1e-3 };
const rel = (a: number, b: number) => Math.abs(a - b) / Math.max(1e-12, Math.abs(a), Math.abs(b));

let tokenizer: Tokenizer;
let IM_END_ID: number;
let EOT_ID: number;
let modelDir: string;
const tmpDirs: string[] = [];

function tempDir(): string {
  const d = mkdtempSync(join(tmpdir(), 'empo2-torch-branches-'));
  tmpDirs.push(d);
  return d;
}

function options(o: Partial<TorchEngineOptions> = {}): TorchEngineOptions {
  return {
    modelDir,
    // AdamW's first step with ε = 1 and no decay: a monotone, nearly linear function of the gradient.
    optimizer: { lr: 1, beta1: 0.9, beta2: 0.99, eps: 1, weightDecay: 0 },
    maxGradNorm: 0,
    microBatchTokens: 100_000,
    endTokens: [IM_END_ID, EOT_ID],
    padToken: EOT_ID,
    threads: 1,
    ...o,
  };
}

const enc = (text: string) => tokenizer.encode(text);

interface Case {
  /** Each step as sampled: its prompt with its tips, one sequence each (today's on-policy-with-tips path). */
  perStep: TrainSequence[];
  tipSpans: ([number, number] | null)[];
  /** The same episodes as trunk plus branches. */
  branched: TrainSequence[];
  /** Index of each branched scored token's value in perStep's flattened order. */
  order: number[];
}

/**
 * Greedy 4-step episodes as the instruct prompt builds them: the current user turn ends with a tip block
 * (new text every step; none at step 2, nothing retrieved), earlier turns carry none. Per-token values
 * differ by step and token so that a misaligned value changes the result.
 */
async function makeCase(engine: TorchEngine): Promise<Case> {
  const perStep: TrainSequence[] = [];
  const tipSpans: ([number, number] | null)[] = [];
  const branched: TrainSequence[] = [];
  const order: number[] = [];
  let offset = 0;
  for (const [e, task] of ['Find the yellow hat.', 'Open the red box.'].entries()) {
    let history = enc(`<|im_start|>user\nTask: ${task}\nYou are in the hall.`);
    const steps: TrainSequence[] = [];
    const spans: ([number, number] | null)[] = [];
    for (let t = 0; t < 4; t++) {
      const tips = t === 2 ? [] : enc(`\n\n<tip> Tip: the hat was in the box (score 0.${t + e}). </tip>`);
      const tail = enc('<|im_end|>\n<|im_start|>assistant\n');
      const prompt = [...history, ...tips, ...tail];
      const [g] = await engine.generate([prompt], { temperature: 0, topP: 1, maxTokens: 5, seed: 0, allowedTexts: [ACTIONS] });
      expect(g.tokens.length).toBeGreaterThan(0);
      steps.push({
        prompt,
        response: g.tokens,
        advantages: g.tokens.map((_, j) => (e === 1 ? -0.3 : 1) * (0.5 + 0.3 * t - 0.1 * j)),
        oldLogprobs: g.logprobs.map((lp, j) => lp + 0.4 * Math.sin(3 * t + j + e)),
        mask: g.tokens.map((_, j) => (t === 1 && j === 0 ? 0 : 1)),
        refLogprobs: g.logprobs.map((lp, j) => lp - 0.2 * Math.cos(t + j)),
        lowProbMask: true,
      });
      spans.push(tips.length ? [history.length, history.length + tips.length] : null);
      history = [...history, ...tail, ...g.tokens, ...enc(`\n<|im_start|>user\n${OBSERVATIONS[(t + e) % OBSERVATIONS.length]}`)];
    }
    const packed = packEpisodeBranches(steps, spans);
    expect(packed).toHaveLength(1);
    expect(packed[0].branches).toHaveLength(3);
    branched.push(...packed);
    // The trunk's scored tokens (the untipped step 2), then the branches' (steps 0, 1, 3).
    const starts = steps.map((_, t) => offset + steps.slice(0, t).reduce((n, s) => n + s.response.length, 0));
    for (const t of [2, 0, 1, 3]) order.push(...steps[t].response.map((_, j) => starts[t] + j));
    offset += steps.reduce((n, s) => n + s.response.length, 0);
    perStep.push(...steps);
    tipSpans.push(...spans);
  }
  return { perStep, tipSpans, branched, order };
}

function weights(dir: string): Map<string, Float32Array> {
  return new Map([...readSafetensorsDir(dir).tensors].map(([k, t]) => [k, toFloat32(t)]));
}

beforeAll(async () => {
  if (!gate.available) return;
  modelDir = tempDir();
  tokenizer = await saveRandomChatModel(modelDir, { corpus: CORPUS, vocabSize: 300, seed: 29, label: 'branches test tokenizer' });
  IM_END_ID = tokenizer.requireTokenId(IM_END);
  EOT_ID = tokenizer.requireTokenId(END_OF_TEXT);
});

afterAll(() => {
  for (const d of tmpDirs) rmSync(d, { recursive: true, force: true });
});

describe.skipIf(!gate.available)(`trunk plus branches (${gate.label})`, () => {
  it('the branch attention, merged by log-sum-exp or with placeholder queries, equals masked SDPA: values and gradients', async () => {
    const r = JSON.parse(await runPython(join(REPO_ROOT, 'workers', 'torch', 'check_branches.py'), []));
    expect(r.cases).toBe(24);
    const forms = r.max_abs_difference as Record<string, Record<string, number>>;
    expect(Object.keys(forms).sort()).toEqual(['merged_float32', 'merged_float64', 'placeholder_float32', 'placeholder_float64']);
    // Inputs of size about 1.5: float64 agrees to rounding, float32 to a few ulps of the sums (seen: 1e-14 and 6e-6).
    for (const [form, diffs] of Object.entries(forms)) {
      expect(Object.keys(diffs)).toHaveLength(6);
      for (const [what, d] of Object.entries(diffs)) expect(d, `${form} ${what}`).toBeLessThan(form.endsWith('64') ? 1e-10 : 5e-5);
    }
  });

  it(`log-probs of a trunk with branches equal the per-step sequences' (max |Δ| < ${LOGPROB_TOL}); bad branches are refused`, async () => {
    const engine = await TorchEngine.start(options());
    try {
      expect(engine.supportsBranches).toBe(true);
      const c = await makeCase(engine);
      const perStep = (await engine.logprobs(c.perStep, 0.8)).flat();
      const a = (await engine.logprobs(c.branched, 0.8)).flat();
      expect(a).toHaveLength(perStep.length);
      const diff = Math.max(...a.map((x, i) => Math.abs(x - perStep[c.order[i]])));
      console.log(`[branches] ${a.length} log-probs, max |Δ| ${diff.toExponential(2)}`);
      expect(diff).toBeLessThan(LOGPROB_TOL);
      // Branches one at a time (a micro-batch budget under two branches) give the same.
      const narrow = await TorchEngine.start(options({ microBatchTokens: 40 }));
      try {
        const b = (await narrow.logprobs(c.branched, 0.8)).flat();
        expect(Math.max(...b.map((x, i) => Math.abs(x - perStep[c.order[i]])))).toBeLessThan(LOGPROB_TOL);
      } finally {
        await narrow.close();
      }
      const first = c.branched[0];
      const bad = (b: object) => ({ ...first, branches: [{ ...first.branches![0], ...b }] });
      await expect(engine.logprobs([bad({ policyTokens: [1, ...first.branches![0].policyTokens.slice(1)] })])).rejects.toThrow(
        /logprobs\.batch\[0\]\.branches\[0\]\.policy_tokens\[0\] must be 0/,
      );
      await expect(engine.logprobs([bad({ prefix: 10_000 })])).rejects.toThrow(/logprobs\.batch\[0\]\.branches\[0\]\.prefix/);
      await expect(engine.trainStep([{ ...first, advantages: first.advantages.slice(1) }], OBJECTIVE)).rejects.toThrow(
        /train_step\.batch\[0\]\.advantages has \d+ values but the sequence has \d+ policy tokens/,
      );
      // Eager attention (as under torchrun) takes none: the engine says so, and the worker refuses them.
      const eager = await TorchEngine.start(options({ attnImplementation: 'eager' }));
      try {
        expect(eager.supportsBranches).toBe(false);
        await expect(eager.logprobs([first])).rejects.toThrow(
          /logprobs\.batch\[0\]\.branches: this worker does not take trunk-plus-branches sequences/,
        );
      } finally {
        await eager.close();
      }
    } finally {
      await engine.close();
    }
  }, 180_000);

  it(`one train step on trunks with branches equals the per-step batch: loss, statistics and updated weights within ${REL_TOL} relative (branches batched, or one at a time with gradient checkpointing)`, async () => {
    const perStepEngine = await TorchEngine.start(options());
    const branchedEngine = await TorchEngine.start(options());
    const narrowEngine = await TorchEngine.start(options({ microBatchTokens: 40, gradientCheckpointing: true }));
    try {
      const c = await makeCase(perStepEngine);
      const ref = await perStepEngine.trainStep(c.perStep, OBJECTIVE, 0.9);
      const [dirRef, dirA, dirB] = [tempDir(), tempDir(), tempDir()];
      await perStepEngine.save(dirRef);
      const wRef = weights(dirRef);
      const initial = weights(modelDir);
      for (const [engine, dir, label] of [
        [branchedEngine, dirA, 'batched'],
        [narrowEngine, dirB, 'one at a time, checkpointed'],
      ] as const) {
        const s = await engine.trainStep(c.branched, OBJECTIVE, 0.9);
        expect(s.tokens, label).toBe(ref.tokens);
        for (const k of ['loss', 'clipFraction', 'meanRatio', 'kl', 'gradNorm'] as const)
          expect(rel(s[k], ref[k]), `${label}: ${k}`).toBeLessThan(REL_TOL);
        await engine.save(dir);
        const w = weights(dir);
        let maxStep = 0;
        let maxGap = 0;
        for (const [name, w0] of initial) {
          const [x, y] = [w.get(name)!, wRef.get(name)!];
          for (let i = 0; i < w0.length; i++) {
            maxStep = Math.max(maxStep, Math.abs(y[i] - w0[i]));
            maxGap = Math.max(maxGap, Math.abs(x[i] - y[i]));
          }
        }
        console.log(
          `[branches] ${label}: loss ${s.loss} vs ${ref.loss}, largest weight step ${maxStep.toExponential(2)}, largest gap ${maxGap.toExponential(2)}`,
        );
        expect(maxStep).toBeGreaterThan(1e-2);
        expect(maxGap / maxStep, label).toBeLessThan(REL_TOL);
      }
      expect(ref.clipFraction).toBeGreaterThan(0);
      expect(ref.tokens).toBeLessThan(c.perStep.reduce((n, s) => n + s.mask.reduce((x, y) => x + y, 0), 0)); // the δ mask dropped some
    } finally {
      await perStepEngine.close();
      await branchedEngine.close();
      await narrowEngine.close();
    }
  }, 240_000);

  it('a step with branched sequences killed between micro-batches resumes from its save and ends as the straight step, bit for bit', async () => {
    const o = options({ microBatchTokens: 40 });
    const setup = await TorchEngine.start(o);
    const c = await makeCase(setup);
    await setup.close();
    // Per-step sequences first, then one micro-batch per trunk with branches (the worker's order).
    const batch = [...c.perStep, ...c.branched];
    const straight = await TorchEngine.start(o);
    const expected = await straight.trainStep(batch, OBJECTIVE, 0.9);
    await straight.close();
    const resume = { file: join(tempDir(), 'step.pt'), everySeconds: 0 };
    const killed = await TorchEngine.start(o);
    let total = 0;
    killed.setProgressListener((op, done, n) => {
      total = n;
      // After the first trunk with branches, before the second.
      if (op === 'train_step' && done === n - 1) process.kill(killed.pid, 'SIGKILL');
    });
    await expect(killed.trainStep(batch, OBJECTIVE, 0.9, undefined, resume)).rejects.toThrow();
    expect(total).toBeGreaterThan(2);
    expect(existsSync(resume.file)).toBe(true);
    const resumed = await TorchEngine.start(o);
    try {
      const { resumedMicroBatches, ...stats } = await resumed.trainStep(batch, OBJECTIVE, 0.9, undefined, resume);
      expect(resumedMicroBatches).toBe(total - 1);
      expect(stats).toEqual(expected);
    } finally {
      await resumed.close();
    }
  }, 240_000);
});
