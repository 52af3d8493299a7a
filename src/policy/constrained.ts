/**
 * Decoding constrained to a list of allowed texts (the environment's valid actions): a prefix
 * trie over their token ids, each path ending in the end-of-turn token. At every step the sampler
 * may only pick a child of the current node, so the finished response is always one of the texts,
 * tokenised canonically.
 */
export interface TrieNode {
  children: Map<number, TrieNode>;
}

export class TokenTrie {
  readonly root: TrieNode = { children: new Map() };

  constructor(sequences: number[][]) {
    for (const seq of sequences) {
      let node = this.root;
      for (const id of seq) {
        let next = node.children.get(id);
        if (!next) {
          next = { children: new Map() };
          node.children.set(id, next);
        }
        node = next;
      }
    }
  }

  static fromTexts(texts: readonly string[], encode: (text: string) => number[], endToken: number): TokenTrie {
    return new TokenTrie(texts.map((t) => [...encode(t), endToken]));
  }

  /** Token ids allowed after the given prefix; empty when the prefix left the trie or ended. */
  allowedAfter(prefix: readonly number[]): number[] {
    let node: TrieNode | undefined = this.root;
    for (const id of prefix) {
      node = node.children.get(id);
      if (!node) return [];
    }
    return [...node.children.keys()];
  }
}
