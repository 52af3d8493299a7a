/**
 * Picks the fastest TensorFlow.js backend available and fills the gaps in it.
 *
 * tfjs-node (native TensorFlow) is used when the user installed it; otherwise the wasm backend
 * (SIMD, single thread in Node). The wasm backend lacks a few kernels that autograd needs
 * (the gradient of `gather` is an UnsortedSegmentSum); we register plain-JS versions of those
 * through tfjs's kernel registry rather than routing around them in the model code.
 */
import * as tf from '@tensorflow/tfjs';
import '@tensorflow/tfjs-backend-wasm';
import type { BackendWasm } from '@tensorflow/tfjs-backend-wasm';
import { registerNativeMatMul } from './native-matmul.ts';

let ready: Promise<string> | null = null;

export function initBackend(preferred?: string): Promise<string> {
  if (!ready) ready = pickBackend(preferred ?? process.env.EMPO2_TF_BACKEND);
  return ready;
}

async function pickBackend(preferred: string | undefined): Promise<string> {
  const wanted = preferred ? [preferred] : ['tensorflow', 'wasm', 'cpu'];
  if (!preferred || preferred === 'tensorflow') {
    try {
      // Optional native backend: only present if the user installed it.
      await import('@tensorflow/tfjs-node' as string);
    } catch {
      /* not installed: fall through to wasm */
    }
  }
  for (const name of wanted) {
    if (!tf.findBackendFactory(name)) continue;
    try {
      if (await tf.setBackend(name)) {
        await tf.ready();
        if (name === 'wasm') {
          registerWasmGapKernels();
          registerNativeMatMul();
        }
        return name;
      }
    } catch {
      /* try the next one */
    }
  }
  throw new Error(`No TensorFlow.js backend could be initialised (tried: ${wanted.join(', ')})`);
}

let gapsRegistered = false;
function registerWasmGapKernels(): void {
  if (gapsRegistered) return;
  gapsRegistered = true;
  registerSharingIdentity();
  if (tf.getKernel('UnsortedSegmentSum', 'wasm')) return;
  tf.registerKernel({
    kernelName: 'UnsortedSegmentSum',
    backendName: 'wasm',
    kernelFunc: ({ inputs, backend, attrs }) => {
      const { x, segmentIds } = inputs as { x: tf.TensorInfo; segmentIds: tf.TensorInfo };
      const numSegments = (attrs as { numSegments: number }).numSegments;
      const wasm = backend as BackendWasm;
      const inner = x.shape.slice(segmentIds.shape.length).reduce((a, b) => a * b, 1);
      const out = wasm.makeOutput([numSegments, ...x.shape.slice(segmentIds.shape.length)], x.dtype);
      // Views are taken after makeOutput: growing the wasm heap detaches earlier views.
      const xs = wasm.typedArrayFromHeap(x);
      const ids = wasm.typedArrayFromHeap(segmentIds);
      const dst = wasm.typedArrayFromHeap(out);
      dst.fill(0);
      for (let i = 0; i < ids.length; i++) {
        const seg = ids[i];
        if (seg < 0 || seg >= numSegments) continue;
        const from = i * inner;
        const to = seg * inner;
        for (let j = 0; j < inner; j++) dst[to + j] += xs[from + j];
      }
      return out;
    },
  });
}

/**
 * The wasm backend's Identity copies its input, and autograd clones (Identity) every tensor it
 * saves for the backward pass: each matmul's weight, each activation. That doubled a training
 * step's memory (every weight matrix copied once per use). tfjs tensors are immutable (a
 * variable's assign swaps its buffer, never writes into it), so sharing the buffer with a
 * reference count is what the CPU backend does and is just as correct here.
 */
function registerSharingIdentity(): void {
  tf.unregisterKernel('Identity', 'wasm');
  tf.registerKernel({
    kernelName: 'Identity',
    backendName: 'wasm',
    kernelFunc: ({ inputs, backend }) => {
      const { x } = inputs as { x: tf.TensorInfo };
      (backend as BackendWasm).incRef(x.dataId);
      return { dataId: x.dataId, shape: x.shape, dtype: x.dtype };
    },
  });
}

export { tf };
