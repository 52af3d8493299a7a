/**
 * Sentence embedders turn state text into unit-length vectors, so that cosine similarity is a dot
 * product. The tip memory keys its entries with them and the novelty reward compares states with
 * them; anything that maps text to a fixed-size vector can serve.
 */
export interface Embedder {
  /** Short name for logs and checkpoints, e.g. "hashed-tfidf-1024" or "minilm". */
  readonly name: string;
  /** Length of every vector `embed` returns. */
  readonly dim: number;
  /** One L2-normalised vector per text (a text with no features gives the zero vector). */
  embed(texts: readonly string[]): Promise<Float32Array[]>;
  dispose?(): void;
}
