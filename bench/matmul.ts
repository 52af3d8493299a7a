/**
 * GFLOPS of tf.matMul on the wasm backend: tfjs-backend-wasm's own kernel vs the native BLAS
 * kernel (src/policy/tfjs/native-matmul.ts) with 1 and 2 OpenBLAS threads, on the shapes the
 * policy model produces; plus NumPy on the same shapes when a Python with numpy is available.
 *
 *   npx tsx bench/matmul.ts [minSecondsPerCase=0.5]
 *
 * Environment: EMPO2_BENCH_PYTHON picks the interpreter for the NumPy column (default: the project's
 * .venv python, which `npm run setup:test` fills with numpy, else python3).
 */
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { initBackend, nativeMatMulStatus, registerNativeMatMul, setBlasThreads, tf, unregisterNativeMatMul } from '../src/internals.ts';

const minSeconds = Number(process.argv[2] ?? 0.5);
if (!(minSeconds > 0)) throw new Error(`minSecondsPerCase must be a positive number, got ${process.argv[2]}`);

interface Case {
  name: string;
  a: number[];
  b: number[];
  transposeA: boolean;
  transposeB: boolean;
}

const cases: Case[] = [
  { name: '1024² square', a: [1024, 1024], b: [1024, 1024], transposeA: false, transposeB: false },
  { name: 'linear fwd [6656,128]x[384,128]^T', a: [6656, 128], b: [384, 128], transposeA: false, transposeB: true },
  { name: 'weight grad [6656,384]^T x [6656,128]', a: [6656, 384], b: [6656, 128], transposeA: true, transposeB: false },
  { name: 'attention [64,416,32]x[64,32,208]', a: [64, 416, 32], b: [64, 32, 208], transposeA: false, transposeB: false },
  { name: 'attention [64,416,32]x[64,208,32]^T', a: [64, 416, 32], b: [64, 208, 32], transposeA: false, transposeB: true },
  // Shapes of a decoding step (32 sequences): small products where per-call overhead matters.
  { name: 'decode linear [32,128]x[384,128]^T', a: [32, 128], b: [384, 128], transposeA: false, transposeB: true },
  { name: 'decode attention [128,1,32]x[128,208,32]^T', a: [128, 1, 32], b: [128, 208, 32], transposeA: false, transposeB: true },
];

function flops(c: Case): number {
  const batch = c.a.slice(0, -2).reduce((x, y) => x * y, 1);
  const [m, k] = c.transposeA ? [c.a.at(-1)!, c.a.at(-2)!] : [c.a.at(-2)!, c.a.at(-1)!];
  const n = c.transposeB ? c.b.at(-2)! : c.b.at(-1)!;
  return 2 * batch * m * n * k;
}

/** Median seconds per product over enough repetitions to fill `minSeconds`. */
function timeProduct(a: tf.Tensor, b: tf.Tensor, c: Case): number {
  tf.matMul(a, b, c.transposeA, c.transposeB).dispose(); // warm-up (allocation, xnnpack packing)
  const samples: number[] = [];
  const start = performance.now();
  while (samples.length < 3 || (performance.now() - start) / 1000 < minSeconds) {
    const t = performance.now();
    tf.matMul(a, b, c.transposeA, c.transposeB).dispose();
    samples.push((performance.now() - t) / 1000);
    if (samples.length >= 1000) break;
  }
  samples.sort((x, y) => x - y);
  return samples[Math.floor(samples.length / 2)];
}

function numpyTimes(): Map<string, number> | string {
  const venv = new URL('../.venv/bin/python', import.meta.url).pathname;
  const python = process.env.EMPO2_BENCH_PYTHON ?? (existsSync(venv) ? venv : 'python3');
  const script = `
import json, sys, time
import numpy as np
cases = json.loads(sys.argv[1]); min_seconds = float(sys.argv[2]); out = {}
rng = np.random.default_rng(0)
for c in cases:
    a = rng.standard_normal(c['a'], dtype=np.float32); b = rng.standard_normal(c['b'], dtype=np.float32)
    f = lambda: np.matmul(np.swapaxes(a, -1, -2) if c['transposeA'] else a, np.swapaxes(b, -1, -2) if c['transposeB'] else b)
    f(); samples = []; start = time.perf_counter()
    while len(samples) < 3 or (time.perf_counter() - start < min_seconds and len(samples) < 1000):
        t = time.perf_counter(); f(); samples.append(time.perf_counter() - t)
    samples.sort(); out[c['name']] = samples[len(samples) // 2]
print(json.dumps({'numpy': np.__version__, 'times': out}))
`;
  const run = spawnSync(python, ['-c', script, JSON.stringify(cases), String(minSeconds)], { encoding: 'utf8' });
  if (run.error) return `${python} not runnable (${run.error.message})`;
  if (run.status !== 0) {
    const lastLine = run.stderr.trim().split('\n').at(-1) ?? '';
    return lastLine.includes('numpy') ? `numpy not importable by ${python}` : `${python} failed: ${lastLine}`;
  }
  const parsed = JSON.parse(run.stdout) as { numpy: string; times: Record<string, number> };
  console.log(`numpy ${parsed.numpy} (${python})`);
  return new Map(Object.entries(parsed.times));
}

await initBackend('wasm');
if (!registerNativeMatMul()) {
  console.log(`native matmul unavailable: ${nativeMatMulStatus().reason}`);
}
const status = nativeMatMulStatus();
console.log(
  `backend ${tf.getBackend()}; native: ${status.reason}` +
    (status.coreType ? `; OpenBLAS core ${status.coreType}${status.coreTypeForced ? ' (forced)' : ''}` : '') +
    (status.threads ? `, default threads ${status.threads}` : ''),
);

interface Row {
  name: string;
  gflop: number;
  wasm: number;
  native1?: number;
  native2?: number;
  numpy?: number;
}
const rows: Row[] = [];
for (const c of cases) {
  const a = tf.randomNormal(c.a, 0, 1, 'float32', 1);
  const b = tf.randomNormal(c.b, 0, 1, 'float32', 2);
  const row: Row = { name: c.name, gflop: flops(c) / 1e9, wasm: 0 };
  unregisterNativeMatMul();
  row.wasm = timeProduct(a, b, c);
  if (status.active) {
    registerNativeMatMul();
    if (setBlasThreads(1)) row.native1 = timeProduct(a, b, c);
    if (setBlasThreads(2)) row.native2 = timeProduct(a, b, c);
    else row.native2 = timeProduct(a, b, c); // not OpenBLAS: whatever threading the library does
  }
  tf.dispose([a, b]);
  rows.push(row);
}
if (status.active && status.threads) setBlasThreads(status.threads);

const numpy = numpyTimes();
if (typeof numpy === 'string') console.log(`numpy column skipped: ${numpy}`);

const gflops = (row: Row, seconds: number | undefined): string => (seconds === undefined ? '-' : (row.gflop / seconds).toFixed(1));
const ms = (seconds: number | undefined): string => (seconds === undefined ? '-' : (seconds * 1000).toFixed(2));
const ratio = (base: number, other: number | undefined): string => (other === undefined ? '-' : `${(base / other).toFixed(1)}x`);

const table = rows.map((row) => {
  const np = typeof numpy === 'string' ? undefined : numpy.get(row.name);
  const best = Math.min(row.native1 ?? Infinity, row.native2 ?? Infinity);
  return {
    case: row.name,
    'wasm ms': ms(row.wasm),
    'wasm GFLOPS': gflops(row, row.wasm),
    'BLAS 1t ms': ms(row.native1),
    'BLAS 1t GFLOPS': gflops(row, row.native1),
    'BLAS 2t ms': ms(row.native2),
    'BLAS 2t GFLOPS': gflops(row, row.native2),
    'speed-up': ratio(row.wasm, Number.isFinite(best) ? best : undefined),
    'numpy GFLOPS': gflops(row, np),
    'BLAS/numpy': np === undefined || !Number.isFinite(best) ? '-' : `${(np / best).toFixed(2)}x`,
  };
});
console.table(table);
