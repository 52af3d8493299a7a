/**
 * How much of the wasm heap a pass needs, so the engine can cut work into pieces that fit (and
 * refuse, before starting, a single piece that cannot). The wasm heap is 32-bit: at most 4 GiB,
 * weights and optimiser state included, and it never shrinks, so running out aborts the process.
 *
 * Activation sizes are per token, in bytes, from counting the tensors each pass keeps alive at its
 * peak (src/policy/tfjs/memory.test.ts measures the real peak on small models and checks these
 * are upper bounds that are not loose by more than 2×; bench/tfjs-memory.ts does it on SmolLM2).
 */
import { headDim, type ModelConfig } from './qwen2.ts';

/** Working-memory chunk sizes of a pass (the defaults below; tests shrink them to exercise chunking). */
export interface ChunkSizes {
  /** Attention scores one query chunk may hold (per copy). */
  attentionElements: number;
  /** Logits one chunk of scored rows may hold (per copy). */
  logitElements: number;
  /** Tokens (rows × columns) one prefill chunk of generation runs at once. */
  prefillTokens: number;
}

/** emscripten's heap maximum for tfjs-backend-wasm (getHeapMax): 4 GiB minus one 64 KiB page. */
export const WASM_HEAP_MAX = 4294901760;
/** Attention scores one query chunk may hold (per copy); a pass keeps a few copies alive. */
export const ATTENTION_ELEMENTS = 2 ** 23;
/** Logits one chunk of scored rows may hold (per copy). */
export const LOGIT_ELEMENTS = 2 ** 22;
/** Tokens (rows × columns) one prefill chunk of generation runs at once. */
export const PREFILL_TOKENS = 1024;
/** Share of the free heap a plan may fill: the allocator fragments, and estimates are estimates. */
export const HEAP_SAFETY = 0.75;

const F32 = 4;

/** Keys and values of one token in every layer. */
export function kvBytesPerToken(c: ModelConfig): number {
  return c.num_hidden_layers * 2 * c.num_key_value_heads * headDim(c) * F32;
}

function widths(c: ModelConfig) {
  const d = c.hidden_size;
  const q = c.num_attention_heads * headDim(c);
  const kv = c.num_key_value_heads * headDim(c);
  return { d, q, kv, ffn: c.intermediate_size };
}

/**
 * One layer's activations per token without autograd (generation, scoring): its input and output,
 * the norm, projections with their rotary temporaries, and the MLP's gate, up and product.
 */
export function inferenceBytesPerToken(c: ModelConfig): number {
  const { d, q, kv, ffn } = widths(c);
  return (8 * d + 4 * (q + 2 * kv) + 5 * ffn) * F32;
}

/**
 * Training, per token: each layer's input (kept for its recomputation) and the gradient that
 * reaches it, plus one layer recomputed under autograd with its gradients (about 2.5× its forward
 * activations), plus LoRA's low-rank intermediates and, with LoRA dropout, the dropout masks and
 * dropped inputs of each adapted projection of that layer.
 */
export function trainingBytesPerToken(c: ModelConfig, lora: { r: number; dropout: number } | null): number {
  const { d, q, kv, ffn } = widths(c);
  const kept = c.num_hidden_layers * 2 * d * F32;
  const oneLayer = 2.5 * (14 * d + 5 * (q + 2 * kv) + 7 * ffn + 14 * (lora?.r ?? 0)) * F32;
  const dropout = lora && lora.dropout > 0 ? 5 * (5 * d + q + ffn) * F32 : 0;
  return kept + oneLayer + dropout;
}

export const DEFAULT_CHUNKS: ChunkSizes = {
  attentionElements: ATTENTION_ELEMENTS,
  logitElements: LOGIT_ELEMENTS,
  prefillTokens: PREFILL_TOKENS,
};

/**
 * Training without checkpoints, per token: every layer's activations kept for autograd, and
 * their gradients (what one recomputed layer holds, in each layer), with a quarter more as margin:
 * measured within 2% of the unmargined figure with LoRA dropout on small models, and this plan
 * decides whether a pass runs without the checkpoints' safety.
 */
export function plainTrainingBytesPerToken(c: ModelConfig, lora: { r: number; dropout: number } | null): number {
  const { d } = widths(c);
  const perLayer = trainingBytesPerToken({ ...c, num_hidden_layers: 1 }, lora) - 2 * d * F32;
  return 1.25 * (c.num_hidden_layers * perLayer + 2 * d * F32);
}

/**
 * Fixed working memory of a pass: copies of an attention chunk (the backward pass holds about
 * three at once; six leaves room) and of a logits chunk.
 */
export function chunkReserveBytes(chunks: ChunkSizes = DEFAULT_CHUNKS): number {
  return (6 * chunks.attentionElements + 8 * chunks.logitElements) * F32;
}

/** Bytes for a message: GiB, MiB or KiB, whichever reads best. */
export function formatBytes(bytes: number): string {
  if (bytes >= 2 ** 30) return `${(bytes / 2 ** 30).toFixed(2)} GiB`;
  if (bytes >= 2 ** 20) return `${(bytes / 2 ** 20).toFixed(0)} MiB`;
  return `${(bytes / 2 ** 10).toFixed(0)} KiB`;
}
