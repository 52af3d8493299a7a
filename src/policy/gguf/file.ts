/**
 * A GGUF file opened for import: the header (metadata and tensor directory) is parsed by the
 * maintained `@huggingface/gguf` reader; this module checks what it returns before anything uses
 * it (little-endian, every tensor of a supported type and lying wholly inside the file, metadata
 * values of the types llama.cpp writes) and reads one tensor's bytes at a time, dequantised to
 * float32, so a large file never sits in memory whole.
 */
import { closeSync, openSync, readSync, statSync } from 'node:fs';
import { gguf, GGUFValueType } from '@huggingface/gguf';
import { dequantize, ggmlByteSize } from './dequantize.ts';

export interface GgufTensor {
  name: string;
  /** GGML type id (GGMLQuantizationType). */
  type: number;
  /** Row-major shape, outermost first, as PyTorch and safetensors write it (GGUF's ne reversed). */
  shape: number[];
  elements: number;
  /** Absolute byte offset of the data in the file. */
  start: number;
  byteLength: number;
}

type TypedValue = { value: unknown; type: GGUFValueType; subType?: GGUFValueType };

const INTEGER_TYPES = new Set([
  GGUFValueType.UINT8,
  GGUFValueType.INT8,
  GGUFValueType.UINT16,
  GGUFValueType.INT16,
  GGUFValueType.UINT32,
  GGUFValueType.INT32,
  GGUFValueType.UINT64,
  GGUFValueType.INT64,
]);
const FLOAT_TYPES = new Set([GGUFValueType.FLOAT32, GGUFValueType.FLOAT64]);

const typeName = (t: GGUFValueType | undefined): string => (t === undefined ? 'unknown' : (GGUFValueType[t] ?? `type ${t}`).toLowerCase());

/** Typed access to GGUF metadata; every error names the file and the key. */
export class GgufMetadata {
  constructor(
    private readonly entries: Record<string, TypedValue>,
    readonly source: string,
  ) {}

  has(key: string): boolean {
    return Object.hasOwn(this.entries, key);
  }

  keys(): string[] {
    return Object.keys(this.entries);
  }

  private entry(key: string): TypedValue {
    if (!this.has(key)) throw new Error(`${this.source}: metadata key "${key}" is missing`);
    return this.entries[key];
  }

  string(key: string): string {
    const e = this.entry(key);
    if (e.type !== GGUFValueType.STRING || typeof e.value !== 'string')
      throw new Error(`${this.source}: metadata "${key}" is ${typeName(e.type)}, expected a string`);
    return e.value;
  }

  /** A non-negative integer that fits a double exactly. */
  count(key: string): number {
    const e = this.entry(key);
    if (!INTEGER_TYPES.has(e.type)) throw new Error(`${this.source}: metadata "${key}" is ${typeName(e.type)}, expected an integer`);
    const v = Number(e.value);
    if (!Number.isSafeInteger(v) || v < 0)
      throw new Error(`${this.source}: metadata "${key}" is ${String(e.value)}, expected a non-negative integer`);
    return v;
  }

  number(key: string): number {
    const e = this.entry(key);
    if (!FLOAT_TYPES.has(e.type) && !INTEGER_TYPES.has(e.type))
      throw new Error(`${this.source}: metadata "${key}" is ${typeName(e.type)}, expected a number`);
    const v = Number(e.value);
    if (!Number.isFinite(v)) throw new Error(`${this.source}: metadata "${key}" is ${String(e.value)}, expected a finite number`);
    return v;
  }

  bool(key: string): boolean {
    const e = this.entry(key);
    if (e.type !== GGUFValueType.BOOL || typeof e.value !== 'boolean')
      throw new Error(`${this.source}: metadata "${key}" is ${typeName(e.type)}, expected a bool`);
    return e.value;
  }

  stringArray(key: string): string[] {
    const e = this.entry(key);
    if (e.type !== GGUFValueType.ARRAY || e.subType !== GGUFValueType.STRING || !Array.isArray(e.value)) {
      throw new Error(
        `${this.source}: metadata "${key}" is ${e.type === GGUFValueType.ARRAY ? `an array of ${typeName(e.subType)}` : typeName(e.type)}, expected an array of strings`,
      );
    }
    return e.value as string[];
  }

  integerArray(key: string): number[] {
    const e = this.entry(key);
    if (e.type !== GGUFValueType.ARRAY || e.subType === undefined || !INTEGER_TYPES.has(e.subType) || !Array.isArray(e.value)) {
      throw new Error(
        `${this.source}: metadata "${key}" is ${e.type === GGUFValueType.ARRAY ? `an array of ${typeName(e.subType)}` : typeName(e.type)}, expected an array of integers`,
      );
    }
    return (e.value as (number | bigint)[]).map(Number);
  }

  optionalString(key: string): string | undefined {
    return this.has(key) ? this.string(key) : undefined;
  }

  optionalCount(key: string): number | undefined {
    return this.has(key) ? this.count(key) : undefined;
  }

  optionalNumber(key: string): number | undefined {
    return this.has(key) ? this.number(key) : undefined;
  }

  optionalBool(key: string): boolean | undefined {
    return this.has(key) ? this.bool(key) : undefined;
  }
}

export interface GgufFile {
  path: string;
  fileSize: number;
  metadata: GgufMetadata;
  /** In file order. */
  tensors: GgufTensor[];
  byName: ReadonlyMap<string, GgufTensor>;
}

/**
 * Parses and checks a GGUF file's header. Refuses, naming the tensor, a tensor of an unsupported
 * type or one whose data runs past the end of the file (a truncated download).
 */
export async function openGguf(path: string): Promise<GgufFile> {
  let fileSize: number;
  try {
    const st = statSync(path);
    if (!st.isFile()) throw new Error('not a regular file');
    fileSize = st.size;
  } catch (e) {
    throw new Error(`${path}: cannot open GGUF file: ${(e as Error).message}`);
  }
  let parsed: Awaited<ReturnType<typeof gguf>> & { typedMetadata: Record<string, TypedValue> };
  try {
    parsed = (await gguf(path, { allowLocalFile: true, typedMetadata: true })) as typeof parsed;
  } catch (e) {
    throw new Error(`${path}: not a readable GGUF file (${fileSize} bytes; truncated or corrupt header?): ${(e as Error).message}`);
  }
  if (!parsed.littleEndian) throw new Error(`${path}: big-endian GGUF files are not supported`);
  // The reader pads a short read with nothing and parses on; a header that ends past the file is cut off.
  const headerEnd = parsed.tensorInfoByteRange[1];
  if (headerEnd > fileSize)
    throw new Error(
      `${path}: not a readable GGUF file (${fileSize} bytes; truncated or corrupt header?): the header needs ${headerEnd} bytes`,
    );
  const metadata = new GgufMetadata(parsed.typedMetadata, path);
  const dataStart = Number(parsed.tensorDataOffset);
  const tensors: GgufTensor[] = [];
  const byName = new Map<string, GgufTensor>();
  for (const info of parsed.tensorInfos) {
    const what = `${path}: tensor "${info.name}"`;
    if (byName.has(info.name)) throw new Error(`${what} appears twice`);
    const shape = info.shape.map(Number).reverse();
    const elements = shape.reduce((a, b) => a * b, 1);
    if (!Number.isSafeInteger(elements)) throw new Error(`${what}: shape [${shape}] is too large`);
    const byteLength = ggmlByteSize(info.dtype, elements, what);
    const start = dataStart + Number(info.offset);
    if (start + byteLength > fileSize) {
      throw new Error(`${what} needs bytes ${start}..${start + byteLength} but the file has ${fileSize} bytes: the file is truncated`);
    }
    const tensor: GgufTensor = { name: info.name, type: info.dtype, shape, elements, start, byteLength };
    tensors.push(tensor);
    byName.set(info.name, tensor);
  }
  return { path, fileSize, metadata, tensors, byName };
}

/** Reads one tensor's raw bytes. */
export function readTensorBytes(file: GgufFile, tensor: GgufTensor): Uint8Array {
  const bytes = new Uint8Array(tensor.byteLength);
  const fd = openSync(file.path, 'r');
  try {
    let done = 0;
    while (done < bytes.length) {
      // Node reads at most 2 GiB per call.
      const n = readSync(fd, bytes, done, Math.min(bytes.length - done, 1 << 30), tensor.start + done);
      if (n === 0) throw new Error(`${file.path}: tensor "${tensor.name}" ends early (file shorter than its header says; truncated?)`);
      done += n;
    }
  } finally {
    closeSync(fd);
  }
  return bytes;
}

/** One tensor's values as float32, row-major in `tensor.shape`. */
export function readTensor(file: GgufFile, tensor: GgufTensor): Float32Array {
  return dequantize(tensor.type, readTensorBytes(file, tensor), tensor.elements, `${file.path}: tensor "${tensor.name}"`);
}
