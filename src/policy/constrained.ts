/**
 * Decoding constrained to a list of allowed texts (the environment's valid actions): a prefix
 * trie over their token ids, each path ending in the end-of-turn token. At every step the sampler
 * may only pick a child of the current node, so the finished response is always one of the texts,
 * tokenised canonically.
 */
import type { GenerateOptions, TokenConstraint } from './types.ts';

export interface TrieNode {
  children: Map<number, TrieNode>;
}

export class TokenTrie implements TokenConstraint {
  readonly root: TrieNode = { children: new Map() };

  constructor(sequences: number[][] = []) {
    for (const seq of sequences) this.add(seq);
  }

  add(seq: readonly number[]): void {
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

/** How long tokenising allowed texts may hold the event loop before it lets other work run. */
const SLICE_MS = 10;

/**
 * One trie per row (null for a row without texts), tokenising a few milliseconds at a time so that
 * a long list (tens of thousands of valid actions) does not hold up the event loop: a server
 * goes on answering other requests meanwhile. Rows given the same list share one trie. Stops with
 * the signal's reason once it is aborted.
 */
export async function buildTries(
  lists: readonly (readonly string[] | null | undefined)[],
  encode: (text: string) => number[],
  endToken: number,
  signal?: AbortSignal,
): Promise<(TokenTrie | null)[]> {
  const built = new Map<readonly string[], TokenTrie>();
  let sliceStart = performance.now();
  const out: (TokenTrie | null)[] = [];
  for (const texts of lists) {
    if (!texts || texts.length === 0) {
      out.push(null);
      continue;
    }
    let trie = built.get(texts);
    if (!trie) {
      trie = new TokenTrie();
      for (const text of texts) {
        if (performance.now() - sliceStart > SLICE_MS) {
          await new Promise<void>((resolve) => setImmediate(resolve));
          signal?.throwIfAborted();
          sliceStart = performance.now();
        }
        trie.add([...encode(text), endToken]);
      }
      built.set(texts, trie);
    }
    out.push(trie);
  }
  return out;
}

/**
 * The per-row constraints of a generate call, checked: one entry per prompt, and no row with both
 * allowed texts and a constraint (which of the two would rule is not for the engine to guess).
 */
export function checkConstraints(
  opts: Pick<GenerateOptions, 'allowedTexts' | 'constraints'>,
  rows: number,
): (TokenConstraint | null)[] | null {
  const c = opts.constraints;
  if (!c) return null;
  if (c.length !== rows) throw new Error(`generate: constraints has ${c.length} entries for ${rows} prompts`);
  c.forEach((rule, i) => {
    if (rule === null || rule === undefined) return;
    if (typeof rule.allowedAfter !== 'function') throw new Error(`generate: constraints[${i}] has no allowedAfter method`);
    if (opts.allowedTexts?.[i]?.length)
      throw new Error(
        `generate: row ${i} has both allowedTexts and constraints[${i}]; give one (a constraint with finiteTexts() can stand for the texts)`,
      );
  });
  return c.map((rule) => rule ?? null);
}

/** A generate call's rows for an engine that constrains by texts or by a server-side grammar. */
export interface RowConstraints {
  /** Per row: the allowed texts (given, or a constraint's finiteTexts()), or null. */
  texts: (readonly string[] | null)[];
  /** Per row: the grammar of a constraint whose texts are not few (free strings, numbers), or null. */
  grammars: (string | null)[];
}

/**
 * For engines that cannot run a TokenConstraint token by token (the PyTorch worker, a remote server):
 * each row's allowed texts, a constraint with finiteTexts() standing for its texts, and the grammar of
 * a constraint that has none. A constraint with neither is refused, naming its row.
 */
export function rowConstraints(opts: Pick<GenerateOptions, 'allowedTexts' | 'constraints'>, rows: number): RowConstraints {
  const given = opts.allowedTexts;
  if (given && given.length !== rows) throw new Error(`generate: allowedTexts has ${given.length} entries for ${rows} prompts`);
  const constraints = checkConstraints(opts, rows);
  const texts: (readonly string[] | null)[] = [];
  const grammars: (string | null)[] = [];
  for (let i = 0; i < rows; i++) {
    const rule = constraints?.[i] ?? null;
    const listed = given?.[i];
    if (!rule) {
      texts.push(listed && listed.length > 0 ? listed : null);
      grammars.push(null);
      continue;
    }
    const finite = rule.finiteTexts?.() ?? null;
    if (finite && finite.length > 0) {
      texts.push(finite);
      grammars.push(null);
      continue;
    }
    const grammar = rule.grammar?.();
    if (!grammar)
      throw new Error(
        `generate: constraints[${i}] has neither finite texts nor a grammar; this engine cannot apply it token by token (the in-process TensorFlow.js engine can)`,
      );
    texts.push(null);
    grammars.push(grammar);
  }
  return { texts, grammars };
}
