import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import {
  bf16BitsToNumber,
  f16BitsToNumber,
  numberToBF16Bits,
  numberToF16Bits,
  readSafetensors,
  readSafetensorsDir,
  readSafetensorsHeader,
  toFloat32,
  writeSafetensors,
  type TensorToWrite,
} from './safetensors.ts';

const workDir = mkdtempSync(join(tmpdir(), 'empo2-safetensors-'));
afterAll(() => rmSync(workDir, { recursive: true, force: true }));
let fileCounter = 0;
const freshPath = (name = 'file') => join(workDir, `${name}-${fileCounter++}.safetensors`);

/** A safetensors file assembled from a header object and raw data bytes, exactly as given. */
function buildFile(header: unknown, data: number[] | Uint8Array, headerText?: string): Uint8Array {
  const json = new TextEncoder().encode(headerText ?? JSON.stringify(header));
  const bytes = new Uint8Array(8 + json.length + data.length);
  new DataView(bytes.buffer).setBigUint64(0, BigInt(json.length), true);
  bytes.set(json, 8);
  bytes.set(data, 8 + json.length);
  return bytes;
}

function writeRaw(bytes: Uint8Array): string {
  const path = freshPath('raw');
  writeFileSync(path, bytes);
  return path;
}

describe('reading a file built byte by byte', () => {
  // F32 1.0 = 0x3F800000, F32 -2.5 = 0xC0200000;
  // F16 0x3555 = 1.0101010101b x 2^-2 = 0.333251953125, F16 0x0001 = 2^-24 (smallest subnormal);
  // BF16 0x3FC0 = 1.5, BF16 0xC2F7 = -(1 + 0x77/128) x 2^6 = -123.5.
  const header = {
    __metadata__: { format: 'pt' },
    weights: { dtype: 'F32', shape: [2], data_offsets: [0, 8] },
    half: { dtype: 'F16', shape: [2], data_offsets: [8, 12] },
    brain: { dtype: 'BF16', shape: [1, 2], data_offsets: [12, 16] },
  };
  const data = [0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x20, 0xc0, 0x55, 0x35, 0x01, 0x00, 0xc0, 0x3f, 0xf7, 0xc2];
  const path = writeRaw(buildFile(header, data));

  it('decodes every dtype to the values computed by hand', () => {
    const { tensors, metadata } = readSafetensors(path);
    expect(metadata).toEqual({ format: 'pt' });
    expect([...tensors.keys()].sort()).toEqual(['brain', 'half', 'weights']);

    const weights = tensors.get('weights')!;
    expect(weights.dtype).toBe('F32');
    expect(Array.from(weights.data as Float32Array)).toEqual([1, -2.5]);

    const half = tensors.get('half')!;
    expect(Array.from(half.data as Uint16Array)).toEqual([0x3555, 0x0001]);
    expect(Array.from(toFloat32(half))).toEqual([0.333251953125, 2 ** -24]);

    const brain = tensors.get('brain')!;
    expect(brain.shape).toEqual([1, 2]);
    expect(Array.from(toFloat32(brain))).toEqual([1.5, -123.5]);
  });

  it('reads the header alone, and only the tensors a filter keeps', () => {
    const header = readSafetensorsHeader(path);
    expect(header.entries.map((e) => [e.name, e.dtype, e.byteLength])).toEqual([
      ['weights', 'F32', 8],
      ['half', 'F16', 4],
      ['brain', 'BF16', 4],
    ]);
    const only = readSafetensors(path, { filter: (name) => name === 'half' });
    expect([...only.tensors.keys()]).toEqual(['half']);
  });
});

describe('writing and reading back', () => {
  it('round-trips every kind of tensor with metadata, aligned as the format expects', () => {
    const tensors: Record<string, TensorToWrite> = {
      'model.embed.weight': { dtype: 'F32', shape: [2, 3], data: Float32Array.from([1, -2, 3.5, 0, 1e-30, -7e20]) },
      'ids.i32': { dtype: 'I32', shape: [3], data: Int32Array.from([-1, 0, 2 ** 31 - 1]) },
      'ids.i64': { dtype: 'I64', shape: [2], data: BigInt64Array.from([-(2n ** 62n), 5n]) },
      flags: { dtype: 'BOOL', shape: [3], data: Uint8Array.from([1, 0, 1]) },
      bytes: { dtype: 'U8', shape: [1], data: Uint8Array.from([255]) },
      double: { dtype: 'F64', shape: [], data: Float64Array.from([Math.PI]) },
      empty: { dtype: 'F32', shape: [0, 4], data: new Float32Array(0) },
      'as.f16': { dtype: 'F16', shape: [3], data: Float32Array.from([0.1, -65504, 1e-8]) },
      'as.bf16': { dtype: 'BF16', shape: [2], data: Float32Array.from([Math.PI, -1]) },
      'raw.bf16': { dtype: 'BF16', shape: [1], data: Uint16Array.from([0x3f80]) },
    };
    const path = freshPath('roundtrip');
    writeSafetensors(path, tensors, { format: 'pt', step: '12' });
    const { tensors: read, metadata } = readSafetensors(path);
    expect(metadata).toEqual({ format: 'pt', step: '12' });
    expect(new Set(read.keys())).toEqual(new Set(Object.keys(tensors)));

    for (const name of ['model.embed.weight', 'ids.i32', 'ids.i64', 'flags', 'bytes', 'double', 'empty', 'raw.bf16']) {
      expect(read.get(name)!.shape, name).toEqual(tensors[name].shape);
      expect(read.get(name)!.data, name).toEqual(tensors[name].data);
    }
    expect(read.get('double')!.shape).toEqual([]);
    // 16-bit floats come back rounded to their precision.
    const f16 = toFloat32(read.get('as.f16')!);
    expect(f16[0]).toBeCloseTo(0.1, 4);
    expect(f16[1]).toBe(-65504);
    expect(f16[2]).toBe(2 ** -24 * Math.round(1e-8 / 2 ** -24));
    expect(Array.from(toFloat32(read.get('as.bf16')!))).toEqual([3.140625, -1]);
    expect(toFloat32(read.get('raw.bf16')!)[0]).toBe(1);

    // The header is padded so data starts on an 8-byte boundary; each tensor sits at a multiple of its element size.
    const bytes = readFileSync(path);
    const headerLength = Number(bytes.readBigUInt64LE(0));
    expect((8 + headerLength) % 8).toBe(0);
    const header = JSON.parse(bytes.subarray(8, 8 + headerLength).toString('utf8'));
    const sizes: Record<string, number> = { F64: 8, I64: 8, F32: 4, I32: 4, F16: 2, BF16: 2, U8: 1, BOOL: 1 };
    for (const [name, entry] of Object.entries(header)) {
      if (name === '__metadata__') continue;
      const { dtype, data_offsets } = entry as { dtype: string; data_offsets: [number, number] };
      expect(data_offsets[0] % sizes[dtype], name).toBe(0);
    }
  });

  it('accepts a Map of tensors and writes nothing but the target file', () => {
    const dir = mkdtempSync(join(workDir, 'clean-'));
    const path = join(dir, 'model.safetensors');
    writeSafetensors(path, new Map([['w', { dtype: 'F32' as const, shape: [1], data: Float32Array.from([4]) }]]));
    writeSafetensors(path, new Map([['w', { dtype: 'F32' as const, shape: [1], data: Float32Array.from([5]) }]]));
    expect(readdirSync(dir)).toEqual(['model.safetensors']);
    expect(readSafetensors(path).tensors.get('w')!.data).toEqual(Float32Array.from([5]));
  });

  it('rejects bad tensors before touching the existing file', () => {
    const path = freshPath('keep');
    writeSafetensors(path, { w: { dtype: 'F32', shape: [2], data: Float32Array.from([1, 2]) } });
    const before = readFileSync(path);
    expect(() => writeSafetensors(path, { w: { dtype: 'F32', shape: [3], data: Float32Array.from([1, 2]) } })).toThrow(
      /tensor "w": shape \[3\] has 3 elements but data has 2/,
    );
    expect(() => writeSafetensors(path, { w: { dtype: 'I32', shape: [2], data: Float32Array.from([1, 2]) } })).toThrow(
      /dtype I32 needs a Int32Array, got a Float32Array/,
    );
    expect(() => writeSafetensors(path, { __metadata__: { dtype: 'F32', shape: [0], data: new Float32Array(0) } })).toThrow(/reserved/);
    expect(() =>
      writeSafetensors(path, { w: { dtype: 'F32', shape: [0], data: new Float32Array(0) } }, { step: 3 as unknown as string }),
    ).toThrow(/metadata\["step"\] is 3, not a string/);
    expect(readFileSync(path).equals(before)).toBe(true);
  });
});

describe('16-bit float conversions', () => {
  it('round-trips every half and bfloat16 bit pattern exactly', () => {
    const mismatches: string[] = [];
    for (let bits = 0; bits < 65536; bits++) {
      for (const [name, toNumber, toBits] of [
        ['F16', f16BitsToNumber, numberToF16Bits],
        ['BF16', bf16BitsToNumber, numberToBF16Bits],
      ] as const) {
        const value = toNumber(bits);
        const back = toBits(value);
        const same = Number.isNaN(value) ? Number.isNaN(toNumber(back)) : back === bits;
        if (!same) mismatches.push(`${name} 0x${bits.toString(16)} -> ${value} -> 0x${back.toString(16)}`);
      }
    }
    expect(mismatches).toEqual([]);
  });

  it('rounds to nearest even and saturates to infinity', () => {
    expect(numberToF16Bits(1 + 2 ** -11)).toBe(0x3c00); // halfway, 0x3c00 is even
    expect(numberToF16Bits(1 + 3 * 2 ** -11)).toBe(0x3c02); // halfway, rounds up to even
    expect(numberToF16Bits(1 + 2 ** -11 + 2 ** -20)).toBe(0x3c01); // just above halfway
    expect(numberToF16Bits(65519)).toBe(0x7bff);
    expect(numberToF16Bits(65520)).toBe(0x7c00);
    expect(numberToF16Bits(-1e9)).toBe(0xfc00);
    expect(numberToF16Bits(2 ** -25)).toBe(0); // halfway to the smallest subnormal, ties to even zero
    expect(numberToF16Bits(1.5 * 2 ** -25)).toBe(1);
    expect(numberToF16Bits(-0)).toBe(0x8000);
    expect(numberToBF16Bits(1 + 2 ** -8)).toBe(0x3f80); // halfway, stays even
    expect(numberToBF16Bits(1 + 3 * 2 ** -8)).toBe(0x3f82);
    expect(numberToBF16Bits(Number.NaN)).toBe(0x7fc0);
    expect(numberToBF16Bits(Infinity)).toBe(0x7f80);
  });

  it('converts 8-bit floats', () => {
    const e4m3 = toFloat32({ dtype: 'F8_E4M3', shape: [4], data: Uint8Array.from([0x38, 0x7e, 0xb0, 0x01]) });
    expect(Array.from(e4m3)).toEqual([1, 448, -0.5, 2 ** -9]);
    expect(Number.isNaN(toFloat32({ dtype: 'F8_E4M3', shape: [1], data: Uint8Array.from([0x7f]) })[0])).toBe(true);
    const e5m2 = toFloat32({ dtype: 'F8_E5M2', shape: [3], data: Uint8Array.from([0x3c, 0xc0, 0x7c]) });
    expect(Array.from(e5m2)).toEqual([1, -2, Infinity]);
  });
});

describe('corrupt files', () => {
  const good = { a: { dtype: 'F32', shape: [2], data_offsets: [0, 8] } };
  const eightBytes = [0, 0, 128, 63, 0, 0, 0, 64];

  const cases: [string, Uint8Array, RegExp][] = [
    ['too short for the length', Uint8Array.from([1, 2, 3]), /3 bytes is too short for the 8-byte header length/],
    [
      'header length past the end',
      (() => {
        const bytes = buildFile(good, eightBytes);
        new DataView(bytes.buffer).setBigUint64(0, 10_000n, true);
        return bytes;
      })(),
      /header length 10000 runs past the end of the file/,
    ],
    ['invalid JSON header', buildFile(null, eightBytes, '{"a": {"dtype": "F32",'), /invalid JSON header/],
    ['header that is not an object', buildFile(null, [], '[1, 2]'), /invalid JSON header: expected an object/],
    [
      'offsets past the data',
      buildFile({ a: { dtype: 'F32', shape: [2], data_offsets: [0, 12] } }, eightBytes),
      /tensor "a": data_offsets \[0, 12\] run past the end of the data \(8 bytes\)/,
    ],
    [
      'reversed offsets',
      buildFile({ a: { dtype: 'F32', shape: [2], data_offsets: [8, 0] } }, eightBytes),
      /tensor "a": data_offsets \[8,0\] is not \[begin, end\]/,
    ],
    [
      'overlapping tensors',
      buildFile(
        {
          a: { dtype: 'F32', shape: [2], data_offsets: [0, 8] },
          b: { dtype: 'F32', shape: [1], data_offsets: [4, 8] },
        },
        eightBytes,
      ),
      /tensor "b" \(bytes 4-8\) overlaps "a" \(bytes 0-8\)/,
    ],
    [
      'a hole between tensors',
      buildFile(
        {
          a: { dtype: 'F32', shape: [1], data_offsets: [0, 4] },
          b: { dtype: 'U8', shape: [2], data_offsets: [6, 8] },
        },
        eightBytes,
      ),
      /bytes 4-6 of the data belong to no tensor/,
    ],
    [
      'shape x dtype size different from the byte length',
      buildFile({ a: { dtype: 'F32', shape: [3], data_offsets: [0, 8] } }, eightBytes),
      /tensor "a": shape \[3\] of F32 needs 12 bytes but data_offsets span 8/,
    ],
    ['unknown dtype', buildFile({ a: { dtype: 'F12', shape: [2], data_offsets: [0, 8] } }, eightBytes), /tensor "a": unknown dtype "F12"/],
    [
      'negative dimension',
      buildFile({ a: { dtype: 'F32', shape: [-2], data_offsets: [0, 8] } }, eightBytes),
      /shape \[-2\] is not a list of non-negative integers/,
    ],
    ['truncated data', buildFile(good, eightBytes.slice(0, 6)), /run past the end of the data \(6 bytes\)/],
    ['trailing bytes', buildFile(good, [...eightBytes, 1, 2]), /tensors cover 8 bytes but the data section holds 10/],
    [
      'metadata that is not strings',
      buildFile({ __metadata__: { epoch: 3 }, ...good }, eightBytes),
      /__metadata__\["epoch"\] is 3, not a string/,
    ],
    ['a header that is not UTF-8', buildFile(null, eightBytes, '{"a": 1}').map((b, i) => (i === 10 ? 0xff : b)), /invalid JSON header/],
  ];

  it.each(cases)('%s', (_label, bytes, expected) => {
    const path = writeRaw(bytes);
    expect(() => readSafetensors(path)).toThrow(expected);
    // The message names the file.
    expect(() => readSafetensors(path)).toThrow(path);
  });

  it('names a missing file', () => {
    const path = join(workDir, 'nope.safetensors');
    expect(() => readSafetensors(path)).toThrow(`safetensors file not found: ${path}`);
  });
});

describe('model directories', () => {
  const tensor = (values: number[]): TensorToWrite => ({ dtype: 'F32', shape: [values.length], data: Float32Array.from(values) });

  it('reads a single model.safetensors', () => {
    const dir = mkdtempSync(join(workDir, 'single-'));
    writeSafetensors(join(dir, 'model.safetensors'), { w: tensor([1, 2]) }, { format: 'pt' });
    const { tensors, metadata } = readSafetensorsDir(dir);
    expect(tensors.get('w')!.data).toEqual(Float32Array.from([1, 2]));
    expect(metadata).toEqual({ format: 'pt' });
  });

  it('reads shards through model.safetensors.index.json', () => {
    const dir = mkdtempSync(join(workDir, 'sharded-'));
    const first = 'model-00001-of-00002.safetensors';
    const second = 'model-00002-of-00002.safetensors';
    writeSafetensors(join(dir, first), { 'layer.0.w': tensor([1, 2]), embed: tensor([3]) }, { format: 'pt' });
    writeSafetensors(join(dir, second), { 'layer.1.w': tensor([4, 5, 6]) }, { format: 'pt' });
    const weightMap = { 'layer.0.w': first, embed: first, 'layer.1.w': second };
    writeFileSync(join(dir, 'model.safetensors.index.json'), JSON.stringify({ metadata: { total_size: 24 }, weight_map: weightMap }));

    const { tensors, metadata } = readSafetensorsDir(dir);
    expect(Object.fromEntries([...tensors].map(([name, t]) => [name, Array.from(t.data as Float32Array)]))).toEqual({
      'layer.0.w': [1, 2],
      embed: [3],
      'layer.1.w': [4, 5, 6],
    });
    expect(metadata).toEqual({ format: 'pt' });
    expect([...readSafetensorsDir(dir, { filter: (name) => name.startsWith('layer.') }).tensors.keys()].sort()).toEqual([
      'layer.0.w',
      'layer.1.w',
    ]);
  });

  it('reports an index that disagrees with its shards', () => {
    const dir = mkdtempSync(join(workDir, 'bad-index-'));
    const shard = 'model-00001-of-00001.safetensors';
    writeSafetensors(join(dir, shard), { a: tensor([1]) });
    const index = join(dir, 'model.safetensors.index.json');

    writeFileSync(index, JSON.stringify({ weight_map: { a: shard, b: shard } }));
    expect(() => readSafetensorsDir(dir)).toThrow(/tensor "b" should be in model-00001-of-00001.safetensors but is in no shard/);

    writeFileSync(index, JSON.stringify({ weight_map: { a: 'model-00009.safetensors' } }));
    expect(() => readSafetensorsDir(dir)).toThrow(/shard model-00009.safetensors is listed but .* does not exist/);

    writeFileSync(index, JSON.stringify({ weight_map: { a: '../elsewhere.safetensors' } }));
    expect(() => readSafetensorsDir(dir)).toThrow(/weight_map\["a"\] is "..\/elsewhere.safetensors", not a shard file name/);

    writeFileSync(index, JSON.stringify({ metadata: {} }));
    expect(() => readSafetensorsDir(dir)).toThrow(/"weight_map" .* is missing/);

    writeFileSync(index, '{ not json');
    expect(() => readSafetensorsDir(dir)).toThrow(/model.safetensors.index.json: invalid JSON/);
  });

  it('reports a tensor found in two shards', () => {
    const dir = mkdtempSync(join(workDir, 'dup-'));
    writeSafetensors(join(dir, 'one.safetensors'), { a: tensor([1]) });
    writeSafetensors(join(dir, 'two.safetensors'), { a: tensor([2]), b: tensor([3]) });
    writeFileSync(
      join(dir, 'model.safetensors.index.json'),
      JSON.stringify({ weight_map: { a: 'one.safetensors', b: 'two.safetensors' } }),
    );
    expect(() => readSafetensorsDir(dir)).toThrow(/tensor "a" is in both one.safetensors and two.safetensors/);
  });

  it('says what it looked for in an empty directory', () => {
    const dir = mkdtempSync(join(workDir, 'empty-'));
    expect(() => readSafetensorsDir(dir)).toThrow(/neither model.safetensors nor model.safetensors.index.json/);
  });
});
