/**
 * Reading and writing safetensors files (the Hugging Face checkpoint format).
 *
 * Layout: an 8-byte little-endian unsigned header length N, N bytes of UTF-8 JSON, then the byte
 * buffer. The JSON maps each tensor name to { dtype, shape, data_offsets: [begin, end] } (offsets
 * relative to the byte buffer) plus an optional "__metadata__" object of string -> string. The
 * tensors must cover the buffer exactly, with no holes or overlaps. Every number read from a file
 * is checked before it is used, so a corrupt or truncated file is an error naming the file and the
 * problem, never a garbage tensor.
 */
import {
  closeSync,
  existsSync,
  fstatSync,
  fsyncSync,
  mkdirSync,
  openSync,
  readFileSync,
  readSync,
  renameSync,
  rmSync,
  writeSync,
} from 'node:fs';
import { endianness } from 'node:os';
import { basename, dirname, join } from 'node:path';

export type SafetensorsDtype =
  'BOOL' | 'U8' | 'I8' | 'F8_E5M2' | 'F8_E4M3' | 'I16' | 'U16' | 'F16' | 'BF16' | 'I32' | 'U32' | 'F32' | 'F64' | 'I64' | 'U64';

export type TensorData =
  | Float32Array
  | Float64Array
  | Int8Array
  | Uint8Array
  | Int16Array
  | Uint16Array
  | Int32Array
  | Uint32Array
  | BigInt64Array
  | BigUint64Array;

/**
 * One tensor. `data` is row-major. F16 and BF16 hold their raw 16-bit patterns in a Uint16Array
 * and F8 types raw bytes in a Uint8Array; `toFloat32` turns any of them into numbers.
 */
export interface SafeTensor {
  dtype: SafetensorsDtype;
  shape: number[];
  data: TensorData;
}

export interface SafetensorsContents {
  tensors: Map<string, SafeTensor>;
  metadata: Record<string, string>;
}

export interface ReadOptions {
  /** Read only the tensors this returns true for (the header is still checked in full). */
  filter?: (name: string) => boolean;
}

type TypedArrayClass = { new (length: number): TensorData; readonly name: string };

/** Bytes per element, and the typed array that holds a tensor of the dtype. */
const DTYPES: Record<SafetensorsDtype, { bytes: number; array: TypedArrayClass }> = {
  BOOL: { bytes: 1, array: Uint8Array },
  U8: { bytes: 1, array: Uint8Array },
  I8: { bytes: 1, array: Int8Array },
  F8_E5M2: { bytes: 1, array: Uint8Array },
  F8_E4M3: { bytes: 1, array: Uint8Array },
  I16: { bytes: 2, array: Int16Array },
  U16: { bytes: 2, array: Uint16Array },
  F16: { bytes: 2, array: Uint16Array },
  BF16: { bytes: 2, array: Uint16Array },
  I32: { bytes: 4, array: Int32Array },
  U32: { bytes: 4, array: Uint32Array },
  F32: { bytes: 4, array: Float32Array },
  F64: { bytes: 8, array: Float64Array },
  I64: { bytes: 8, array: BigInt64Array },
  U64: { bytes: 8, array: BigUint64Array },
};

const isDtype = (value: unknown): value is SafetensorsDtype => typeof value === 'string' && Object.hasOwn(DTYPES, value);

/** The reference implementation refuses larger headers; a bigger one means a corrupt length. */
const MAX_HEADER_BYTES = 100_000_000;
const METADATA_KEY = '__metadata__';
/** Node reads and writes at most this much per call. */
const IO_CHUNK_BYTES = 1 << 30;

function requireLittleEndianHost(): void {
  // Typed arrays use the host's byte order and the format is little-endian.
  if (endianness() !== 'LE') throw new Error('safetensors: only little-endian hosts are supported');
}

// ---------------------------------------------------------------------------------------------
// 16-bit and 8-bit float conversions
// ---------------------------------------------------------------------------------------------

const f32Scratch = new Float32Array(1);
const u32Scratch = new Uint32Array(f32Scratch.buffer);

/** IEEE half-precision bit pattern -> number. */
export function f16BitsToNumber(bits: number): number {
  const sign = bits & 0x8000 ? -1 : 1;
  const exponent = (bits >> 10) & 0x1f;
  const fraction = bits & 0x3ff;
  if (exponent === 0) return sign * fraction * 2 ** -24;
  if (exponent === 0x1f) return fraction ? NaN : sign * Infinity;
  return sign * (1 + fraction / 1024) * 2 ** (exponent - 15);
}

/** number -> IEEE half-precision bit pattern, rounded to nearest even; overflow gives ±Infinity. */
export function numberToF16Bits(value: number): number {
  f32Scratch[0] = value;
  const x = u32Scratch[0];
  const sign = (x >>> 16) & 0x8000;
  const exponent = (x >>> 23) & 0xff;
  const mantissa = x & 0x7fffff;
  if (exponent === 0xff) return sign | 0x7c00 | (mantissa ? 0x200 : 0);
  const halfExponent = exponent - 127 + 15;
  if (halfExponent >= 0x1f) return sign | 0x7c00;
  if (halfExponent <= 0) {
    // Subnormal half: shift the full 24-bit significand down to units of 2^-24.
    if (halfExponent < -10) return sign;
    const significand = mantissa | 0x800000;
    const shift = 14 - halfExponent;
    let half = significand >>> shift;
    const remainder = significand & ((1 << shift) - 1);
    const halfway = 1 << (shift - 1);
    if (remainder > halfway || (remainder === halfway && half & 1)) half++;
    return sign | half;
  }
  let half = (halfExponent << 10) | (mantissa >>> 13);
  const remainder = mantissa & 0x1fff;
  // A carry out of the mantissa correctly bumps the exponent (up to Infinity).
  if (remainder > 0x1000 || (remainder === 0x1000 && half & 1)) half++;
  return sign | half;
}

/** bfloat16 bit pattern -> number (bfloat16 is the top half of a float32). */
export function bf16BitsToNumber(bits: number): number {
  u32Scratch[0] = bits << 16;
  return f32Scratch[0];
}

/** number -> bfloat16 bit pattern, rounded to nearest even. */
export function numberToBF16Bits(value: number): number {
  f32Scratch[0] = value;
  const x = u32Scratch[0];
  if ((x & 0x7f800000) === 0x7f800000 && x & 0x7fffff) return ((x >>> 16) & 0x8000) | 0x7fc0; // keep NaN a NaN
  return ((x + 0x7fff + ((x >>> 16) & 1)) >>> 16) & 0xffff;
}

/** FP8 E4M3 ("fn": no infinities, S.1111.111 is NaN) -> number. */
function f8e4m3BitsToNumber(bits: number): number {
  const sign = bits & 0x80 ? -1 : 1;
  const exponent = (bits >> 3) & 0xf;
  const fraction = bits & 0x7;
  if (exponent === 0xf && fraction === 0x7) return NaN;
  if (exponent === 0) return sign * fraction * 2 ** -9;
  return sign * (1 + fraction / 8) * 2 ** (exponent - 7);
}

let f16Table: Float32Array | undefined;
/** All 65536 half values, built once: converting a large tensor becomes a table lookup. */
function halfToFloatTable(): Float32Array {
  if (!f16Table) {
    f16Table = new Float32Array(65536);
    for (let bits = 0; bits < 65536; bits++) f16Table[bits] = f16BitsToNumber(bits);
  }
  return f16Table;
}

/**
 * The tensor's values as float32, whatever its dtype. An F32 tensor's own array is returned, not
 * a copy; integers beyond 2^24 lose precision.
 */
export function toFloat32(tensor: SafeTensor): Float32Array {
  const { dtype, data } = tensor;
  switch (dtype) {
    case 'F32':
      return data as Float32Array;
    case 'BF16': {
      const out = new Float32Array(data.length);
      const outBits = new Uint32Array(out.buffer);
      const bits = data as Uint16Array;
      for (let i = 0; i < bits.length; i++) outBits[i] = bits[i] << 16;
      return out;
    }
    case 'F16': {
      const table = halfToFloatTable();
      const bits = data as Uint16Array;
      const out = new Float32Array(bits.length);
      for (let i = 0; i < bits.length; i++) out[i] = table[bits[i]];
      return out;
    }
    case 'F8_E5M2': {
      // E5M2 is the top byte of a half.
      const table = halfToFloatTable();
      const bytes = data as Uint8Array;
      const out = new Float32Array(bytes.length);
      for (let i = 0; i < bytes.length; i++) out[i] = table[bytes[i] << 8];
      return out;
    }
    case 'F8_E4M3': {
      const bytes = data as Uint8Array;
      const out = new Float32Array(bytes.length);
      for (let i = 0; i < bytes.length; i++) out[i] = f8e4m3BitsToNumber(bytes[i]);
      return out;
    }
    case 'I64':
    case 'U64':
      return Float32Array.from(data as BigInt64Array | BigUint64Array, (v) => Number(v));
    default:
      return Float32Array.from(data as Exclude<TensorData, BigInt64Array | BigUint64Array>);
  }
}

// ---------------------------------------------------------------------------------------------
// Reading
// ---------------------------------------------------------------------------------------------

interface HeaderEntry {
  name: string;
  dtype: SafetensorsDtype;
  shape: number[];
  begin: number;
  end: number;
}

export interface SafetensorsHeader {
  /** Tensors in file order (by offset). */
  entries: { name: string; dtype: SafetensorsDtype; shape: number[]; byteLength: number }[];
  metadata: Record<string, string>;
}

const elementCount = (shape: readonly number[]) => shape.reduce((product, dim) => product * dim, 1);

function readFully(fd: number, target: Uint8Array, position: number, path: string): void {
  let done = 0;
  while (done < target.length) {
    const want = Math.min(IO_CHUNK_BYTES, target.length - done);
    const got = readSync(fd, target, done, want, position + done);
    if (got === 0) throw new Error(`${path}: file ended early while reading (truncated?)`);
    done += got;
  }
}

/** Parses and checks the header; returns the entries and where the byte buffer starts. */
function readHeader(fd: number, path: string): { entries: HeaderEntry[]; metadata: Record<string, string>; dataStart: number } {
  const fileSize = fstatSync(fd).size;
  if (fileSize < 8) throw new Error(`${path}: ${fileSize} bytes is too short for the 8-byte header length`);
  const lengthBytes = new Uint8Array(8);
  readFully(fd, lengthBytes, 0, path);
  const headerLength = new DataView(lengthBytes.buffer).getBigUint64(0, true);
  if (headerLength > BigInt(fileSize - 8)) {
    throw new Error(`${path}: header length ${headerLength} runs past the end of the file (${fileSize} bytes)`);
  }
  if (headerLength > BigInt(MAX_HEADER_BYTES)) {
    throw new Error(`${path}: header length ${headerLength} exceeds the ${MAX_HEADER_BYTES}-byte limit`);
  }
  const headerBytes = new Uint8Array(Number(headerLength));
  readFully(fd, headerBytes, 8, path);

  let header: unknown;
  try {
    header = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(headerBytes));
  } catch (err) {
    throw new Error(`${path}: invalid JSON header: ${(err as Error).message}`);
  }
  if (typeof header !== 'object' || header === null || Array.isArray(header)) {
    throw new Error(`${path}: invalid JSON header: expected an object`);
  }

  let metadata: Record<string, string> = {};
  const entries: HeaderEntry[] = [];
  const dataLength = fileSize - 8 - Number(headerLength);
  for (const [name, value] of Object.entries(header)) {
    if (name === METADATA_KEY) {
      metadata = checkMetadata(value, `${path}: ${METADATA_KEY}`);
      continue;
    }
    entries.push(checkEntry(name, value, dataLength, path));
  }

  // The tensors must tile the byte buffer: sorted by offset, each starts where the last ended.
  entries.sort((a, b) => a.begin - b.begin || a.end - b.end);
  let covered = 0;
  let previous: HeaderEntry | undefined;
  for (const entry of entries) {
    if (entry.begin < covered) {
      throw new Error(
        `${path}: tensor "${entry.name}" (bytes ${entry.begin}-${entry.end}) overlaps "${previous!.name}" (bytes ${previous!.begin}-${previous!.end})`,
      );
    }
    if (entry.begin > covered) {
      throw new Error(`${path}: bytes ${covered}-${entry.begin} of the data belong to no tensor (before "${entry.name}")`);
    }
    covered = entry.end;
    previous = entry;
  }
  if (covered !== dataLength) {
    throw new Error(`${path}: tensors cover ${covered} bytes but the data section holds ${dataLength}`);
  }
  return { entries, metadata, dataStart: 8 + Number(headerLength) };
}

function checkMetadata(value: unknown, where: string): Record<string, string> {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new Error(`${where} must be an object of string values`);
  }
  for (const [key, item] of Object.entries(value)) {
    if (typeof item !== 'string') throw new Error(`${where}["${key}"] is ${JSON.stringify(item)}, not a string`);
  }
  return { ...(value as Record<string, string>) };
}

function checkEntry(name: string, value: unknown, dataLength: number, path: string): HeaderEntry {
  const where = `${path}: tensor "${name}"`;
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new Error(`${where}: expected { dtype, shape, data_offsets }`);
  }
  const { dtype, shape, data_offsets: offsets } = value as Record<string, unknown>;
  if (!isDtype(dtype)) throw new Error(`${where}: unknown dtype ${JSON.stringify(dtype)}`);
  if (!Array.isArray(shape) || !shape.every((d) => Number.isSafeInteger(d) && d >= 0)) {
    throw new Error(`${where}: shape ${JSON.stringify(shape)} is not a list of non-negative integers`);
  }
  if (
    !Array.isArray(offsets) ||
    offsets.length !== 2 ||
    !offsets.every((o) => Number.isSafeInteger(o) && o >= 0) ||
    offsets[0] > offsets[1]
  ) {
    throw new Error(`${where}: data_offsets ${JSON.stringify(offsets)} is not [begin, end] with 0 <= begin <= end`);
  }
  const [begin, end] = offsets as [number, number];
  if (end > dataLength) {
    throw new Error(`${where}: data_offsets [${begin}, ${end}] run past the end of the data (${dataLength} bytes)`);
  }
  const expected = elementCount(shape) * DTYPES[dtype].bytes;
  if (expected !== end - begin) {
    throw new Error(`${where}: shape [${shape.join(', ')}] of ${dtype} needs ${expected} bytes but data_offsets span ${end - begin}`);
  }
  return { name, dtype, shape: [...shape], begin, end };
}

function withFile<T>(path: string, flags: 'r' | 'w', use: (fd: number) => T): T {
  let fd: number;
  try {
    fd = openSync(path, flags);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' && flags === 'r') throw new Error(`safetensors file not found: ${path}`);
    throw new Error(`cannot open ${path}: ${(err as Error).message}`);
  }
  try {
    return use(fd);
  } finally {
    closeSync(fd);
  }
}

/** The header only: names, dtypes, shapes and metadata, without reading any tensor data. */
export function readSafetensorsHeader(path: string): SafetensorsHeader {
  return withFile(path, 'r', (fd) => {
    const { entries, metadata } = readHeader(fd, path);
    return {
      entries: entries.map(({ name, dtype, shape, begin, end }) => ({ name, dtype, shape, byteLength: end - begin })),
      metadata,
    };
  });
}

/**
 * Reads a safetensors file. Each tensor gets its own typed array, read straight from the file
 * into it (no second copy of the checkpoint in memory, and every array is properly aligned).
 */
export function readSafetensors(path: string, opts: ReadOptions = {}): SafetensorsContents {
  requireLittleEndianHost();
  return withFile(path, 'r', (fd) => {
    const { entries, metadata, dataStart } = readHeader(fd, path);
    const tensors = new Map<string, SafeTensor>();
    for (const entry of entries) {
      if (opts.filter && !opts.filter(entry.name)) continue;
      const data = new DTYPES[entry.dtype].array(elementCount(entry.shape));
      readFully(fd, new Uint8Array(data.buffer, data.byteOffset, data.byteLength), dataStart + entry.begin, path);
      tensors.set(entry.name, { dtype: entry.dtype, shape: entry.shape, data });
    }
    return { tensors, metadata };
  });
}

const SINGLE_FILE = 'model.safetensors';
const INDEX_FILE = 'model.safetensors.index.json';

/**
 * Reads a model directory: `model.safetensors`, or the shards listed in
 * `model.safetensors.index.json` (as `transformers` saves large models). With shards, every
 * tensor the index names must be in the shard it names, and no tensor may be in two shards;
 * `metadata` merges the shards' `__metadata__`.
 */
export function readSafetensorsDir(dir: string, opts: ReadOptions = {}): SafetensorsContents {
  const files = modelWeightFiles(dir);
  const indexPath = join(dir, INDEX_FILE);
  if (!existsSync(indexPath)) return readSafetensors(join(dir, SINGLE_FILE), opts);

  const tensors = new Map<string, SafeTensor>();
  const shardOf = new Map<string, string>();
  const metadata: Record<string, string> = {};
  for (const shardPath of [...files.keys()].sort()) {
    const shard = basename(shardPath);
    const contents = readSafetensors(shardPath, opts);
    for (const [name, tensor] of contents.tensors) {
      const earlier = shardOf.get(name);
      if (earlier) throw new Error(`${dir}: tensor "${name}" is in both ${earlier} and ${shard}`);
      shardOf.set(name, shard);
      tensors.set(name, tensor);
    }
    for (const [key, value] of Object.entries(contents.metadata)) if (!(key in metadata)) metadata[key] = value;
  }
  for (const [shardPath, names] of files) {
    const shard = basename(shardPath);
    for (const name of names) {
      if (opts.filter && !opts.filter(name)) continue;
      if (shardOf.get(name) !== shard) {
        throw new Error(
          `${indexPath}: tensor "${name}" should be in ${shard} but is ${shardOf.has(name) ? `in ${shardOf.get(name)}` : 'in no shard'}`,
        );
      }
    }
  }
  return { tensors, metadata };
}

/**
 * The weight files of a model directory, each with the tensor names the index puts in it:
 * `model.safetensors` alone (with an empty list: every tensor in it), or the shards
 * `model.safetensors.index.json` lists, in the order it first names them. Refuses an index that
 * is not JSON, has no `weight_map`, names a shard outside the directory, or lists a missing shard.
 */
export function modelWeightFiles(dir: string): Map<string, string[]> {
  const indexPath = join(dir, INDEX_FILE);
  if (!existsSync(indexPath)) {
    const single = join(dir, SINGLE_FILE);
    if (!existsSync(single)) throw new Error(`${dir}: neither ${SINGLE_FILE} nor ${INDEX_FILE} is there`);
    return new Map([[single, []]]);
  }
  let index: unknown;
  try {
    index = JSON.parse(readFileSync(indexPath, 'utf8'));
  } catch (err) {
    throw new Error(`${indexPath}: invalid JSON: ${(err as Error).message}`);
  }
  const weightMap = (index as { weight_map?: unknown } | null)?.weight_map;
  if (typeof weightMap !== 'object' || weightMap === null || Array.isArray(weightMap)) {
    throw new Error(`${indexPath}: "weight_map" (tensor name -> shard file) is missing or not an object`);
  }
  const files = new Map<string, string[]>();
  for (const [name, shard] of Object.entries(weightMap)) {
    // Shards are plain file names next to the index; anything else could reach outside the model directory.
    if (typeof shard !== 'string' || shard === '' || basename(shard) !== shard || shard === '.' || shard === '..') {
      throw new Error(`${indexPath}: weight_map["${name}"] is ${JSON.stringify(shard)}, not a shard file name`);
    }
    const path = join(dir, shard);
    if (!files.has(path)) {
      if (!existsSync(path)) throw new Error(`${indexPath}: shard ${shard} is listed but ${path} does not exist`);
      files.set(path, []);
    }
    files.get(path)!.push(name);
  }
  return files;
}

// ---------------------------------------------------------------------------------------------
// Writing
// ---------------------------------------------------------------------------------------------

/**
 * A tensor to write. F16 and BF16 accept either raw bit patterns (Uint16Array) or numbers
 * (Float32Array/Float64Array, rounded to nearest even); other dtypes need their own typed array.
 */
export interface TensorToWrite {
  dtype: SafetensorsDtype;
  shape: readonly number[];
  data: TensorData;
}

/** The bytes to store for one tensor, after checking the data matches the dtype and shape. */
function tensorBytes(name: string, tensor: TensorToWrite, path: string): Uint8Array {
  const where = `${path}: tensor "${name}"`;
  if (!isDtype(tensor.dtype)) throw new Error(`${where}: unknown dtype ${JSON.stringify(tensor.dtype)}`);
  if (!Array.isArray(tensor.shape) || !tensor.shape.every((d) => Number.isSafeInteger(d) && d >= 0)) {
    throw new Error(`${where}: shape ${JSON.stringify(tensor.shape)} is not a list of non-negative integers`);
  }
  const count = elementCount(tensor.shape);
  if (tensor.data.length !== count) {
    throw new Error(`${where}: shape [${tensor.shape.join(', ')}] has ${count} elements but data has ${tensor.data.length}`);
  }
  let data = tensor.data;
  const isFloatArray = data instanceof Float32Array || data instanceof Float64Array;
  if ((tensor.dtype === 'F16' || tensor.dtype === 'BF16') && isFloatArray) {
    const toBits = tensor.dtype === 'F16' ? numberToF16Bits : numberToBF16Bits;
    const bits = new Uint16Array(count);
    for (let i = 0; i < count; i++) bits[i] = toBits(data[i] as number);
    data = bits;
  }
  const expected = DTYPES[tensor.dtype].array;
  if (!(data instanceof expected)) {
    throw new Error(`${where}: dtype ${tensor.dtype} needs a ${expected.name}, got a ${data.constructor.name}`);
  }
  return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
}

function writeFully(fd: number, bytes: Uint8Array): void {
  let done = 0;
  while (done < bytes.length) {
    done += writeSync(fd, bytes, done, Math.min(IO_CHUNK_BYTES, bytes.length - done));
  }
}

/**
 * Writes tensors to a safetensors file, atomically: the bytes go to a temporary file next to
 * `path`, are flushed to disk, and only then renamed over `path`, so a crash leaves either the
 * old checkpoint or the new one, never half of one.
 *
 * Tensors are laid out largest element size first (then by name), and the header is padded with
 * spaces to a multiple of 8 bytes, so each tensor starts aligned to its element size, as the
 * reference implementation does.
 */
export function writeSafetensors(
  path: string,
  tensors: ReadonlyMap<string, TensorToWrite> | Record<string, TensorToWrite>,
  metadata?: Record<string, string>,
): void {
  requireLittleEndianHost();
  const named: [string, TensorToWrite][] =
    tensors instanceof Map ? [...tensors.entries()] : Object.entries(tensors as Record<string, TensorToWrite>);
  const prepared = named.map(([name, tensor]) => {
    if (name === METADATA_KEY) throw new Error(`${path}: "${METADATA_KEY}" is reserved and cannot name a tensor`);
    return { name, tensor, bytes: tensorBytes(name, tensor, path) };
  });
  prepared.sort((a, b) => DTYPES[b.tensor.dtype].bytes - DTYPES[a.tensor.dtype].bytes || (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));

  const header: Record<string, unknown> = {};
  if (metadata !== undefined) header[METADATA_KEY] = checkMetadata(metadata, `${path}: metadata`);
  let offset = 0;
  for (const { name, tensor, bytes } of prepared) {
    header[name] = { dtype: tensor.dtype, shape: [...tensor.shape], data_offsets: [offset, offset + bytes.length] };
    offset += bytes.length;
  }
  const json = new TextEncoder().encode(JSON.stringify(header));
  const paddedLength = Math.ceil(json.length / 8) * 8;
  const headerBytes = new Uint8Array(8 + paddedLength).fill(0x20, 8 + json.length);
  new DataView(headerBytes.buffer).setBigUint64(0, BigInt(paddedLength), true);
  headerBytes.set(json, 8);

  const directory = dirname(path);
  mkdirSync(directory, { recursive: true });
  const temporary = join(directory, `.${basename(path)}.tmp-${process.pid}-${Date.now()}`);
  try {
    withFile(temporary, 'w', (fd) => {
      writeFully(fd, headerBytes);
      for (const { bytes } of prepared) writeFully(fd, bytes);
      fsyncSync(fd);
    });
    renameSync(temporary, path);
  } catch (err) {
    rmSync(temporary, { force: true });
    throw err;
  }
  syncDirectory(directory);
}

/** Makes the rename itself durable. Best effort: some platforms cannot fsync a directory. */
function syncDirectory(directory: string): void {
  try {
    const fd = openSync(directory, 'r');
    try {
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
  } catch {
    // The file is complete either way; only the rename might not survive a power cut.
  }
}
