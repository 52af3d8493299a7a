/**
 * Product search: BM25 over each product's search text, ranked as WebShop's Pyserini/Lucene index
 * ranks it, as far as wink-bm25-text-search allows. Lucene settings reproduced: k1 = 0.9, b = 0.4
 * (Pyserini's defaults), idf = ln(1 + (N - n + 0.5) / (n + 0.5)), a repeated query word counts
 * again, ties go to the smaller document id; the analyser mimics Lucene's English analyser
 * (standard tokeniser, possessive "'s" removal, lower-casing, Lucene's 33 English stop words,
 * Porter stemmer). Known differences, measured in README.md: the tokeniser is a regular-expression
 * approximation of Unicode word breaking, and Lucene stores document lengths lossily in one byte.
 */
import bm25 from 'wink-bm25-text-search';
import { stemmer } from 'stemmer';
import type { Catalogue, Product } from './data.ts';

/** WebShop asks the engine for 50 products per search (SEARCH_RETURN_N). */
export const SEARCH_RETURN_N = 50;

/** Lucene's EnglishAnalyzer.ENGLISH_STOP_WORDS_SET. */
const STOP_WORDS = new Set([
  'a',
  'an',
  'and',
  'are',
  'as',
  'at',
  'be',
  'but',
  'by',
  'for',
  'if',
  'in',
  'into',
  'is',
  'it',
  'no',
  'not',
  'of',
  'on',
  'or',
  'such',
  'that',
  'the',
  'their',
  'then',
  'there',
  'these',
  'they',
  'this',
  'to',
  'was',
  'will',
  'with',
]);

/**
 * Tokens after Unicode word-break rules (UAX #29) as Lucene's StandardTokenizer applies them:
 * letters, decimal digits and connectors ("_") run together; MidLetter / MidNumLet characters
 * (":" "." "’" "'" ...) join a letter to a letter, MidNum / MidNumLet characters ("," ";" "." "⁄"
 * ...) join a digit to a digit ("3.5", "1,000", "o'clock"); each emoji or pictographic symbol
 * (★, ✔, ™; ZWJ sequences kept whole) and each Han or Hiragana character is a token of its own;
 * everything else separates.
 */
const LETTER = String.raw`[\p{L}\p{Nl}]`;
const IDEOGRAPH = String.raw`[\p{sc=Han}\p{sc=Hiragana}]`;
const WORD_CHAR = String.raw`(?:(?!${IDEOGRAPH})[\p{L}\p{Nl}\p{Nd}\p{Pc}])`;
const WORD_PART = String.raw`${WORD_CHAR}(?:${WORD_CHAR}|\p{M})*`;
const MID_LETTER = String.raw`:\u00B7\u0387\u055F\u05F4\u2027\uFE13\uFE55\uFF1A`;
const MID_NUM = String.raw`,;\u037E\u0589\u060C\u060D\u066C\u07F8\u2044\uFE10\uFE14\uFE50\uFE54\uFF0C\uFF1B`;
const MID_NUM_LET = String.raw`.'\u2018\u2019\u2024\uFE52\uFF07\uFF0E`;
const JOINER = String.raw`(?:(?<=${LETTER}\p{M}*)[${MID_LETTER}${MID_NUM_LET}](?=${LETTER})|(?<=\p{Nd}\p{M}*)[${MID_NUM}${MID_NUM_LET}](?=\p{Nd}))`;
// Lucene 8's emoji data also counts these Miscellaneous Symbols and Dingbats (★, ☞, ♡) as pictographs.
const OLD_PICTOGRAPHS = String.raw`\u2600-\u2605\u2607-\u2612\u2614-\u2685\u2690-\u2705\u2708-\u2712\u2714\u2716\u271D\u2721\u2728\u2733\u2734\u2744\u2747\u274C\u274E\u2753-\u2755\u2757\u2763-\u2767\u2795-\u2797\u27A1\u27B0\u27BF`;
const PICTO = String.raw`(?:\p{Extended_Pictographic}|\p{Regional_Indicator}|[${OLD_PICTOGRAPHS}])[\uFE0F\u{1F3FB}-\u{1F3FF}]*`;
const EMOJI = String.raw`${PICTO}(?:\u200D${PICTO})*`;
const TOKEN = new RegExp(`${EMOJI}|${IDEOGRAPH}|${WORD_PART}(?:${JOINER}${WORD_PART})*`, 'gu');
const HAS_ALNUM = /[\p{L}\p{Nl}\p{Nd}]/u; // ideographs are letters too
const IS_EMOJI = new RegExp(`^${EMOJI}$`, 'u');

/** Stems by word: the catalogue repeats a small vocabulary, and stemming dominates indexing time. */
const stems = new Map<string, string>();

export function analyze(text: string): string[] {
  const out: string[] = [];
  for (const match of text.matchAll(TOKEN)) {
    let token = match[0];
    if (!HAS_ALNUM.test(token) && !IS_EMOJI.test(token)) continue;
    // EnglishPossessiveFilter: drop a trailing 's
    if (/['’]s$/i.test(token)) token = token.slice(0, -2);
    token = token.toLowerCase();
    if (token === '' || STOP_WORDS.has(token)) continue;
    let stem = stems.get(token);
    if (stem === undefined) {
      stem = stemmer(token);
      stems.set(token, stem);
    }
    out.push(stem);
  }
  return out;
}

export interface SearchHit {
  asin: string;
  score: number;
}

export class ProductSearch {
  private readonly engine = bm25();

  constructor(private readonly catalogue: Catalogue) {
    this.engine.defineConfig({ fldWeights: { contents: 1 }, bm25Params: { k1: 0.9, b: 0.4, k: 1 } });
    this.engine.definePrepTasks([analyze]);
    for (const p of catalogue.products) this.engine.addDoc({ contents: catalogue.searchText.get(p.asin) ?? '' }, p.asin);
    this.engine.consolidate(9);
  }

  /** Top `limit` hits, best first; equal scores in ASIN order, as Anserini breaks ties by doc id. */
  search(query: string, limit = SEARCH_RETURN_N): SearchHit[] {
    const hits = this.engine.search(query, this.catalogue.products.length);
    return hits
      .map(([asin, score]) => ({ asin, score }))
      .sort((a, b) => b.score - a.score || (a.asin < b.asin ? -1 : a.asin > b.asin ? 1 : 0))
      .slice(0, limit);
  }

  products(query: string, limit = SEARCH_RETURN_N): Product[] {
    return this.search(query, limit).map((h) => this.catalogue.byAsin.get(h.asin)!);
  }
}
