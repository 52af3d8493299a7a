/**
 * Hugging Face interoperability against PyTorch: checkpoints made by `transformers` (Qwen2 tied,
 * Llama untied with GQA 4:1, head_dim ≠ hidden/heads, attention and MLP biases; fp32 single file,
 * fp32 sharded, bf16, fp16 sharded; llama3, YaRN and linear rotary scaling) give the same logits and log-probs in our engine; chat
 * templates render as `apply_chat_template` does; LoRA adapters cross between PEFT and our engine.
 *
 * Tolerance, for every dtype: |ours − reference| ≤ 1e-4 · max(1, |reference|) per element. For
 * bf16 / fp16 the reference is what transformers computes after upcasting the stored weights to
 * fp32 (`from_pretrained(dtype=...).float()`); the upcast is exact, so the fp32 tolerance applies.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pythonGate, runPython } from '../../../test/support/python.ts';
import { initBackend, tf } from '../tfjs/backend.ts';
import { loadModelDir } from '../tfjs/checkpoint.ts';
import { TfjsEngine, type EngineOptions } from '../tfjs/engine.ts';
import { saveLoraAdapter } from '../tfjs/lora.ts';
import { Qwen2Model } from '../tfjs/qwen2.ts';
import { readSafetensorsHeader } from '../safetensors.ts';
import type { ObjectiveConfig } from '../../algo/objective.ts';
import { ChatTemplate, renderChatTemplate, type ChatMessage } from '../chat-template.ts';

const SCRIPT = join(import.meta.dirname, 'make_reference.py');
const gate = pythonGate(['torch', 'transformers', 'peft']);
const TOL = 1e-4;

interface Outputs {
  logits: number[][][];
  logprobs: number[][];
}
interface Reference {
  sequences: number[][];
  long_sequences: number[][];
  models: Record<string, Outputs & { dir: string; files: string[]; rope_type?: string }>;
  chat: Record<string, { messages: ChatMessage[]; add_generation_prompt: boolean; tools?: unknown[]; text: string }[]>;
  peft_adapter: Outputs & { dir: string; base: string };
}

/** Largest |a − b| / max(1, |b|) over two equally shaped nested arrays. */
function worstRelative(a: unknown, b: unknown, path = ''): number {
  if (Array.isArray(b)) {
    expect(Array.isArray(a) && a.length === b.length, `shape differs at ${path}`).toBe(true);
    return b.reduce((m: number, x, i) => Math.max(m, worstRelative((a as unknown[])[i], x, `${path}[${i}]`)), 0);
  }
  return Math.abs((a as number) - (b as number)) / Math.max(1, Math.abs(b as number));
}

/** Logits [T, V] of each sequence alone (positions 0..T−1, causal mask), as transformers computes them. */
function sequenceLogits(model: Qwen2Model, seqs: number[][]): number[][][] {
  return seqs.map((ids) =>
    tf.tidy(() => {
      const n = ids.length;
      const mask = new Float32Array(n * n);
      for (let q = 0; q < n; q++) for (let k = 0; k < n; k++) mask[q * n + k] = k <= q ? 0 : -1e9;
      const { hidden } = model.forward(
        tf.tensor2d(ids, [1, n], 'int32'),
        tf.tensor2d([...ids.keys()], [1, n], 'int32'),
        tf.tensor4d(mask, [1, 1, n, n]),
      );
      return model.logits(hidden.reshape([n, hidden.shape[2]]) as tf.Tensor2D).arraySync() as number[][];
    }),
  );
}

function engineFor(model: Qwen2Model, tokenizer: TfjsEngine['tokenizer'], o: Partial<EngineOptions> = {}): TfjsEngine {
  return new TfjsEngine(model, tokenizer, {
    optimizer: { lr: 5e-2, beta1: 0.9, beta2: 0.99, eps: 1e-8, weightDecay: 0 },
    maxGradNorm: 0,
    microBatchTokens: 100_000,
    endTokens: [2],
    padToken: 0,
    ...o,
  });
}

describe.skipIf(!gate.available)(`Hugging Face checkpoints, chat templates and PEFT adapters match PyTorch (${gate.label})`, () => {
  let work: string;
  let ref: Reference;

  beforeAll(async () => {
    await initBackend();
    work = mkdtempSync(join(tmpdir(), 'empo2-hf-'));
    await runPython(SCRIPT, ['build', work]);
    ref = JSON.parse(readFileSync(join(work, 'reference.json'), 'utf8'));
  }, 300_000);
  afterAll(() => {
    if (work) rmSync(work, { recursive: true, force: true });
  });

  const layouts: [string, string, boolean][] = [
    ['qwen2-fp32', 'F32', false],
    ['qwen2-bf16', 'BF16', false],
    ['llama-fp32-sharded', 'F32', true],
    ['llama-fp16-sharded', 'F16', true],
  ];
  for (const [name, dtype, sharded] of layouts) {
    it(`${name}: logits and log-probs equal transformers' (${dtype}${sharded ? ', sharded with an index' : ', single file'})`, async () => {
      const m = ref.models[name];
      // The layout under test really is what the name says.
      const weightFiles = m.files.filter((f) => f.endsWith('.safetensors'));
      expect(m.files.includes('model.safetensors.index.json')).toBe(sharded);
      expect(weightFiles.length > 1).toBe(sharded);
      for (const f of weightFiles) for (const e of readSafetensorsHeader(join(m.dir, f)).entries) expect(e.dtype).toBe(dtype);

      const { model, tokenizer } = loadModelDir(m.dir);
      expect(worstRelative(sequenceLogits(model, ref.sequences), m.logits)).toBeLessThan(TOL);
      // Scored as one padded batch by the engine: prompt = first token, response = the rest.
      const engine = engineFor(model, tokenizer);
      const lp = await engine.logprobs(ref.sequences.map((s) => ({ prompt: s.slice(0, 1), response: s.slice(1) })));
      expect(worstRelative(lp, m.logprobs)).toBeLessThan(TOL);
      engine.dispose();
    });
  }

  const scaledRope: [string, string][] = [
    ['llama-rope-llama3', 'llama3'],
    ['qwen2-rope-yarn', 'yarn'],
    ['llama-rope-linear-v4', 'linear'],
  ];
  for (const [name, ropeType] of scaledRope) {
    it(`${name}: ${ropeType}-scaled rotary embeddings give transformers' logits and log-probs past the original context`, async () => {
      const m = ref.models[name];
      expect(m.rope_type).toBe(ropeType);
      const { model, tokenizer } = loadModelDir(m.dir);
      expect(model.config.rope_scaling?.rope_type).toBe(ropeType);
      expect(worstRelative(sequenceLogits(model, ref.long_sequences), m.logits)).toBeLessThan(TOL);
      const engine = engineFor(model, tokenizer);
      const lp = await engine.logprobs(ref.long_sequences.map((s) => ({ prompt: s.slice(0, 1), response: s.slice(1) })));
      expect(worstRelative(lp, m.logprobs)).toBeLessThan(TOL);
      // The same weights without the scaling are far off, so the comparison above tests the scaling.
      const unscaled = new Qwen2Model({ ...model.config, rope_scaling: null }, model.params);
      expect(worstRelative(sequenceLogits(unscaled, ref.long_sequences), m.logits)).toBeGreaterThan(100 * TOL);
      engine.dispose();
    });
  }

  for (const name of ['qwen2-fp32', 'qwen2-bf16', 'llama-fp32-sharded']) {
    it(`${name}: the chat template renders exactly as apply_chat_template`, () => {
      const cases = ref.chat[name];
      expect(cases.length).toBeGreaterThan(0);
      const template = ChatTemplate.fromDir(ref.models[name].dir);
      for (const c of cases) {
        const opts = { addGenerationPrompt: c.add_generation_prompt, tools: c.tools };
        expect(template.render(c.messages, opts)).toBe(c.text);
        expect(renderChatTemplate(ref.models[name].dir, c.messages, opts)).toBe(c.text);
      }
    });
  }

  it('the template source follows transformers: tokenizer_config.json (qwen2-fp32) and chat_template.jinja (qwen2-bf16)', () => {
    expect(ChatTemplate.fromDir(ref.models['qwen2-fp32'].dir).source).toMatch(/tokenizer_config\.json$/);
    expect(ChatTemplate.fromDir(ref.models['qwen2-bf16'].dir).source).toMatch(/chat_template\.jinja$/);
  });

  it('a PEFT adapter (non-zero A and B, alpha/r = 3, five target modules) gives the same logits in our engine', () => {
    const { model } = loadModelDir(ref.peft_adapter.base, { adapter: ref.peft_adapter.dir });
    expect(model.lora!.modules.size).toBe(3 * 5);
    expect(model.lora!.scaling).toBe(3);
    expect(worstRelative(sequenceLogits(model, ref.sequences), ref.peft_adapter.logits)).toBeLessThan(TOL);
    // Without the adapter the logits are the base model's, far from the adapted ones.
    const base = loadModelDir(ref.peft_adapter.base, { adapter: false }).model;
    expect(worstRelative(sequenceLogits(base, ref.sequences), ref.peft_adapter.logits)).toBeGreaterThan(1e-2);
    model.dispose();
    base.dispose();
  });

  it('an adapter trained and saved by our engine loads in PEFT with the same logits', async () => {
    const baseDir = ref.models['llama-fp32-sharded'].dir;
    const { model, tokenizer } = loadModelDir(baseDir, {
      adapter: false,
      lora: { r: 3, alpha: 6, dropout: 0, targetModules: ['k_proj', 'o_proj', 'up_proj', 'down_proj'] },
      loraSeed: 5,
    });
    const engine = engineFor(model, tokenizer);
    const batch = ref.sequences.slice(1).map((s) => ({ prompt: s.slice(0, 2), response: s.slice(2) }));
    const old = await engine.logprobs(batch);
    const objective: ObjectiveConfig = { clipLow: 0.2, clipHigh: 0.2, dualClip: null, klCoef: 0, lowProbDelta: null };
    for (let step = 0; step < 2; step++) {
      await engine.trainStep(
        batch.map((s, i) => ({
          ...s,
          oldLogprobs: old[i],
          advantages: s.response.map(() => (i % 2 ? 1 : -1)),
          mask: s.response.map(() => 1),
        })),
        objective,
      );
    }
    // B moved off zero, so the comparison carries the adapters' contribution.
    const bNorm = tf.tidy(() => tf.addN([...model.lora!.modules.values()].map((m) => m.B.abs().sum())).dataSync()[0]);
    expect(bNorm).toBeGreaterThan(1e-2);
    const adapterDir = join(work, 'ours-adapter');
    await saveLoraAdapter(adapterDir, model, { baseModelNameOrPath: baseDir });
    const outJson = join(work, 'ours-adapter-logits.json');
    await runPython(SCRIPT, ['peft', baseDir, adapterDir, outJson]);
    const peft: Outputs = JSON.parse(readFileSync(outJson, 'utf8'));
    expect(worstRelative(sequenceLogits(model, ref.sequences), peft.logits)).toBeLessThan(TOL);
    engine.dispose();
  }, 120_000);
});
