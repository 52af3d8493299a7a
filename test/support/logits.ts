/**
 * Comparing our engine's logits with a reference's: the logits of one sequence on its own (as
 * transformers computes them for an unpadded batch of one) and the relative-error measure the
 * numerical tests use.
 */
import { expect } from 'vitest';
import { tf } from '../../src/policy/tfjs/backend.ts';
import type { Qwen2Model } from '../../src/policy/tfjs/qwen2.ts';

/** Logits [T, V] of one sequence (positions 0..T−1, causal mask), row-major; with `lastOnly`, [V] of the last position. */
export function sequenceLogits(model: Qwen2Model, ids: number[], lastOnly = false): Float32Array {
  return tf.tidy(() => {
    const n = ids.length;
    const mask = new Float32Array(n * n);
    for (let q = 0; q < n; q++) for (let k = 0; k < n; k++) mask[q * n + k] = k <= q ? 0 : -1e9;
    const { hidden } = model.forward(
      tf.tensor2d(ids, [1, n], 'int32'),
      tf.tensor2d([...ids.keys()], [1, n], 'int32'),
      tf.tensor4d(mask, [1, 1, n, n]),
    );
    const rows = hidden.reshape([n, hidden.shape[2]]) as tf.Tensor2D;
    return model.logits(lastOnly ? rows.slice([n - 1, 0], [1, -1]) : rows).dataSync() as Float32Array;
  });
}

/** Largest |ours − reference| / max(1, |reference|) over two equally long arrays. */
export function worstRelative(ours: ArrayLike<number>, reference: ArrayLike<number>): number {
  expect(ours.length).toBe(reference.length);
  let worst = 0;
  for (let i = 0; i < reference.length; i++)
    worst = Math.max(worst, Math.abs(ours[i] - reference[i]) / Math.max(1, Math.abs(reference[i])));
  return worst;
}
