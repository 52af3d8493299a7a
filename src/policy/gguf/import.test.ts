/**
 * GGUF import against transformers' own GGUF loader, on tiny Llama and Qwen2 models that
 * make_reference.py writes as llama.cpp's converter does (gguf's tensor-name map, q/k rows
 * permuted for Llama, weights in ten GGML types, a trained byte-level BPE vocabulary, a ChatML
 * template). transformers loads each .gguf by itself (`from_pretrained(gguf_file=...)`); our import
 * of the same file must give:
 *   - the same weights, bit for bit (so the rotary permutation is undone and every type decoded);
 *   - logits within 1e-4 · max(1, |reference|) per element, through our TypeScript engine;
 *   - the same token ids on mixed strings, with the pre-tokenizer each file names ("llama-bpe"
 *     splits digits in threes, "qwen2" one by one), and the same chat-template rendering.
 * And files it cannot convert are refused with the key or tensor named.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { copyFileSync, existsSync, mkdtempSync, readFileSync, rmSync, statSync, truncateSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pythonGate, runPython } from '../../../test/support/python.ts';
import { runEmpo2 as empo2 } from '../../../test/support/empo2-cli.ts';
import { sequenceLogits, worstRelative } from '../../../test/support/logits.ts';
import { initBackend, tf } from '../tfjs/backend.ts';
import { loadModelDir } from '../tfjs/checkpoint.ts';
import { readSafetensors, toFloat32 } from '../safetensors.ts';
import { ChatTemplate, renderChatTemplate, type ChatMessage } from '../chat-template.ts';
import { IMPORT_RECORD, importGguf, unpermuteRotaryRows } from './import.ts';
import { ggufCacheDir, resolveModelPath } from './model-path.ts';

const SCRIPT = join(import.meta.dirname, 'make_reference.py');
const gate = pythonGate(['gguf', 'torch', 'transformers', 'tokenizers']);
const TOL = 1e-4;

interface TinyReference {
  strings: string[];
  conversations: ChatMessage[][];
  sequences: number[][];
  long_sequence: number[];
  models: Record<string, { file: string; logits: number[][][]; ids: number[][]; chat: string[]; rope?: Record<string, unknown> }>;
}

describe('unpermuteRotaryRows', () => {
  it("inverts llama.cpp's permute (rows of each head regrouped as pairs)", () => {
    // 2 heads of 4 rows, 1 column: llama.cpp stores original rows [0,2,1,3 | 4,6,5,7].
    const stored = Float32Array.from([0, 2, 1, 3, 4, 6, 5, 7]);
    expect([...unpermuteRotaryRows(stored, 2, 8)]).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
    // With 2 columns, whole rows move.
    const wide = Float32Array.from([0, 10, 2, 12, 1, 11, 3, 13]);
    expect([...unpermuteRotaryRows(wide, 1, 4)]).toEqual([0, 10, 1, 11, 2, 12, 3, 13]);
  });
});

describe.skipIf(!gate.available)(`GGUF import matches transformers loading the same GGUF (${gate.label})`, () => {
  let work: string;
  let ref: TinyReference;

  beforeAll(async () => {
    await initBackend();
    work = mkdtempSync(join(tmpdir(), 'empo2-gguf-import-'));
    await runPython(SCRIPT, ['tiny', work]);
    ref = JSON.parse(readFileSync(join(work, 'tiny.json'), 'utf8'));
  }, 300_000);
  afterAll(() => {
    if (work) rmSync(work, { recursive: true, force: true });
  });

  for (const name of ['tiny-llama', 'tiny-qwen2']) {
    it(`${name}: weights bit-identical, logits within 1e-4, same token ids and chat rendering`, async () => {
      const m = ref.models[name];
      const dir = join(work, `${name}-hf`);
      const result = await importGguf(m.file, dir);
      expect(Object.keys(result.types).length).toBeGreaterThanOrEqual(5);
      for (const f of [
        'config.json',
        'generation_config.json',
        'tokenizer.json',
        'tokenizer_config.json',
        'model.safetensors',
        IMPORT_RECORD,
      ])
        expect(existsSync(join(dir, f)), f).toBe(true);

      const ours = readSafetensors(join(dir, 'model.safetensors')).tensors;
      const theirs = readSafetensors(join(work, `${name}.state.safetensors`)).tensors;
      expect([...ours.keys()].sort()).toEqual([...theirs.keys()].sort());
      for (const [key, t] of theirs) {
        const a = new Uint32Array(toFloat32(ours.get(key)!).buffer.slice(0));
        const b = new Uint32Array(toFloat32(t).buffer.slice(0));
        expect(ours.get(key)!.shape, key).toEqual(t.shape);
        expect(
          a.every((v, i) => v === b[i]),
          `${key} differs from transformers' dequantised weights`,
        ).toBe(true);
      }

      const { model, tokenizer } = loadModelDir(dir);
      try {
        ref.sequences.forEach((seq, i) => expect(worstRelative(sequenceLogits(model, seq), m.logits[i].flat())).toBeLessThan(TOL));
        ref.strings.forEach((s, i) => expect(tokenizer.encode(s), JSON.stringify(s)).toEqual(m.ids[i]));
        const template = ChatTemplate.fromDir(dir);
        ref.conversations.forEach((c, i) => expect(renderChatTemplate(template, c, { addGenerationPrompt: true })).toBe(m.chat[i]));
      } finally {
        model.dispose();
      }
    });
  }

  for (const [name, ropeType] of [
    ['tiny-llama3-rope', 'llama3'],
    ['tiny-llama-linear-rope', 'linear'],
  ] as const) {
    it(`${name}: ${ropeType} rotary scaling (${ropeType === 'llama3' ? 'a rope_freqs tensor' : 'metadata'}) becomes rope_scaling; logits of the original model over 300 positions`, async () => {
      const m = ref.models[name];
      const dir = join(work, `${name}-hf`);
      await importGguf(m.file, dir);
      const config = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8'));
      expect(config.rope_scaling).toEqual(
        ropeType === 'llama3'
          ? { rope_type: 'llama3', factor: 8, low_freq_factor: 1, high_freq_factor: 4, original_max_position_embeddings: 8192 }
          : { rope_type: 'linear', factor: 4 },
      );
      const { model } = loadModelDir(dir);
      try {
        const reference = (m.logits as unknown as number[][]).flat();
        expect(worstRelative(sequenceLogits(model, ref.long_sequence), reference)).toBeLessThan(TOL);
        // Without the scaling the same weights are far off: the comparison above tests it.
        const { Qwen2Model } = await import('../tfjs/qwen2.ts');
        const unscaled = new Qwen2Model({ ...model.config, rope_scaling: null }, model.params);
        expect(worstRelative(sequenceLogits(unscaled, ref.long_sequence), reference)).toBeGreaterThan(100 * TOL);
      } finally {
        model.dispose();
      }
    });
  }

  it("refuses rotary factors that are not Llama 3's, naming the tensor", async () => {
    const { llama3ScalingFromFactors } = await import('./config.ts');
    const factors = Float32Array.from({ length: 32 }, (_, i) => 1 + i / 4);
    expect(() => llama3ScalingFromFactors(factors, 10000, 64, 'x.gguf: tensor "rope_freqs.weight"')).toThrow(
      /x\.gguf: tensor "rope_freqs\.weight" does not hold Llama 3 rotary factors \(/,
    );
    expect(() => llama3ScalingFromFactors(new Float32Array(31).fill(1), 10000, 64, 'w')).toThrow(
      /w has 31 entries; heads of 64 dimensions need 32/,
    );
    expect(llama3ScalingFromFactors(new Float32Array(32).fill(1), 10000, 64, 'w')).toBeNull();
  });

  it('the Llama rotary permutation matters: without undoing it the logits are far off', async () => {
    const dir = join(work, 'tiny-llama-check');
    await importGguf(ref.models['tiny-llama'].file, dir);
    const { model } = loadModelDir(dir);
    try {
      const q = model.params.get('model.layers.0.self_attn.q_proj.weight')!;
      const permutedBack = tf.tensor(unpermuteRotaryRows(q.dataSync() as Float32Array, 4, q.shape[0]).slice(), q.shape);
      // Applying the inverse twice is not the identity, so undoing it is a real change to the weights.
      q.assign(permutedBack);
      const worst = worstRelative(sequenceLogits(model, ref.sequences[0]), ref.models['tiny-llama'].logits[0].flat());
      expect(worst).toBeGreaterThan(100 * TOL);
    } finally {
      model.dispose();
    }
  });

  const refused: [string, RegExp][] = [
    ['arch-gpt2.gguf', /general\.architecture "gpt2" is not supported \(only "llama" and "qwen2"\)/],
    [
      'tokenizer-llama.gguf',
      /metadata "tokenizer\.ggml\.model" is "llama"; only byte-level BPE vocabularies .* \(this is a SentencePiece vocabulary\)/,
    ],
    ['type-iq4nl.gguf', /tensor "blk\.0\.attn_q\.weight": tensor type IQ4_NL is not supported \(supported: F32, F16, BF16/],
    ['extra-tensor.gguf', /tensor "blk\.0\.attn_sinks\.weight" has no counterpart in a LlamaForCausalLM checkpoint/],
  ];
  for (const [file, message] of refused) {
    it(`refuses ${file} with the key or tensor named, writing nothing`, async () => {
      const out = join(work, `refused-${file}`);
      await expect(importGguf(join(work, file), out)).rejects.toThrow(message);
      expect(existsSync(out)).toBe(false);
    });
  }

  it('refuses a truncated file naming the first tensor past the end, and a missing header', async () => {
    const cut = join(work, 'truncated.gguf');
    copyFileSync(join(work, 'ok.gguf'), cut);
    truncateSync(cut, statSync(cut).size - 100);
    await expect(importGguf(cut, join(work, 'truncated-out'))).rejects.toThrow(
      /truncated\.gguf: tensor "blk\.0\.ffn_down\.weight" needs bytes \d+\.\.\d+ but the file has \d+ bytes: the file is truncated/,
    );
    truncateSync(cut, 200);
    await expect(importGguf(cut, join(work, 'truncated-out'))).rejects.toThrow(
      /truncated\.gguf: not a readable GGUF file \(200 bytes; truncated or corrupt header\?\)/,
    );
    expect(existsSync(join(work, 'truncated-out'))).toBe(false);
  });

  it('refuses to overwrite a non-empty folder, and replaces it only when asked', async () => {
    const out = join(work, 'existing');
    await importGguf(join(work, 'ok.gguf'), out);
    writeFileSync(join(out, 'keep.txt'), 'mine');
    await expect(importGguf(join(work, 'ok.gguf'), out)).rejects.toThrow(/already exists and is not empty/);
    expect(readFileSync(join(out, 'keep.txt'), 'utf8')).toBe('mine');
    await importGguf(join(work, 'ok.gguf'), out, { replace: true });
    expect(existsSync(join(out, 'keep.txt'))).toBe(false);
  });

  it('writes shards with an index when the weights exceed the shard size, and they load the same', async () => {
    const dir = join(work, 'sharded');
    await importGguf(ref.models['tiny-qwen2'].file, dir, { maxShardBytes: 1 << 20 });
    const index = JSON.parse(readFileSync(join(dir, 'model.safetensors.index.json'), 'utf8'));
    expect(new Set(Object.values(index.weight_map)).size).toBeGreaterThan(2);
    const { model } = loadModelDir(dir);
    try {
      expect(worstRelative(sequenceLogits(model, ref.sequences[1]), ref.models['tiny-qwen2'].logits[1].flat())).toBeLessThan(TOL);
    } finally {
      model.dispose();
    }
  });

  it('empo2 import-gguf writes the folder and says what it imported; a refused file exits non-zero with the reason', async () => {
    const out = join(work, 'cli-out');
    const ok = await empo2(['import-gguf', ref.models['tiny-qwen2'].file, '--out', out]);
    expect(ok.stderr).toBe('');
    expect(ok.code).toBe(0);
    expect(ok.stdout).toMatch(/imported .*tiny-qwen2\.gguf \(qwen2, [\d,]+ parameters; tensors: .*Q6_K.*\) into .*cli-out in [\d.]+ s/);
    expect(existsSync(join(out, 'model.safetensors'))).toBe(true);
    const bad = await empo2(['import-gguf', join(work, 'arch-gpt2.gguf'), '--out', join(work, 'cli-bad')]);
    expect(bad.code).not.toBe(0);
    expect(bad.stderr).toMatch(/^empo2: error: .*arch-gpt2\.gguf: general\.architecture "gpt2" is not supported/);
    expect(bad.stderr).not.toMatch(/\n\s+at /);
  });

  it('empo2 eval takes a .gguf file: imported into <name>-hf/ beside it, then evaluated', async () => {
    const file = join(work, 'eval-me.gguf');
    copyFileSync(ref.models['tiny-llama'].file, file);
    const settings = ['env.tasks=[fetch]', 'env.eval_variations=1', 'env.max_steps=2'].flatMap((s) => ['--set', s]);
    const r = await empo2(['eval', file, ...settings, '--json', join(work, 'eval.json')]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toContain(`importing ${file} into ${join(work, 'eval-me-hf')}`);
    expect(existsSync(join(work, 'eval-me-hf', IMPORT_RECORD))).toBe(true);
    expect(JSON.parse(readFileSync(join(work, 'eval.json'), 'utf8'))).toBeTruthy();
  }, 300_000);

  it('empo2 serve loads a .gguf file through the same cache', async () => {
    const { loadServedModel } = await import('../../serve/load.ts');
    const file = join(work, 'serve-me.gguf');
    copyFileSync(ref.models['tiny-qwen2'].file, file);
    const served = await loadServedModel(file);
    try {
      expect(served.modelDir).toBe(join(work, 'serve-me-hf'));
      expect(served.vocabSize).toBe(420);
    } finally {
      served.engine.dispose();
    }
  });

  it('model.path naming a .gguf file imports it once beside it, reuses it, and redoes it when the file changes', async () => {
    const file = join(work, 'cached.gguf');
    copyFileSync(join(work, 'ok.gguf'), file);
    const lines: string[] = [];
    const dir = await resolveModelPath(file, (l) => lines.push(l));
    expect(dir).toBe(ggufCacheDir(file));
    expect(dir).toBe(join(work, 'cached-hf'));
    expect(lines.filter((l) => l.startsWith('importing'))).toHaveLength(1);
    const made = statSync(join(dir, 'model.safetensors')).mtimeMs;
    expect(await resolveModelPath(file, (l) => lines.push(l))).toBe(dir);
    expect(lines.filter((l) => l.startsWith('importing'))).toHaveLength(1);
    expect(statSync(join(dir, 'model.safetensors')).mtimeMs).toBe(made);
    // A newer file (here: the same bytes, touched) is imported again.
    const later = new Date(Date.now() + 5000);
    utimesSync(file, later, later);
    await resolveModelPath(file, (l) => lines.push(l));
    expect(lines.filter((l) => l.startsWith('importing'))).toHaveLength(2);
    // A directory is passed through untouched, and a missing .gguf is named.
    expect(await resolveModelPath(dir)).toBe(dir);
    await expect(resolveModelPath(join(work, 'nope.gguf'))).rejects.toThrow(/nope\.gguf: no such GGUF file/);
  });
});
