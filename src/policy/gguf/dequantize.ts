/**
 * GGML tensor types to float32: F32, F16, BF16, the legacy block quantisations (Q4_0, Q4_1,
 * Q5_0, Q5_1, Q8_0) and the K-quants (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K) that llama.cpp and Ollama
 * ship. Each block is decoded with the same float32 operations, in the same order, as the `gguf`
 * Python package (llama.cpp's own reader, gguf-py/gguf/quants.py), so the results are
 * bit-identical to `gguf.quants.dequantize` (dequantize.test.ts checks every type).
 *
 * Every intermediate product is rounded to float32 (Math.fround) exactly where numpy's float32
 * arithmetic rounds: a float32 × float32 product is exact in a double, so one fround gives the
 * correctly rounded float32 result, as numpy computes it.
 */
import { GGMLQuantizationType } from '@huggingface/gguf';

const fround = Math.fround;

/** Float32 bit pattern of every half-precision value, by integer ops (keeps NaN payloads as numpy does). */
const HALF_TO_FLOAT: Float32Array = (() => {
  const bits = new Uint32Array(65536);
  for (let h = 0; h < 65536; h++) {
    const sign = (h & 0x8000) << 16;
    const exponent = (h >> 10) & 0x1f;
    let mantissa = h & 0x3ff;
    if (exponent === 0x1f) bits[h] = sign | 0x7f800000 | (mantissa << 13);
    else if (exponent !== 0) bits[h] = sign | ((exponent + 112) << 23) | (mantissa << 13);
    else if (mantissa === 0) bits[h] = sign;
    else {
      // Subnormal half: shift the mantissa up until its leading 1 is the implicit bit.
      let e = 113;
      while ((mantissa & 0x400) === 0) {
        mantissa <<= 1;
        e--;
      }
      bits[h] = sign | (e << 23) | ((mantissa & 0x3ff) << 13);
    }
  }
  return new Float32Array(bits.buffer);
})();

const half = (b: Uint8Array, o: number): number => HALF_TO_FLOAT[b[o] | (b[o + 1] << 8)];
const int8 = (v: number): number => (v << 24) >> 24;

export interface GgmlTypeInfo {
  name: string;
  /** Elements per block. */
  blockSize: number;
  /** Bytes per block. */
  blockBytes: number;
  /** Decodes `blocks` whole blocks from `src` (starting at byte 0) into `out` (starting at 0). */
  decode(src: Uint8Array, out: Float32Array, blocks: number): void;
}

const QK_K = 256;

function decodeF32(src: Uint8Array, out: Float32Array, n: number): void {
  // Copy through bytes: `src` may sit at any offset of its buffer, so no Float32Array view of it.
  new Uint8Array(out.buffer, out.byteOffset, n * 4).set(src.subarray(0, n * 4));
}

function decodeF16(src: Uint8Array, out: Float32Array, n: number): void {
  for (let i = 0; i < n; i++) out[i] = half(src, 2 * i);
}

function decodeBF16(src: Uint8Array, out: Float32Array, n: number): void {
  const bits = new Uint32Array(out.buffer, out.byteOffset, n);
  for (let i = 0; i < n; i++) bits[i] = ((src[2 * i] | (src[2 * i + 1] << 8)) << 16) >>> 0;
}

function decodeQ4_0(src: Uint8Array, out: Float32Array, blocks: number): void {
  for (let b = 0; b < blocks; b++) {
    const o = b * 18;
    const y = b * 32;
    const d = half(src, o);
    for (let j = 0; j < 16; j++) {
      const q = src[o + 2 + j];
      out[y + j] = fround(d * ((q & 0x0f) - 8));
      out[y + j + 16] = fround(d * ((q >> 4) - 8));
    }
  }
}

function decodeQ4_1(src: Uint8Array, out: Float32Array, blocks: number): void {
  for (let b = 0; b < blocks; b++) {
    const o = b * 20;
    const y = b * 32;
    const d = half(src, o);
    const m = half(src, o + 2);
    for (let j = 0; j < 16; j++) {
      const q = src[o + 4 + j];
      out[y + j] = fround(fround(d * (q & 0x0f)) + m);
      out[y + j + 16] = fround(fround(d * (q >> 4)) + m);
    }
  }
}

const u32 = (b: Uint8Array, o: number): number => (b[o] | (b[o + 1] << 8) | (b[o + 2] << 16) | (b[o + 3] << 24)) >>> 0;

function decodeQ5_0(src: Uint8Array, out: Float32Array, blocks: number): void {
  for (let b = 0; b < blocks; b++) {
    const o = b * 22;
    const y = b * 32;
    const d = half(src, o);
    const qh = u32(src, o + 2);
    for (let j = 0; j < 16; j++) {
      const q = src[o + 6 + j];
      out[y + j] = fround(d * (((q & 0x0f) | (((qh >>> j) & 1) << 4)) - 16));
      out[y + j + 16] = fround(d * (((q >> 4) | (((qh >>> (j + 16)) & 1) << 4)) - 16));
    }
  }
}

function decodeQ5_1(src: Uint8Array, out: Float32Array, blocks: number): void {
  for (let b = 0; b < blocks; b++) {
    const o = b * 24;
    const y = b * 32;
    const d = half(src, o);
    const m = half(src, o + 2);
    const qh = u32(src, o + 4);
    for (let j = 0; j < 16; j++) {
      const q = src[o + 8 + j];
      out[y + j] = fround(fround(d * ((q & 0x0f) | (((qh >>> j) & 1) << 4))) + m);
      out[y + j + 16] = fround(fround(d * ((q >> 4) | (((qh >>> (j + 16)) & 1) << 4))) + m);
    }
  }
}

function decodeQ8_0(src: Uint8Array, out: Float32Array, blocks: number): void {
  for (let b = 0; b < blocks; b++) {
    const o = b * 34;
    const y = b * 32;
    const d = half(src, o);
    for (let j = 0; j < 32; j++) out[y + j] = fround(int8(src[o + 2 + j]) * d);
  }
}

function decodeQ2_K(src: Uint8Array, out: Float32Array, blocks: number): void {
  const dl = new Float32Array(16);
  const ml = new Float32Array(16);
  for (let b = 0; b < blocks; b++) {
    const o = b * 84; // scales[16], qs[64], d, dmin
    const y = b * QK_K;
    const d = half(src, o + 80);
    const dmin = half(src, o + 82);
    for (let k = 0; k < 16; k++) {
      dl[k] = d * (src[o + k] & 0x0f);
      ml[k] = dmin * (src[o + k] >> 4);
    }
    for (let e = 0; e < QK_K; e++) {
      const half128 = e >> 7;
      const shift = ((e >> 5) & 3) * 2;
      const q = (src[o + 16 + half128 * 32 + (e & 31)] >> shift) & 3;
      out[y + e] = fround(fround(dl[e >> 4] * q) - ml[e >> 4]);
    }
  }
}

function decodeQ3_K(src: Uint8Array, out: Float32Array, blocks: number): void {
  const dl = new Float32Array(16);
  for (let b = 0; b < blocks; b++) {
    const o = b * 110; // hmask[32], qs[64], scales[12], d
    const y = b * QK_K;
    const s = o + 96;
    const d = half(src, o + 108);
    for (let k = 0; k < 16; k++) {
      // 6-bit signed scales: low 4 bits in bytes 0-7 (two per byte), high 2 bits in bytes 8-11.
      const low = (src[s + (k & 7)] >> (4 * (k >> 3))) & 0x0f;
      const high = (src[s + 8 + (k & 3)] >> (2 * (k >> 2))) & 0x03;
      dl[k] = d * (int8(low | (high << 4)) - 32);
    }
    for (let e = 0; e < QK_K; e++) {
      const half128 = e >> 7;
      const shift = ((e >> 5) & 3) * 2;
      const low = (src[o + 32 + half128 * 32 + (e & 31)] >> shift) & 3;
      const highBit = (src[o + (e & 31)] >> (e >> 5)) & 1;
      out[y + e] = fround(dl[e >> 4] * (low - ((highBit ^ 1) << 2)));
    }
  }
}

/** The eight 6-bit scales and mins of a Q4_K / Q5_K block, multiplied by d and dmin. */
function kScales(src: Uint8Array, s: number, d: number, dmin: number, dd: Float32Array, dm: Float32Array): void {
  for (let j = 0; j < 4; j++) {
    dd[j] = d * (src[s + j] & 0x3f);
    dm[j] = dmin * (src[s + 4 + j] & 0x3f);
    dd[j + 4] = d * ((src[s + 8 + j] & 0x0f) | ((src[s + j] >> 2) & 0x30));
    dm[j + 4] = dmin * ((src[s + 8 + j] >> 4) | ((src[s + 4 + j] >> 2) & 0x30));
  }
}

function decodeQ4_K(src: Uint8Array, out: Float32Array, blocks: number): void {
  const dd = new Float32Array(8);
  const dm = new Float32Array(8);
  for (let b = 0; b < blocks; b++) {
    const o = b * 144; // d, dmin, scales[12], qs[128]
    const y = b * QK_K;
    kScales(src, o + 4, half(src, o), half(src, o + 2), dd, dm);
    for (let e = 0; e < QK_K; e++) {
      const group = e >> 5; // 32 elements per scale
      const q = (src[o + 16 + (e >> 6) * 32 + (e & 31)] >> (4 * (group & 1))) & 0x0f;
      out[y + e] = fround(fround(dd[group] * q) - dm[group]);
    }
  }
}

function decodeQ5_K(src: Uint8Array, out: Float32Array, blocks: number): void {
  const dd = new Float32Array(8);
  const dm = new Float32Array(8);
  for (let b = 0; b < blocks; b++) {
    const o = b * 176; // d, dmin, scales[12], qh[32], qs[128]
    const y = b * QK_K;
    kScales(src, o + 4, half(src, o), half(src, o + 2), dd, dm);
    for (let e = 0; e < QK_K; e++) {
      const group = e >> 5;
      const low = (src[o + 48 + (e >> 6) * 32 + (e & 31)] >> (4 * (group & 1))) & 0x0f;
      const highBit = (src[o + 16 + (e & 31)] >> group) & 1;
      out[y + e] = fround(fround(dd[group] * (low | (highBit << 4))) - dm[group]);
    }
  }
}

function decodeQ6_K(src: Uint8Array, out: Float32Array, blocks: number): void {
  const ds = new Float32Array(16);
  for (let b = 0; b < blocks; b++) {
    const o = b * 210; // ql[128], qh[64], scales[16] (int8), d
    const y = b * QK_K;
    const d = half(src, o + 208);
    for (let k = 0; k < 16; k++) ds[k] = d * int8(src[o + 192 + k]);
    for (let e = 0; e < QK_K; e++) {
      const half128 = e >> 7;
      const r = e & 127;
      const low = (src[o + half128 * 64 + (r & 63)] >> (4 * (r >> 6))) & 0x0f;
      const high = (src[o + 128 + half128 * 32 + (r & 31)] >> (2 * (r >> 5))) & 0x03;
      out[y + e] = fround(ds[e >> 4] * ((low | (high << 4)) - 32));
    }
  }
}

const T = GGMLQuantizationType;

/** The tensor types this module decodes, by GGML type id. */
export const GGML_TYPES: ReadonlyMap<number, GgmlTypeInfo> = new Map<number, GgmlTypeInfo>([
  [T.F32, { name: 'F32', blockSize: 1, blockBytes: 4, decode: decodeF32 }],
  [T.F16, { name: 'F16', blockSize: 1, blockBytes: 2, decode: decodeF16 }],
  [T.BF16, { name: 'BF16', blockSize: 1, blockBytes: 2, decode: decodeBF16 }],
  [T.Q4_0, { name: 'Q4_0', blockSize: 32, blockBytes: 18, decode: decodeQ4_0 }],
  [T.Q4_1, { name: 'Q4_1', blockSize: 32, blockBytes: 20, decode: decodeQ4_1 }],
  [T.Q5_0, { name: 'Q5_0', blockSize: 32, blockBytes: 22, decode: decodeQ5_0 }],
  [T.Q5_1, { name: 'Q5_1', blockSize: 32, blockBytes: 24, decode: decodeQ5_1 }],
  [T.Q8_0, { name: 'Q8_0', blockSize: 32, blockBytes: 34, decode: decodeQ8_0 }],
  [T.Q2_K, { name: 'Q2_K', blockSize: QK_K, blockBytes: 84, decode: decodeQ2_K }],
  [T.Q3_K, { name: 'Q3_K', blockSize: QK_K, blockBytes: 110, decode: decodeQ3_K }],
  [T.Q4_K, { name: 'Q4_K', blockSize: QK_K, blockBytes: 144, decode: decodeQ4_K }],
  [T.Q5_K, { name: 'Q5_K', blockSize: QK_K, blockBytes: 176, decode: decodeQ5_K }],
  [T.Q6_K, { name: 'Q6_K', blockSize: QK_K, blockBytes: 210, decode: decodeQ6_K }],
]);

/** A type's name as llama.cpp spells it ("Q4_K"), or "type <id>" for one GGML does not name here. */
export function ggmlTypeName(type: number): string {
  return GGML_TYPES.get(type)?.name ?? (T[type] as string | undefined) ?? `type ${type}`;
}

/** The supported type names, for error messages. */
export const SUPPORTED_TYPE_NAMES: readonly string[] = [...GGML_TYPES.values()].map((t) => t.name);

/** Bytes `elements` values of `type` take; throws for an unsupported type or a partial block. */
export function ggmlByteSize(type: number, elements: number, what: string): number {
  const info = GGML_TYPES.get(type);
  if (!info) throw new Error(`${what}: tensor type ${ggmlTypeName(type)} is not supported (supported: ${SUPPORTED_TYPE_NAMES.join(', ')})`);
  if (elements % info.blockSize !== 0)
    throw new Error(`${what}: ${elements} elements is not a whole number of ${info.name} blocks of ${info.blockSize}`);
  return (elements / info.blockSize) * info.blockBytes;
}

/** Decodes `elements` values of `type` from `bytes` (exactly their byte size) into a new Float32Array. */
export function dequantize(type: number, bytes: Uint8Array, elements: number, what = 'tensor'): Float32Array {
  const size = ggmlByteSize(type, elements, what);
  if (bytes.length !== size) throw new Error(`${what}: ${bytes.length} bytes given, ${ggmlTypeName(type)} × ${elements} needs ${size}`);
  const info = GGML_TYPES.get(type)!;
  const out = new Float32Array(elements);
  info.decode(bytes, out, elements / info.blockSize);
  return out;
}
