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
  'a', 'an', 'and', 'are', 'as', 'at', 'be', 'but', 'by', 'for', 'if', 'in', 'into', 'is', 'it', 'no',
  'not', 'of', 'on', 'or', 'such', 'that', 'the', 'their', 'then', 'there', 'these', 'they', 'this',
  'to', 'was', 'will', 'with',
]);

/**
 * Word tokens after Unicode word-break rules as Lucene's StandardTokenizer applies them: letters,
 * digits and "_" run together; "." "'" "’" ":" join letters to letters, "." "," ";" "'" "’" join
 * digits to digits ("3.5", "1,000", "o'clock"); every other character separates.
 */
const WORD = /[\p{L}\p{M}\p{N}_]+(?:(?:(?<=\p{L})[.'’:](?=\p{L})|(?<=\p{N})[.,;'’](?=\p{N}))[\p{L}\p{M}\p{N}_]+)*/gu;

export function analyze(text: string): string[] {
  const out: string[] = [];
  for (const match of text.matchAll(WORD)) {
    let token = match[0];
    // EnglishPossessiveFilter: drop a trailing 's
    if (/['’]s$/i.test(token)) token = token.slice(0, -2);
    token = token.toLowerCase();
    if (token === '' || STOP_WORDS.has(token)) continue;
    out.push(stemmer(token));
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
