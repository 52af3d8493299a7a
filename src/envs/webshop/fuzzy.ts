/**
 * thefuzz's `fuzz.token_set_ratio` as WebShop ran it (thefuzz 0.19.0 without python-Levenshtein,
 * i.e. difflib.SequenceMatcher ratios, rounded to an integer). fuzzball does the token-set
 * comparison with its difflib port; the string clean-up is done here because fuzzball's
 * differs from thefuzz's: thefuzz (force_ascii) drops only code points 128-255, turns every
 * other non-word character (anything but letters, digits and "_") into a space, lower-cases
 * and strips, while fuzzball drops all non-ASCII and turns "_" into a space.
 */
import { token_set_ratio, type FuzzballTokenSetOptions } from 'fuzzball';

// fuzzball's token_set_ratio hands its options to the ratio it uses, which honours ratio_alg;
// the published typings just do not list that option for token_set_ratio.
const DIFFLIB_OPTIONS = { full_process: false, ratio_alg: 'difflib' } as FuzzballTokenSetOptions;

export function thefuzzFullProcess(s: string): string {
  return s
    .replace(/[\u0080-\u00ff]/g, '')
    .replace(/[^\p{L}\p{N}_]/gu, ' ')
    .toLowerCase()
    .trim();
}

/** Integer 0..100, equal to thefuzz 0.19.0's fuzz.token_set_ratio(a, b). */
export function tokenSetRatio(a: string, b: string): number {
  const p1 = thefuzzFullProcess(a);
  const p2 = thefuzzFullProcess(b);
  if (p1.length === 0 || p2.length === 0) return 0;
  return token_set_ratio(p1, p2, DIFFLIB_OPTIONS);
}
