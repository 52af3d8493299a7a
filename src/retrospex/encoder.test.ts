/**
 * The critic's text vectors across a resumed evaluation. An embedder's vector of a text can vary in its
 * last bits with the batch it is computed in (MiniLM pads each batch to its longest text: 7.8e-8 measured
 * on all-MiniLM-L6-v2), so a resumed evaluation must take the vectors its stopped run computed rather than
 * compute them again in another batch: a snapshot restores them bit for bit, without the embedder.
 */
import { describe, expect, it } from 'vitest';
import type { Embedder } from '../memory/types.ts';
import { TextVectors } from './encoder.ts';

/** An embedder whose vectors, like MiniLM's, depend a little on the rest of the batch; it counts the texts it embeds. */
class BatchDependent implements Embedder {
  readonly name = 'batch-dependent';
  readonly dim = 3;
  embedded = 0;

  async embed(texts: readonly string[]): Promise<Float32Array[]> {
    this.embedded += texts.length;
    const longest = Math.max(...texts.map((t) => t.length));
    return texts.map((t) => Float32Array.of(t.length / 100, 1 / 3 + longest * 1e-7, t.charCodeAt(0) / 1000));
  }
}

describe('TextVectors snapshot', () => {
  it('restores the vectors computed so far bit for bit, where computing them again in another batch would not', async () => {
    const embedder = new BatchDependent();
    const vectors = new TextVectors(embedder);
    const [go] = await vectors.of(['go north', 'you are in a very long corridor with doors on both sides']);
    const snapshot = JSON.parse(JSON.stringify(vectors.snapshot()));

    const again = await new TextVectors(new BatchDependent()).of(['go north']);
    expect(again[0]).not.toEqual(go);

    const restoredEmbedder = new BatchDependent();
    const restored = new TextVectors(restoredEmbedder);
    restored.restore(snapshot);
    const [back] = await restored.of(['go north']);
    expect(restoredEmbedder.embedded).toBe(0);
    expect(Array.from(back)).toEqual(Array.from(go));
    expect(restored.snapshot()).toEqual(snapshot);
  });

  it('refuses vectors of another width, naming both', () => {
    const wide = new TextVectors({ name: 'wide', dim: 4, embed: async () => [] });
    const saved: [string, string][] = [['x', Buffer.from(Float32Array.of(1, 2, 3).buffer).toString('base64')]];
    expect(() => wide.restore(saved)).toThrow('a saved text vector has 3 dimensions, but the embedder gives 4');
  });
});
