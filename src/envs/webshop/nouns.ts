/**
 * The part-of-speech step of WebShop's type reward: the lower-cased words of a product name that
 * spaCy tags NOUN or PROPN (duplicates kept: the original divides by the list's length). Here
 * wink-nlp with its English lite model tags them. Tokenisation and tags can differ from spaCy's
 * en_core_web_lg (see README.md in this folder for how often, measured on the real catalogue).
 *
 * A wink-nlp instance adds every new word it reads to its lexicon, and a word in the lexicon is
 * tokenised differently from then on (once "Skechers Women's, Relaxed Fit" has been read,
 * "Women's" is no longer split into "Women" + "'s"), so one shared instance would make a reward
 * depend on what the process had scored before. Each text is therefore read by its own instance,
 * built on a copy of the model whose lexicon is the model's own.
 */
import { createRequire } from 'node:module';
import type winkNLP from 'wink-nlp';
import type { Model } from 'wink-nlp';

type Nlp = ReturnType<typeof winkNLP>;
// Loaded on first use: the language model takes ~300 ms to load and is only needed at purchase time.
const requireLazily = createRequire(import.meta.url);
const cache = new Map<string, string[]>();
const NOUN_TAGS = new Set(['NOUN', 'PROPN']);

interface CoreFeature {
  hash?: Record<string, number>;
  list?: unknown[];
  index?: number;
}
interface CoreModel {
  features: Record<string, CoreFeature>;
}

let load: typeof winkNLP | undefined;
let freshModel: Model | undefined;

/**
 * The model with a `core` that hands each instance a copy of one pristine core model: the
 * feature tables an instance writes to (hash, list, next index) are its own, the hashes chained
 * to the pristine ones so a copy costs microseconds instead of re-reading the model (~300 ms).
 */
function modelWithPristineLexicon(): Model {
  const base = requireLazily('wink-eng-lite-web-model') as Model & { core: () => CoreModel; metaCER: () => unknown };
  const pristine = base.core();
  // The package's metaCER loader JSON-encodes its module-level result again on every call, so the
  // string doubles in size per instance; every instance shares the first call's result instead.
  const metaCER = base.metaCER();
  const core = (): CoreModel => {
    const features: Record<string, CoreFeature> = {};
    for (const [name, f] of Object.entries(pristine.features)) {
      features[name] = {
        ...f,
        ...(f.hash ? { hash: Object.create(f.hash) as Record<string, number> } : {}),
        ...(Array.isArray(f.list) ? { list: f.list.slice() } : {}),
      };
    }
    return { ...pristine, features };
  };
  return Object.assign(Object.create(null) as object, base, { core, metaCER: () => metaCER }) as unknown as Model;
}

function freshTagger(): Nlp {
  if (!load) {
    load = requireLazily('wink-nlp') as typeof winkNLP;
    freshModel = modelWithPristineLexicon();
  }
  return load(freshModel!, ['pos']);
}

export function nounWords(text: string): string[] {
  const hit = cache.get(text);
  if (hit) return hit;
  const n = freshTagger();
  const tokens = n.readDoc(text).tokens();
  const values = tokens.out(n.its.value) as string[];
  const tags = tokens.out(n.its.pos) as string[];
  const nouns = values.filter((_, i) => NOUN_TAGS.has(tags[i])).map((w) => w.toLowerCase());
  cache.set(text, nouns);
  return nouns;
}
