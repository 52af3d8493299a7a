/**
 * The part-of-speech step of WebShop's type reward: the lower-cased words of a product name that
 * spaCy tags NOUN or PROPN (duplicates kept: the original divides by the list's length). Here
 * wink-nlp with its English lite model tags them. Tokenisation and tags can differ from spaCy's
 * en_core_web_lg (see README.md in this folder for how often, measured on the real catalogue).
 */
import { createRequire } from 'node:module';
import type winkNLP from 'wink-nlp';

type Nlp = ReturnType<typeof winkNLP>;
// Loaded on first use: the language model takes ~100 ms to load and is only needed at purchase time.
const requireLazily = createRequire(import.meta.url);
let nlp: Nlp | undefined;
const cache = new Map<string, string[]>();
const NOUN_TAGS = new Set(['NOUN', 'PROPN']);

function tagger(): Nlp {
  if (!nlp) {
    const load = requireLazily('wink-nlp') as typeof winkNLP;
    nlp = load(requireLazily('wink-eng-lite-web-model'), ['pos']);
  }
  return nlp;
}

export function nounWords(text: string): string[] {
  const hit = cache.get(text);
  if (hit) return hit;
  const n = tagger();
  const tokens = n.readDoc(text).tokens();
  const values = tokens.out(n.its.value) as string[];
  const tags = tokens.out(n.its.pos) as string[];
  const nouns = values.filter((_, i) => NOUN_TAGS.has(tags[i])).map((w) => w.toLowerCase());
  cache.set(text, nouns);
  return nouns;
}
