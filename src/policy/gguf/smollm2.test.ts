/**
 * The real model `npm run setup` installs: SmolLM2-135M-Instruct's Q4_1 GGUF, imported now by
 * the current code, against transformers loading the same GGUF itself (make_reference.py smollm2):
 *   - every dequantised weight bit-identical (sha256 of the float32 bytes);
 *   - the same token ids as transformers' GGUF-built tokenizer on 200+ of 306 varied strings
 *     (unicode, whitespace runs, digits, ChatML markers); on the rest, where whitespace runs into a
 *     number, transformers ignores the file's pre-tokenizer ("smollm") and our ids are those of the
 *     same tokenizer with llama.cpp's split for it; Python `tokenizers` and transformers load the
 *     converted tokenizer.json / folder and agree with ours on all of them;
 *   - the chat template renders as transformers' apply_chat_template;
 *   - next-token logits within 1e-4 · max(1, |reference|) through our TypeScript engine;
 *   - a greedy ChatML answer to "What is the capital of France?" that says Paris.
 * Skipped, with the reason in its title, only when models/smollm2-135m-instruct is absent.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createHash } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { REPO_ROOT, pythonGate, runPython } from '../../../test/support/python.ts';
import { initBackend } from '../tfjs/backend.ts';
import { loadModelDir, type LoadedPolicy } from '../tfjs/checkpoint.ts';
import { TfjsEngine } from '../tfjs/engine.ts';
import { readSafetensors, toFloat32 } from '../safetensors.ts';
import { ChatTemplate, renderChatTemplate, type ChatMessage } from '../chat-template.ts';
import { importGguf } from './import.ts';
import { sequenceLogits, worstRelative } from '../../../test/support/logits.ts';

const MODEL_DIR = join(REPO_ROOT, 'models', 'smollm2-135m-instruct');
const GGUF = join(MODEL_DIR, 'SmolLM2-135M-Instruct.Q4_1.gguf');
const SCRIPT = join(import.meta.dirname, 'make_reference.py');
const TOL = 1e-4;

const installed = existsSync(MODEL_DIR);
if (!installed) console.warn(`[smollm2] skipping: ${MODEL_DIR} is absent (run 'npm run setup' to install SmolLM2-135M-Instruct)`);
const gate = installed ? pythonGate(['gguf', 'torch', 'transformers', 'tokenizers']) : { available: false, label: '' };
const label = installed ? gate.label : `SKIPPED: models/smollm2-135m-instruct is absent (run 'npm run setup')`;

interface Reference {
  strings: string[];
  ids: number[][];
  ids_llama_cpp_split: number[][];
  ids_tokenizers_on_ours: number[][];
  ids_transformers_on_ours: number[][];
  conversations: ChatMessage[][];
  chat: string[];
  chat_transformers_on_ours: string[];
  weights_sha256: Record<string, string>;
  prompts: number[][];
  greedy: { prompt: number[]; tokens: number[]; text: string };
}

describe.skipIf(!installed || !gate.available)(
  `SmolLM2-135M-Instruct imported from its GGUF matches transformers on the same GGUF (${label})`,
  () => {
    let work: string;
    let dir: string;
    let ref: Reference;
    let logits: Map<string, Float32Array>;
    let policy: LoadedPolicy;

    beforeAll(async () => {
      expect(existsSync(GGUF), `${GGUF} should be installed next to the converted model`).toBe(true);
      await initBackend();
      work = mkdtempSync(join(tmpdir(), 'empo2-smollm2-'));
      dir = join(work, 'smollm2-hf');
      await importGguf(GGUF, dir);
      await runPython(SCRIPT, ['smollm2', dir, GGUF, work], 600_000);
      ref = JSON.parse(readFileSync(join(work, 'smollm2.json'), 'utf8'));
      logits = new Map([...readSafetensors(join(work, 'smollm2-logits.safetensors')).tensors].map(([k, t]) => [k, toFloat32(t)]));
      policy = loadModelDir(dir);
    }, 900_000);
    afterAll(() => {
      policy?.model.dispose();
      if (work) rmSync(work, { recursive: true, force: true });
    });

    it('every dequantised weight is bit-identical to transformers loading the GGUF', () => {
      const { tensors } = readSafetensors(join(dir, 'model.safetensors'));
      expect(Object.keys(ref.weights_sha256).sort()).toEqual([...tensors.keys()].sort());
      for (const [name, t] of tensors) {
        const bytes = new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength);
        expect(createHash('sha256').update(bytes).digest('hex'), name).toBe(ref.weights_sha256[name]);
      }
    });

    it("gives transformers' GGUF tokenizer's ids on 200+ varied strings, and llama.cpp's digit split on the rest", () => {
      expect(ref.strings.length).toBeGreaterThanOrEqual(300);
      const joined = ref.strings.join('');
      expect(/<\|im_start\|>/.test(joined) && /\d{4}/.test(joined) && /[^\x00-\x7f]/.test(joined) && /\s{3}/.test(joined)).toBe(true);
      let sameAsTransformers = 0;
      ref.strings.forEach((s, i) => {
        const ours = policy.tokenizer.encode(s);
        // transformers' GGUF loader ignores tokenizer.ggml.pre = "smollm" (it splits as GPT-2); the
        // model's tokenizer and llama.cpp isolate every number character first. The two differ only
        // where whitespace runs into a number (GPT-2's split attaches one space to it).
        expect(ours, `ours vs transformers with llama.cpp's "smollm" split: ${JSON.stringify(s)}`).toEqual(ref.ids_llama_cpp_split[i]);
        if (JSON.stringify(ref.ids[i]) === JSON.stringify(ref.ids_llama_cpp_split[i])) {
          expect(ours, JSON.stringify(s)).toEqual(ref.ids[i]);
          sameAsTransformers++;
        } else {
          expect(
            /\s\p{N}/u.test(s),
            `differs from transformers' GGUF tokenizer without whitespace before a number: ${JSON.stringify(s)}`,
          ).toBe(true);
        }
        expect(ref.ids_tokenizers_on_ours[i], `tokenizers on our tokenizer.json: ${JSON.stringify(s)}`).toEqual(ours);
        expect(ref.ids_transformers_on_ours[i], `transformers on our folder: ${JSON.stringify(s)}`).toEqual(ours);
        // Decoding gives the text back (the vocabulary is byte-level: nothing is lost).
        expect(policy.tokenizer.decode(ours)).toBe(s);
      });
      expect(sameAsTransformers).toBeGreaterThanOrEqual(200);
    });

    it('renders the chat template as apply_chat_template does', () => {
      const template = ChatTemplate.fromDir(dir);
      ref.conversations.forEach((c, i) => {
        expect(renderChatTemplate(template, c, { addGenerationPrompt: true })).toBe(ref.chat[i]);
        expect(ref.chat_transformers_on_ours[i]).toBe(ref.chat[i]);
      });
    });

    it('gives next-token logits within 1e-4 of transformers', () => {
      ref.prompts.forEach((prompt, i) => {
        expect(worstRelative(sequenceLogits(policy.model, prompt, true), logits.get(`last.${i}`)!)).toBeLessThan(TOL);
      });
      expect(worstRelative(sequenceLogits(policy.model, ref.prompts[3]), logits.get('all.3')!)).toBeLessThan(TOL);
    });

    it('answers "What is the capital of France?" with Paris, greedily, token for token as transformers', async () => {
      const imEnd = policy.tokenizer.requireTokenId('<|im_end|>');
      const engine = new TfjsEngine(policy.model, policy.tokenizer, {
        optimizer: { lr: 0, beta1: 0.9, beta2: 0.99, eps: 1e-8, weightDecay: 0 },
        maxGradNorm: 0,
        microBatchTokens: 16_384,
        endTokens: [imEnd],
        padToken: imEnd,
      });
      const template = ChatTemplate.fromDir(dir);
      const prompt = policy.tokenizer.encode(
        renderChatTemplate(template, [{ role: 'user', content: 'What is the capital of France?' }], { addGenerationPrompt: true }),
      );
      expect(prompt).toEqual(ref.greedy.prompt);
      const [answer] = await engine.generate([prompt], { temperature: 0, topP: 1, maxTokens: 24, seed: 0 });
      expect(answer.text).toContain('Paris');
      const expected = ref.greedy.tokens.slice(0, answer.tokens.length);
      expect(answer.tokens).toEqual(expected);
    });
  },
);
