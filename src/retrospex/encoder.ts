/**
 * The critic's frozen text encoders: the sentence embedders the tip memory uses (src/memory/),
 * shared by the task, observation and action fields. The authors train their own encoders (a
 * SentencePiece vocabulary of 8k, 64-wide embeddings and one GRU of 128 per field) with the critic;
 * here a frozen embedder is computed once per distinct text and only the layers above it are trained,
 * so a critic trains on this CPU in minutes, and its state vectors are the memory's.
 */
import { HashedNgramEmbedder } from '../memory/hashed.ts';
import type { Embedder } from '../memory/types.ts';

export type EncoderKind = 'minilm' | 'hashed';
export const ENCODER_KINDS: readonly EncoderKind[] = ['minilm', 'hashed'];

/** What a critic file records of its encoder, so that it is only ever used with the same vectors. */
export interface EncoderIdentity {
  kind: EncoderKind;
  /** The embedder's own name (e.g. "minilm-6L-384d", "hashed-ngram-1024"). */
  name: string;
  dim: number;
}

/** all-MiniLM-L6-v2 (from `path`, else the one `npm run setup:test` installs), or hashed n-grams of `dim` buckets. */
export async function createEncoder(kind: EncoderKind, o: { dim?: number; path?: string } = {}): Promise<Embedder> {
  if (kind === 'hashed') return new HashedNgramEmbedder({ dim: o.dim ?? 1024 });
  if (kind !== 'minilm') throw new Error(`unknown encoder "${String(kind)}" (known: ${ENCODER_KINDS.join(', ')})`);
  const { MiniLmEmbedder, findMiniLmDir } = await import('../memory/minilm.ts');
  return MiniLmEmbedder.load(o.path ?? findMiniLmDir());
}

export function identityOf(kind: EncoderKind, embedder: Embedder): EncoderIdentity {
  return { kind, name: embedder.name, dim: embedder.dim };
}

/** Vectors of texts, each embedded once: tasks and actions recur at every step, observations often. */
export class TextVectors {
  private readonly cache = new Map<string, Float32Array>();

  constructor(
    readonly embedder: Embedder,
    /** Most texts kept; beyond it the cache starts again (an evaluation sees a few thousand). */
    private readonly capacity = 100_000,
  ) {}

  get dim(): number {
    return this.embedder.dim;
  }

  /** One vector per text, in order. */
  async of(texts: readonly string[]): Promise<Float32Array[]> {
    const missing = [...new Set(texts.filter((t) => !this.cache.has(t)))];
    if (missing.length > 0) {
      if (this.cache.size + missing.length > this.capacity) this.cache.clear();
      const vectors = await this.embedder.embed(missing);
      missing.forEach((t, i) => this.cache.set(t, vectors[i]));
    }
    return texts.map((t) => this.cache.get(t)!);
  }

  /**
   * The vectors computed so far, exactly (base64 of their float32 bytes), in the order computed. An
   * embedder's vector of a text varies in its last bits with the batch it was computed in (MiniLM pads
   * each batch to its longest text), so a resumed evaluation takes these rather than computing them again.
   */
  snapshot(): [string, string][] {
    return [...this.cache].map(([t, v]) => [t, Buffer.from(v.buffer, v.byteOffset, v.byteLength).toString('base64')]);
  }

  /** Starts from the vectors of a snapshot (of an embedder of the same width). */
  restore(entries: readonly [string, string][]): void {
    this.cache.clear();
    for (const [t, b64] of entries) {
      const bytes = Buffer.from(b64, 'base64');
      if (bytes.length !== this.dim * 4)
        throw new Error(`a saved text vector has ${bytes.length / 4} dimensions, but the embedder gives ${this.dim}`);
      this.cache.set(t, new Float32Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.length)));
    }
  }
}
