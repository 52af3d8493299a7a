/**
 * BatchMatMul for the tfjs wasm backend through a native BLAS (`cblas_sgemm`, called with koffi).
 *
 * tfjs-backend-wasm only reaches xnnpack speed for a plain 2-D, non-transposed product; with
 * `transposeA`/`transposeB` or a batch dimension it drops to a ~1 GFLOPS loop. Every matmul
 * gradient is transposed and attention is batched, so training spends most of its time there.
 * We replace the kernel in tfjs's registry (the model code keeps calling `tf.matMul`) and keep the
 * original wasm kernel for whatever this one does not handle, and for when no BLAS is installed.
 *
 * The BLAS works directly on the wasm heap: koffi passes a typed array as a pointer to its bytes
 * (no copy), so each product is one FFI call per batch item.
 */
import { createRequire } from 'node:module';
import { readFileSync } from 'node:fs';
import * as tf from '@tensorflow/tfjs';
import type { BackendWasm } from '@tensorflow/tfjs-backend-wasm';

type Koffi = typeof import('koffi');
type LibraryHandle = ReturnType<Koffi['load']>;

/** `cblas_sgemm` with CBLAS's argument order; enums are the standard CBLAS values below. */
type Sgemm = (
  order: number,
  transA: number,
  transB: number,
  m: number,
  n: number,
  k: number,
  alpha: number,
  a: Float32Array,
  lda: number,
  b: Float32Array,
  ldb: number,
  beta: number,
  c: Float32Array,
  ldc: number,
) => void;

const CBLAS_ROW_MAJOR = 101;
const CBLAS_NO_TRANS = 111;
const CBLAS_TRANS = 112;

export interface NativeMatMulStatus {
  /** Whether BatchMatMul on the wasm backend currently runs through the native BLAS. */
  active: boolean;
  /** Human-readable explanation, meant for logs (why it is active or why not). */
  reason: string;
  /** The library path or name that was loaded. */
  library?: string;
  /** OpenBLAS's kernel family (e.g. "SkylakeX"), when the library is OpenBLAS. */
  coreType?: string;
  /** Set when we overrode OpenBLAS's CPU detection, see `loadWithCoreFix`. */
  coreTypeForced?: boolean;
  /** OpenBLAS's thread count, when the library is OpenBLAS. */
  threads?: number;
}

interface LoadedBlas {
  sgemm: Sgemm;
  /** openblas_set_num_threads, when the library is OpenBLAS. */
  setThreads?: (threads: number) => void;
  library: string;
  coreType?: string;
  coreTypeForced?: boolean;
  threads?: number;
}

let status: NativeMatMulStatus = { active: false, reason: 'registerNativeMatMul() has not been called' };
let originalKernel: tf.KernelConfig | null = null;
let nativeKernel: tf.KernelConfig | null = null;
let blas: LoadedBlas | null = null;

export function nativeMatMulStatus(): NativeMatMulStatus {
  return { ...status };
}

/**
 * Routes the wasm backend's BatchMatMul through `cblas_sgemm` when a BLAS can be loaded.
 * Returns false (leaving the wasm kernel in place) when it is disabled with
 * EMPO2_NATIVE_MATMUL=0, when koffi or the library cannot be loaded, or when the library fails a
 * small self-check; `nativeMatMulStatus().reason` says which.
 */
export function registerNativeMatMul(): boolean {
  if (nativeKernel) return true;
  if (process.env.EMPO2_NATIVE_MATMUL === '0') {
    status = { active: false, reason: 'disabled by EMPO2_NATIVE_MATMUL=0' };
    return false;
  }
  const wasmKernel = tf.getKernel('BatchMatMul', 'wasm');
  if (!wasmKernel) {
    status = { active: false, reason: "no BatchMatMul kernel is registered for backend 'wasm'" };
    return false;
  }
  if (!blas) {
    const loaded = loadBlas();
    if (typeof loaded === 'string') {
      status = { active: false, reason: loaded };
      return false;
    }
    blas = loaded;
  }
  originalKernel = wasmKernel;
  nativeKernel = {
    kernelName: 'BatchMatMul',
    backendName: 'wasm',
    kernelFunc: makeNativeBatchMatMul(blas.sgemm, wasmKernel),
  };
  tf.unregisterKernel('BatchMatMul', 'wasm');
  tf.registerKernel(nativeKernel);
  if (!tf.getKernel(COLUMNS_MATMUL, 'wasm'))
    tf.registerKernel({ kernelName: COLUMNS_MATMUL, backendName: 'wasm', kernelFunc: makeColumnsMatMul(blas.sgemm) });
  status = activeStatus(blas);
  return true;
}

const COLUMNS_MATMUL = 'Empo2ColumnsMatMul';

/**
 * a[…, :, start : start + w] · b for a [batch…, m, S] and b [batch…, w, n] (the same batch shape):
 * one sgemm per batch item reading the columns in place (leading dimension S), where tf.slice or
 * tf.split on the wasm backend would first copy all of `a` out of the heap. The same product of the
 * same values as on the sliced copy. Null when the native kernel is not active (then slice instead).
 */
export function columnsMatMul(a: tf.Tensor, b: tf.Tensor, start: number): tf.Tensor | null {
  if (!nativeKernel || tf.getBackend() !== 'wasm') return null;
  return tf.engine().runKernel(COLUMNS_MATMUL, { a, b }, { start }) as tf.Tensor;
}

function makeColumnsMatMul(sgemm: Sgemm): tf.KernelFunc {
  return (args) => {
    const { a, b } = args.inputs as { a: tf.TensorInfo; b: tf.TensorInfo };
    const { start } = args.attrs as unknown as { start: number };
    const S = a.shape[a.shape.length - 1];
    const m = a.shape[a.shape.length - 2];
    const [w, n] = b.shape.slice(-2);
    const batch = product(a.shape.slice(0, -2));
    if (a.dtype !== 'float32' || b.dtype !== 'float32' || product(b.shape.slice(0, -2)) !== batch || start < 0 || start + w > S)
      throw new Error(`${COLUMNS_MATMUL}: columns [${start}, ${start + w}) of [${a.shape}] times [${b.shape}] do not fit`);
    return heapProduct(args.backend as BackendWasm, { a, b, outShape: [...a.shape.slice(0, -2), m, n], k: w }, (lhs, rhs, result) => {
      for (let i = 0; i < batch; i++)
        sgemm(
          CBLAS_ROW_MAJOR,
          CBLAS_NO_TRANS,
          CBLAS_NO_TRANS,
          m,
          n,
          w,
          1,
          lhs.subarray(i * m * S + start),
          S,
          rhs.subarray(i * w * n),
          n,
          0,
          result.subarray(i * m * n),
          n,
        );
    });
  };
}

/**
 * The part every product kernel here shares: allocates the output, answers empty products (no rows
 * or columns: nothing; K = 0: zeros) and otherwise hands `run` the operands' and the output's views
 * of the wasm heap, taken after the output is allocated (growing the heap detaches earlier views).
 */
function heapProduct(
  backend: BackendWasm,
  p: { a: tf.TensorInfo; b: tf.TensorInfo; outShape: number[]; k: number },
  run: (lhs: Float32Array, rhs: Float32Array, result: Float32Array) => void,
): tf.TensorInfo {
  const out = backend.makeOutput(p.outShape, 'float32');
  if (product(p.outShape) === 0) return out;
  const result = backend.typedArrayFromHeap(out) as Float32Array;
  if (p.k === 0) {
    result.fill(0);
    return out;
  }
  run(backend.typedArrayFromHeap(p.a) as Float32Array, backend.typedArrayFromHeap(p.b) as Float32Array, result);
  return out;
}

function activeStatus(loaded: LoadedBlas): NativeMatMulStatus {
  const { sgemm: _sgemm, setThreads: _setThreads, ...details } = loaded;
  const openblas = loaded.coreType
    ? ` (OpenBLAS ${loaded.coreType} kernels${loaded.coreTypeForced ? ', CPU detection overridden' : ''}, ` +
      `${loaded.threads} thread${loaded.threads === 1 ? '' : 's'})`
    : '';
  return {
    active: true,
    reason: `BatchMatMul on wasm runs through cblas_sgemm from ${loaded.library}${openblas}`,
    ...details,
  };
}

/**
 * Sets OpenBLAS's thread count (it defaults to the core count, or OPENBLAS_NUM_THREADS).
 * Returns false when no OpenBLAS is loaded.
 */
export function setBlasThreads(threads: number): boolean {
  if (!Number.isInteger(threads) || threads < 1) {
    throw new Error(`setBlasThreads: threads must be a positive integer, got ${threads}`);
  }
  if (!blas?.setThreads) return false;
  blas.setThreads(threads);
  blas.threads = threads;
  if (status.active) status = activeStatus(blas);
  return true;
}

/** Puts the original wasm BatchMatMul kernel back (for comparisons in tests and benchmarks). */
export function unregisterNativeMatMul(): void {
  if (!nativeKernel || !originalKernel) return;
  tf.unregisterKernel('BatchMatMul', 'wasm');
  tf.registerKernel(originalKernel);
  nativeKernel = null;
  status = { active: false, reason: 'unregistered by unregisterNativeMatMul()' };
}

/** How a (possibly batched, possibly transposed) product maps onto one sgemm per batch item. */
export interface GemmPlan {
  outShape: number[];
  batch: number;
  m: number;
  n: number;
  k: number;
  lda: number;
  ldb: number;
  /** Elements between consecutive batch items of each input; 0 when that input is broadcast. */
  strideA: number;
  strideB: number;
}

/**
 * Plans `matMul(a, b, transposeA, transposeB)` or returns null when the shapes need something
 * this kernel does not do (rank < 2, mismatched inner sizes, or batch broadcasting other than
 * "same batch shape" / "one side has a single matrix"); the wasm kernel then handles or rejects it.
 */
export function planBatchedProduct(
  aShape: readonly number[],
  bShape: readonly number[],
  transposeA: boolean,
  transposeB: boolean,
): GemmPlan | null {
  const aRank = aShape.length;
  const bRank = bShape.length;
  if (aRank < 2 || bRank < 2) return null;
  const m = transposeA ? aShape[aRank - 1] : aShape[aRank - 2];
  const k = transposeA ? aShape[aRank - 2] : aShape[aRank - 1];
  const kB = transposeB ? bShape[bRank - 1] : bShape[bRank - 2];
  const n = transposeB ? bShape[bRank - 2] : bShape[bRank - 1];
  if (k !== kB) return null;

  const aBatchShape = aShape.slice(0, -2);
  const bBatchShape = bShape.slice(0, -2);
  const aBatch = product(aBatchShape);
  const bBatch = product(bBatchShape);
  const outBatchShape = broadcastShapes(aBatchShape, bBatchShape);
  if (!outBatchShape) return null;
  const batch = product(outBatchShape);
  // One-to-one when a side has as many matrices as the output (broadcasting only ever adds 1s,
  // so equal counts mean equal shapes); stride 0 when a side has a single matrix.
  const aStrideFactor = aBatch === batch ? 1 : aBatch === 1 ? 0 : -1;
  const bStrideFactor = bBatch === batch ? 1 : bBatch === 1 ? 0 : -1;
  if (aStrideFactor < 0 || bStrideFactor < 0) return null;
  return {
    outShape: [...outBatchShape, m, n],
    batch,
    m,
    n,
    k,
    lda: transposeA ? m : k,
    ldb: transposeB ? k : n,
    strideA: aStrideFactor * m * k,
    strideB: bStrideFactor * k * n,
  };
}

function product(shape: readonly number[]): number {
  let size = 1;
  for (const d of shape) size *= d;
  return size;
}

/** NumPy-style broadcast of two batch shapes, or null when they are incompatible. */
function broadcastShapes(a: readonly number[], b: readonly number[]): number[] | null {
  const rank = Math.max(a.length, b.length);
  const out: number[] = new Array(rank);
  for (let i = 0; i < rank; i++) {
    const da = a[a.length - rank + i] ?? 1;
    const db = b[b.length - rank + i] ?? 1;
    if (da !== db && da !== 1 && db !== 1) return null;
    out[i] = da === 1 ? db : da;
  }
  return out;
}

function makeNativeBatchMatMul(sgemm: Sgemm, fallback: tf.KernelConfig): tf.KernelFunc {
  return (args) => {
    const { a, b } = args.inputs as { a: tf.TensorInfo; b: tf.TensorInfo };
    const { transposeA, transposeB } = args.attrs as unknown as { transposeA: boolean; transposeB: boolean };
    const plan = a.dtype === 'float32' && b.dtype === 'float32' ? planBatchedProduct(a.shape, b.shape, transposeA, transposeB) : null;
    if (!plan) return fallback.kernelFunc(args);

    const { batch, m, n, k, lda, ldb, strideA, strideB } = plan;
    const transA = transposeA ? CBLAS_TRANS : CBLAS_NO_TRANS;
    const transB = transposeB ? CBLAS_TRANS : CBLAS_NO_TRANS;
    return heapProduct(args.backend as BackendWasm, { a, b, outShape: plan.outShape, k }, (lhs, rhs, result) => {
      if (batch === 1) {
        sgemm(CBLAS_ROW_MAJOR, transA, transB, m, n, k, 1, lhs, lda, rhs, ldb, 0, result, n);
        return;
      }
      const strideOut = m * n;
      for (let i = 0; i < batch; i++)
        sgemm(
          CBLAS_ROW_MAJOR,
          transA,
          transB,
          m,
          n,
          k,
          1,
          lhs.subarray(i * strideA),
          lda,
          rhs.subarray(i * strideB),
          ldb,
          0,
          result.subarray(i * strideOut),
          n,
        );
    });
  };
}

/** Loads koffi and the first BLAS that works; returns a reason string when none does. */
function loadBlas(): LoadedBlas | string {
  let koffi: Koffi;
  try {
    koffi = createRequire(import.meta.url)('koffi') as Koffi;
  } catch (err) {
    return `koffi (the FFI package) could not be loaded: ${firstLine(err)}`;
  }
  const explicit = process.env.EMPO2_BLAS_LIB;
  const candidates = explicit ? [explicit] : blasCandidates();
  const failures: string[] = [];
  for (const library of candidates) {
    try {
      const loaded = loadWithCoreFix(koffi, library);
      const problem = selfCheck(loaded.sgemm);
      if (problem) {
        failures.push(`${library}: ${problem}`);
        continue;
      }
      return loaded;
    } catch (err) {
      failures.push(`${library}: ${firstLine(err)}`);
    }
  }
  const hint = 'install OpenBLAS (scripts/setup-blas.sh) or set EMPO2_BLAS_LIB to a library exporting cblas_sgemm';
  return `no usable BLAS found (${failures.join('; ')}); ${hint}`;
}

function blasCandidates(): string[] {
  if (process.platform === 'darwin') {
    return [
      '/System/Library/Frameworks/Accelerate.framework/Accelerate',
      '/opt/homebrew/opt/openblas/lib/libopenblas.dylib',
      '/usr/local/opt/openblas/lib/libopenblas.dylib',
    ];
  }
  if (process.platform === 'win32') return ['libopenblas.dll', 'openblas.dll'];
  // The bare soname goes through the dynamic loader (ldconfig cache, Debian's alternatives);
  // the multiarch paths cover systems where the alternatives link is missing.
  const triplet = process.arch === 'arm64' ? 'aarch64-linux-gnu' : 'x86_64-linux-gnu';
  return [
    'libopenblas.so.0',
    `/usr/lib/${triplet}/openblas-pthread/libopenblas.so.0`,
    `/usr/lib/${triplet}/openblas-openmp/libopenblas.so.0`,
    `/usr/lib/${triplet}/openblas-serial/libopenblas.so.0`,
    'libopenblas.so',
  ];
}

/**
 * OpenBLAS picks its kernels from the CPU model at load time; a release older than the CPU
 * (Debian 12's 0.3.21 on Emerald Rapids, for one) does not recognise it and falls back to
 * SSE3-era "Prescott" kernels at about half the speed. When that happens and the CPU flags show
 * AVX2/AVX-512, we reload it with OPENBLAS_CORETYPE naming the matching kernel family. A value the
 * user set is always respected.
 */
function loadWithCoreFix(koffi: Koffi, library: string): LoadedBlas {
  let lib = koffi.load(library);
  let info = describeOpenBlas(lib);
  let coreTypeForced = false;
  const wanted = process.env.OPENBLAS_CORETYPE ? null : coreTypeFromCpuFlags();
  if (info.coreType && wanted && !AVX2_CLASS_CORES.has(info.coreType.toLowerCase())) {
    lib.unload();
    process.env.OPENBLAS_CORETYPE = wanted;
    try {
      lib = koffi.load(library);
    } finally {
      // Read once when the library initialises; not meant to leak into child processes.
      delete process.env.OPENBLAS_CORETYPE;
    }
    info = describeOpenBlas(lib);
    coreTypeForced = true;
  }
  const sgemm = lib.func(
    'void cblas_sgemm(int order, int transA, int transB, int m, int n, int k, float alpha, ' +
      'const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc)',
  ) as unknown as Sgemm;
  return { sgemm, library, ...info, ...(info.coreType ? { coreTypeForced } : {}) };
}

/** x86 kernel families (lower-cased OpenBLAS core names) that already use AVX2 or better. */
const AVX2_CLASS_CORES = new Set(['haswell', 'skylakex', 'cooperlake', 'sapphirerapids', 'zen', 'excavator']);

function coreTypeFromCpuFlags(): string | null {
  if (process.platform !== 'linux' || process.arch !== 'x64') return null;
  let flags: Set<string>;
  try {
    const cpuinfo = readFileSync('/proc/cpuinfo', 'utf8');
    const line = cpuinfo.split('\n').find((l) => l.startsWith('flags'));
    if (!line) return null;
    flags = new Set(
      line
        .slice(line.indexOf(':') + 1)
        .trim()
        .split(/\s+/),
    );
  } catch {
    return null;
  }
  const avx512 = ['avx512f', 'avx512dq', 'avx512cd', 'avx512bw', 'avx512vl'].every((f) => flags.has(f));
  if (avx512 && flags.has('avx512_bf16')) return 'Cooperlake';
  if (avx512) return 'SkylakeX';
  if (flags.has('avx2') && flags.has('fma')) return 'Haswell';
  return null;
}

type OpenBlasInfo = Pick<LoadedBlas, 'coreType' | 'threads' | 'setThreads'>;

function describeOpenBlas(lib: LibraryHandle): OpenBlasInfo {
  const info: OpenBlasInfo = {};
  try {
    info.coreType = String(lib.func('const char *openblas_get_corename()')());
    info.threads = Number(lib.func('int openblas_get_num_threads()')());
    info.setThreads = lib.func('void openblas_set_num_threads(int threads)') as (threads: number) => void;
  } catch {
    /* not OpenBLAS (Accelerate, MKL, ...): nothing to report */
  }
  return info;
}

/** Catches a library whose cblas_sgemm does not take 32-bit ints (ILP64) or is otherwise off. */
function selfCheck(sgemm: Sgemm): string | null {
  const a = new Float32Array([1, 2, 3, 4, 5, 6]); // 2x3
  const b = new Float32Array([7, 8, 9, 10, 11, 12]); // 2x3, used transposed
  const c = new Float32Array(4);
  sgemm(CBLAS_ROW_MAJOR, CBLAS_NO_TRANS, CBLAS_TRANS, 2, 2, 3, 1, a, 3, b, 3, 0, c, 2);
  const expected = [50, 68, 122, 167];
  return expected.every((v, i) => c[i] === v)
    ? null
    : `self-check 2x3·(2x3)^T gave [${Array.from(c).join(', ')}], expected [${expected.join(', ')}]`;
}

function firstLine(err: unknown): string {
  const message = err instanceof Error ? err.message : String(err);
  return message.split('\n')[0].slice(0, 300);
}
