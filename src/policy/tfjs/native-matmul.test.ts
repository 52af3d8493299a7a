/**
 * The native BatchMatMul must agree with tfjs-backend-wasm's own kernel on every shape the model
 * can produce. Tolerance: max |native - wasm| <= 1e-4 * max(1, max |wasm|) per product, i.e. 1e-4
 * relative to the largest entry of the result (both sum K float32 products in different orders).
 * Results are also checked against a float64 triple loop, so a wrong wasm result cannot hide a bug.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { initBackend, tf } from './backend.ts';
import { columnsMatMul, nativeMatMulStatus, planBatchedProduct, registerNativeMatMul, unregisterNativeMatMul } from './native-matmul.ts';

const TOLERANCE = 1e-4;

await initBackend('wasm');
// initBackend may already have registered it; registering again is a no-op that reports the state.
const available = registerNativeMatMul();
const whyNot = nativeMatMulStatus().reason;
if (!available) console.warn(`native matmul tests skipped: ${whyNot}`);

/** Runs `fn` with the original wasm kernel, then with the native one, and returns both results. */
function bothKernels<T>(fn: () => T): { wasm: T; native: T } {
  unregisterNativeMatMul();
  const wasmKernel = tf.getKernel('BatchMatMul', 'wasm')?.kernelFunc;
  let wasm: T;
  try {
    wasm = fn();
  } finally {
    expect(registerNativeMatMul()).toBe(true);
  }
  expect(tf.getKernel('BatchMatMul', 'wasm')?.kernelFunc, 'native kernel registered').not.toBe(wasmKernel);
  return { wasm, native: fn() };
}

/** Float64 triple loop over the broadcast batch, the ground truth for both kernels. */
function referenceProduct(
  a: Float32Array,
  aShape: number[],
  b: Float32Array,
  bShape: number[],
  transposeA: boolean,
  transposeB: boolean,
): Float64Array {
  const plan = planBatchedProduct(aShape, bShape, transposeA, transposeB);
  if (!plan) throw new Error(`reference: unsupported shapes ${aShape} x ${bShape}`);
  const { batch, m, n, k, strideA, strideB } = plan;
  const out = new Float64Array(batch * m * n);
  for (let p = 0; p < batch; p++) {
    for (let i = 0; i < m; i++) {
      for (let j = 0; j < n; j++) {
        let sum = 0;
        for (let q = 0; q < k; q++) {
          const av = a[p * strideA + (transposeA ? q * m + i : i * k + q)];
          const bv = b[p * strideB + (transposeB ? j * k + q : q * n + j)];
          sum += av * bv;
        }
        out[p * m * n + i * n + j] = sum;
      }
    }
  }
  return out;
}

function expectClose(actual: ArrayLike<number>, expected: ArrayLike<number>, what: string): void {
  expect(actual.length, `${what}: length`).toBe(expected.length);
  let scale = 1;
  for (let i = 0; i < expected.length; i++) scale = Math.max(scale, Math.abs(expected[i]));
  let worst = 0;
  for (let i = 0; i < expected.length; i++) worst = Math.max(worst, Math.abs(actual[i] - expected[i]));
  expect(worst / scale, `${what}: max abs diff ${worst} vs scale ${scale}`).toBeLessThanOrEqual(TOLERANCE);
}

let seed = 7;
function random(shape: number[]): tf.Tensor {
  seed += 1;
  return tf.randomNormal(shape, 0, 1, 'float32', seed);
}

/** Stored shape of an operand whose logical (post-transpose) matrix is rows x cols. */
function stored(batch: number[], rows: number, cols: number, transposed: boolean): number[] {
  return [...batch, ...(transposed ? [cols, rows] : [rows, cols])];
}

describe('planBatchedProduct', () => {
  it('maps transposes to leading dimensions and broadcast batches to zero strides', () => {
    expect(planBatchedProduct([5, 7], [9, 7], false, true)).toEqual({
      outShape: [5, 9],
      batch: 1,
      m: 5,
      n: 9,
      k: 7,
      lda: 7,
      ldb: 7,
      strideA: 35,
      strideB: 63,
    });
    expect(planBatchedProduct([2, 3, 7, 5], [7, 4], true, false)).toMatchObject({
      outShape: [2, 3, 5, 4],
      batch: 6,
      m: 5,
      k: 7,
      n: 4,
      lda: 5,
      ldb: 4,
      strideA: 35,
      strideB: 0,
    });
    expect(planBatchedProduct([1, 5, 7], [2, 3, 7, 4], false, false)).toMatchObject({
      outShape: [2, 3, 5, 4],
      batch: 6,
      strideA: 0,
      strideB: 28,
    });
    expect(planBatchedProduct([3, 5, 7], [1, 3, 7, 4], false, false)).toMatchObject({
      outShape: [1, 3, 5, 4],
      batch: 3,
      strideA: 35,
      strideB: 28,
    });
  });

  it('declines what it does not handle, leaving it to the wasm kernel', () => {
    expect(planBatchedProduct([5], [5, 2], false, false)).toBeNull(); // rank 1
    expect(planBatchedProduct([5, 7], [6, 2], false, false)).toBeNull(); // inner sizes differ
    expect(planBatchedProduct([2, 1, 5, 7], [1, 3, 7, 2], false, false)).toBeNull(); // two-sided broadcast
    expect(planBatchedProduct([2, 5, 7], [3, 7, 2], false, false)).toBeNull(); // incompatible batches
  });
});

const disabledOnPurpose = process.env.EMPO2_NATIVE_MATMUL === '0';
const mustBeAvailable = !!process.env.CI && !disabledOnPurpose;

describe('native BatchMatMul availability', () => {
  it.skipIf(available || mustBeAvailable)(`is skipped here: ${whyNot}`, () => {});
  it.runIf(mustBeAvailable)('is installed in CI (scripts/setup-blas.sh)', () => {
    expect(available, whyNot).toBe(true);
  });
});

describe.skipIf(!available)('native BatchMatMul vs the wasm kernel', () => {
  afterAll(() => {
    // Leave the process as initBackend() would: native on.
    registerNativeMatMul();
  });

  const batches: Array<{ name: string; a: number[]; b: number[] }> = [
    { name: 'rank 2', a: [], b: [] },
    { name: 'batch [1]', a: [1], b: [1] },
    { name: 'batch [3]', a: [3], b: [3] },
    { name: 'batch [2,3]', a: [2, 3], b: [2, 3] },
    { name: 'a batch [2,3], b a single matrix', a: [2, 3], b: [] },
    { name: 'a batch [1], b batch [3]', a: [1], b: [3] },
    { name: 'a batch [3], b batch [1,3]', a: [3], b: [1, 3] },
  ];
  const sizes = [
    { m: 5, k: 7, n: 3 },
    { m: 33, k: 17, n: 65 },
    { m: 1, k: 31, n: 9 },
  ];

  for (const { name, a: aBatch, b: bBatch } of batches) {
    for (const transposeA of [false, true]) {
      for (const transposeB of [false, true]) {
        it(`${name}, transposeA=${transposeA}, transposeB=${transposeB}`, () => {
          for (const { m, k, n } of sizes) {
            const a = random(stored(aBatch, m, k, transposeA));
            const b = random(stored(bBatch, k, n, transposeB));
            const { wasm, native } = bothKernels(() => {
              const product = tf.matMul(a, b, transposeA, transposeB);
              const values = { shape: product.shape, data: product.dataSync() as Float32Array };
              product.dispose();
              return values;
            });
            expect(native.shape).toEqual(wasm.shape);
            const what = `${m}x${k}x${n} ${JSON.stringify(native.shape)}`;
            expectClose(native.data, wasm.data, what);
            const exact = referenceProduct(
              a.dataSync() as Float32Array,
              a.shape,
              b.dataSync() as Float32Array,
              b.shape,
              transposeA,
              transposeB,
            );
            expectClose(native.data, exact, `${what} vs float64 reference`);
            a.dispose();
            b.dispose();
          }
        });
      }
    }
  }

  it('handles empty operands (K = 0 gives zeros, M = 0 gives an empty result)', () => {
    const noInner = tf.matMul(tf.zeros([4, 0]), tf.zeros([0, 3]));
    expect(noInner.shape).toEqual([4, 3]);
    expect(Array.from(noInner.dataSync())).toEqual(new Array(12).fill(0));
    const noRows = tf.matMul(tf.zeros([2, 0, 5]), tf.ones([2, 5, 3]));
    expect(noRows.shape).toEqual([2, 0, 3]);
    tf.dispose([noInner, noRows]);
  });

  it('produces the same gradients through autograd as the wasm kernel', () => {
    const x = random([4, 6, 10]);
    const w = random([12, 10]);
    const v = random([12, 12]);
    const loss = (xs: tf.Tensor, ws: tf.Tensor): tf.Scalar =>
      tf.tidy(() => {
        // A linear layer (transposeB) followed by an attention-like batched product.
        const h = tf.matMul(xs.reshape([24, 10]), ws, false, true).reshape([4, 6, 12]);
        const scores = tf.matMul(h, h, false, true);
        return tf.matMul(scores, tf.tanh(h)).mul(tf.matMul(h, v)).sum() as tf.Scalar;
      });
    const gradients = tf.grads(loss);
    const { wasm, native } = bothKernels(() => {
      const [dx, dw] = gradients([x, w]);
      const values = [dx.dataSync() as Float32Array, dw.dataSync() as Float32Array];
      tf.dispose([dx, dw]);
      return values;
    });
    expectClose(native[0], wasm[0], 'd loss / d x');
    expectClose(native[1], wasm[1], 'd loss / d w');
    tf.dispose([x, w, v]);
  });

  it('allocates nothing beyond its output', () => {
    const a = random([3, 8, 5]);
    const b = random([3, 5, 4]);
    const before = tf.memory();
    tf.tidy(() => {
      tf.matMul(a, b);
      tf.matMul(a, b.reshape([3, 4, 5]), false, true);
    });
    const after = tf.memory();
    expect(after.numTensors).toBe(before.numTensors);
    expect(after.numBytes).toBe(before.numBytes);
    tf.dispose([a, b]);
  });
});

describe.skipIf(!available)('columnsMatMul (a block of columns times b, read in place)', () => {
  it('equals slicing the columns and multiplying, bit for bit', () => {
    const a = random([2, 3, 5, 11]);
    const widths = [4, 1, 6];
    const bs = widths.map((w) => random([2, 3, w, 7]));
    let start = 0;
    for (const [j, w] of widths.entries()) {
      const inPlace = columnsMatMul(a, bs[j], start)!;
      const sliced = tf.matMul(tf.slice(a, [0, 0, 0, start], [2, 3, 5, w]), bs[j]);
      expect(inPlace.shape).toEqual([2, 3, 5, 7]);
      expect(Array.from(inPlace.dataSync())).toEqual(Array.from(sliced.dataSync()));
      tf.dispose([inPlace, sliced]);
      start += w;
    }
    tf.dispose([a, ...bs]);
  });

  it('refuses columns outside a, and is off with the wasm kernel', () => {
    const a = random([1, 2, 3, 4]);
    const b = random([1, 2, 3, 5]);
    expect(() => columnsMatMul(a, b, 2)).toThrow(/columns \[2, 5\) of \[1,2,3,4\]/);
    unregisterNativeMatMul();
    try {
      expect(columnsMatMul(a, b, 0)).toBeNull();
    } finally {
      expect(registerNativeMatMul()).toBe(true);
    }
    tf.dispose([a, b]);
  });
});

beforeAll(() => {
  expect(tf.getBackend()).toBe('wasm');
});
