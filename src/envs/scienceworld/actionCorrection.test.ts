import { describe, expect, it } from 'vitest';
import { correctAction, jaccardSimilarity, normalizeAction } from './actionCorrection.ts';

// A slice of a real valid-action list (boil, variation 0, hallway, "easy" preset).
const VALID = [
  'close art studio door',
  'close door to kitchen',
  'focus on agent',
  'focus on air',
  'go to art studio',
  'go to kitchen',
  'look around',
  'look at picture',
  'open door to kitchen',
  'pick up thermometer',
  'teleport to kitchen',
  'wait',
  'wait1',
];

describe('correctAction', () => {
  it('keeps an action that is already valid', () => {
    expect(correctAction('go to kitchen', VALID)).toEqual({ action: 'go to kitchen', corrected: false, similarity: 1 });
  });

  it('fixes case, punctuation and spacing without guessing', () => {
    expect(correctAction('  Go to the kitchen. ', VALID).action).toBe('go to kitchen');
    expect(correctAction('LOOK AROUND!', VALID)).toEqual({ action: 'look around', corrected: true, similarity: 1 });
  });

  it('picks the valid action sharing the most words (Jaccard, as the reference does)', () => {
    const result = correctAction('walk to kitchen', VALID);
    // {to, kitchen} shared: "go to kitchen" and "teleport to kitchen" score 2/4; edit distance prefers "go to kitchen".
    expect(result.action).toBe('go to kitchen');
    expect(result.corrected).toBe(true);
    expect(result.similarity).toBeCloseTo(0.5);
  });

  it('breaks Jaccard ties by character edit distance', () => {
    // "focus on the air" shares {focus, on, air} with "focus on air" only.
    expect(correctAction('focus on the air', VALID).action).toBe('focus on air');
    // "wait 1" normalises to words {wait, 1}: "wait" wins on Jaccard (1/2) over "wait1" (0).
    expect(correctAction('wait 1', VALID).action).toBe('wait');
    expect(correctAction('wiat1', VALID).action).toBe('wait1');
  });

  it('is deterministic on full ties: the first valid action in list order wins', () => {
    expect(correctAction('xyzzy', ['bb', 'aa']).action).toBe('bb');
    expect(correctAction('', VALID).action).toBe(correctAction('', VALID).action);
  });

  it('passes text through when there is nothing to choose from', () => {
    expect(correctAction('dance', [])).toEqual({ action: 'dance', corrected: false, similarity: 0 });
  });

  it('rejects non-string input with a clear message', () => {
    expect(() => correctAction(42 as unknown as string, VALID)).toThrow(/must be a string/);
  });
});

describe('helpers', () => {
  it('normalizeAction lowercases and strips punctuation', () => {
    expect(normalizeAction("Pick up the 'red' box, please.")).toBe('pick up the red box please');
  });

  it('jaccardSimilarity of word sets', () => {
    expect(jaccardSimilarity(new Set(['a', 'b']), new Set(['b', 'c']))).toBeCloseTo(1 / 3);
    expect(jaccardSimilarity(new Set(), new Set())).toBe(0);
  });
});
