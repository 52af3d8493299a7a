/**
 * Token choice from one row of logits: temperature, nucleus (top-p), and an optional set of
 * allowed token ids (constrained decoding). Plain JS over Float32Array: the vocabulary row is
 * already on the host and this is far cheaper than another round of tensor ops.
 */
import type { Rng } from '../util/rng.ts';

export interface SampleOptions {
  /** Softmax temperature; 0 means greedy. */
  temperature: number;
  /** Nucleus sampling: keep the smallest set of tokens whose probability reaches topP. */
  topP: number;
}

export interface SampledToken {
  token: number;
  /** log-probability of the token under softmax(logits / temperature), unconstrained (the policy's own distribution). */
  logprob: number;
}

export function logSumExp(values: Float32Array | number[], scale = 1): number {
  let max = -Infinity;
  for (let i = 0; i < values.length; i++) if (values[i] * scale > max) max = values[i] * scale;
  if (max === -Infinity) return -Infinity;
  let sum = 0;
  for (let i = 0; i < values.length; i++) sum += Math.exp(values[i] * scale - max);
  return max + Math.log(sum);
}

export function sampleToken(logits: Float32Array, opts: SampleOptions, rng: Rng, allowed?: readonly number[] | null): SampledToken {
  const t = opts.temperature > 0 ? opts.temperature : 1;
  const scale = 1 / t;
  const lse = logSumExp(logits, scale);
  const candidates = allowed && allowed.length > 0 ? allowed : null;
  let token: number;
  if (opts.temperature <= 0) {
    token = argmax(logits, candidates);
  } else {
    // Probabilities renormalised over the candidates (all tokens when unconstrained).
    const ids = candidates ?? range(logits.length);
    let max = -Infinity;
    for (const id of ids) if (logits[id] * scale > max) max = logits[id] * scale;
    const probs = ids.map((id) => Math.exp(logits[id] * scale - max));
    let total = probs.reduce((a, b) => a + b, 0);
    let order = ids.map((_, i) => i);
    if (opts.topP < 1) {
      order.sort((a, b) => probs[b] - probs[a] || ids[a] - ids[b]);
      let acc = 0;
      let keep = 0;
      while (keep < order.length && acc < opts.topP * total) acc += probs[order[keep++]];
      order = order.slice(0, Math.max(1, keep));
      total = order.reduce((a, i) => a + probs[i], 0);
    }
    let u = rng.next() * total;
    let chosen = order[order.length - 1];
    for (const i of order) {
      u -= probs[i];
      if (u < 0) {
        chosen = i;
        break;
      }
    }
    token = ids[chosen];
  }
  return { token, logprob: logits[token] * scale - lse };
}

function argmax(logits: Float32Array, candidates: readonly number[] | null): number {
  let best = -1;
  let bestValue = -Infinity;
  const ids = candidates ?? range(logits.length);
  for (const id of ids) {
    if (logits[id] > bestValue || best < 0) {
      best = id;
      bestValue = logits[id];
    }
  }
  return best;
}

const ranges = new Map<number, number[]>();
function range(n: number): number[] {
  let r = ranges.get(n);
  if (!r) {
    r = Array.from({ length: n }, (_, i) => i);
    ranges.set(n, r);
  }
  return r;
}
