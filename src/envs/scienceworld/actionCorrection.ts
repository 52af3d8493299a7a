/**
 * Action correction: map free text written by an LLM onto the closest action the simulator
 * accepts right now (the reference's `use_action_correction`).
 *
 * Similarity, in order:
 *   1. an exact match after normalisation (case, punctuation, spacing) is taken as is;
 *   2. otherwise the highest Jaccard similarity between word sets, which is what the
 *      reference uses: it ignores word order and rewards naming the right objects;
 *   3. ties on Jaccard (common: "open door" matches every door equally) are broken by the
 *      smallest character edit distance, so near-spellings win;
 *   4. remaining ties keep the simulator's order of valid actions (sorted alphabetically),
 *      which makes the choice deterministic.
 */
import { distance } from 'fastest-levenshtein';

export type HistoryText = 'original' | 'corrected';

export interface ActionCorrectionOptions {
  /** Map free text onto a valid action before it reaches the simulator. */
  enabled: boolean;
  /** Which text the trainer should keep in the episode history (info.historyAction). */
  history: HistoryText;
}

/**
 * The reference leaves correction off, and when on, corrects inside the env's step() while its
 * agent loop records the text the model wrote: so 'original' is the reference's history.
 */
export const DEFAULT_ACTION_CORRECTION: ActionCorrectionOptions = Object.freeze({ enabled: false, history: 'original' });

export interface Correction {
  /** The text to send to the simulator. */
  action: string;
  /** True when `action` differs from the input text. */
  corrected: boolean;
  /** Jaccard similarity of the chosen action's words with the input's (1 for exact matches). */
  similarity: number;
}

/** Lower case, punctuation to spaces, single spaces; the form both sides are compared in. */
export function normalizeAction(text: string): string {
  return text
    .toLowerCase()
    .replace(/[^\p{L}\p{N}]+/gu, ' ')
    .trim();
}

function wordSet(normalized: string): Set<string> {
  return new Set(normalized === '' ? [] : normalized.split(' '));
}

export function jaccardSimilarity(a: Set<string>, b: Set<string>): number {
  if (a.size === 0 && b.size === 0) return 0;
  let shared = 0;
  for (const word of a) if (b.has(word)) shared++;
  return shared / (a.size + b.size - shared);
}

/**
 * The valid action closest to `text`. With no valid actions to choose from, the text is
 * passed through unchanged (the simulator then explains why it cannot act on it).
 */
export function correctAction(text: string, validActions: readonly string[]): Correction {
  if (typeof text !== 'string') {
    throw new Error(`correctAction: the action must be a string, got ${typeof text}`);
  }
  if (validActions.length === 0) return { action: text, corrected: false, similarity: 0 };
  if (validActions.includes(text)) return { action: text, corrected: false, similarity: 1 };

  const wanted = normalizeAction(text);
  const wantedWords = wordSet(wanted);
  let best = -1;
  let bestJaccard = -1;
  let bestDistance = Infinity;
  for (let index = 0; index < validActions.length; index++) {
    const candidate = normalizeAction(validActions[index]);
    if (candidate === wanted) {
      return { action: validActions[index], corrected: validActions[index] !== text, similarity: 1 };
    }
    const jaccard = jaccardSimilarity(wantedWords, wordSet(candidate));
    if (jaccard < bestJaccard) continue;
    const edits = distance(wanted, candidate);
    if (jaccard > bestJaccard || edits < bestDistance) {
      best = index;
      bestJaccard = jaccard;
      bestDistance = edits;
    }
  }
  const action = validActions[best];
  return { action, corrected: action !== text, similarity: bestJaccard };
}
