/**
 * Dequantisation against llama.cpp's own Python package: make_reference.py writes a GGUF with
 * gguf.GGUFWriter (gguf's quantisers where it has them, random valid blocks for the K-quants) and
 * decodes it with gguf.quants.dequantize. Tolerance: none; every float32 must be bit-identical.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pythonGate, runPython } from '../../../test/support/python.ts';
import { readSafetensors, toFloat32 } from '../safetensors.ts';
import { SUPPORTED_TYPE_NAMES, dequantize, ggmlTypeName } from './dequantize.ts';
import { openGguf, readTensor, type GgufFile } from './file.ts';

const SCRIPT = join(import.meta.dirname, 'make_reference.py');
const gate = pythonGate(['gguf', 'safetensors']);

/** Index of the first element whose float32 bits differ, or -1. */
function firstBitDifference(a: Float32Array, b: Float32Array): number {
  const x = new Uint32Array(a.buffer, a.byteOffset, a.length);
  const y = new Uint32Array(b.buffer, b.byteOffset, b.length);
  if (x.length !== y.length) return Math.min(x.length, y.length);
  for (let i = 0; i < x.length; i++) if (x[i] !== y[i]) return i;
  return -1;
}

describe.skipIf(!gate.available)(`GGML dequantisation is bit-identical to gguf.quants.dequantize (${gate.label})`, () => {
  let work: string;
  let file: GgufFile;
  let reference: Map<string, Float32Array>;
  let referenceTypes: Record<string, string>;

  beforeAll(async () => {
    work = mkdtempSync(join(tmpdir(), 'empo2-gguf-quants-'));
    await runPython(SCRIPT, ['quants', work]);
    file = await openGguf(join(work, 'quants.gguf'));
    const ref = readSafetensors(join(work, 'quants-reference.safetensors'));
    reference = new Map([...ref.tensors].map(([name, t]) => [name, toFloat32(t)]));
    referenceTypes = JSON.parse(ref.metadata.types);
  }, 300_000);
  afterAll(() => {
    if (work) rmSync(work, { recursive: true, force: true });
  });

  it('the reference file holds every supported type, quantiser output for each type gguf can quantise', () => {
    const types = new Set(file.tensors.map((t) => ggmlTypeName(t.type)));
    expect([...types].sort()).toEqual([...SUPPORTED_TYPE_NAMES].sort());
    for (const name of ['BF16', 'Q4_0', 'Q4_1', 'Q5_0', 'Q5_1', 'Q8_0'])
      expect(file.byName.has(`${name.toLowerCase()}.quantised`)).toBe(true);
  });

  it('every tensor decodes to the reference bit for bit', () => {
    expect(file.tensors.length).toBe(reference.size);
    for (const tensor of file.tensors) {
      expect(ggmlTypeName(tensor.type), tensor.name).toBe(referenceTypes[tensor.name]);
      expect(tensor.shape, tensor.name).toEqual([3, 512]);
      const ours = readTensor(file, tensor);
      const theirs = reference.get(tensor.name)!;
      const at = firstBitDifference(ours, theirs);
      expect(at, `${tensor.name} (${ggmlTypeName(tensor.type)}): element ${at} is ${ours[at]}, reference ${theirs[at]}`).toBe(-1);
      // Not a vacuous match: the tensor holds varied, mostly nonzero values.
      expect(new Set(ours).size, tensor.name).toBeGreaterThan(10);
    }
  });
});

describe('dequantize refuses what it cannot decode', () => {
  it('names an unsupported type', () => {
    expect(() => dequantize(16 /* IQ2_XXS */, new Uint8Array(66), 256, 'blk.0.ffn_up.weight')).toThrow(
      /blk\.0\.ffn_up\.weight: tensor type IQ2_XXS is not supported \(supported: F32, F16, BF16, Q4_0/,
    );
  });
  it('refuses a partial block and a wrong byte count', () => {
    expect(() => dequantize(2 /* Q4_0 */, new Uint8Array(18), 31, 'w')).toThrow(/31 elements is not a whole number of Q4_0 blocks of 32/);
    expect(() => dequantize(2, new Uint8Array(17), 32, 'w')).toThrow(/17 bytes given, Q4_0 × 32 needs 18/);
  });
});
