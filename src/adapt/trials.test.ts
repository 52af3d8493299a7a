/** A trial's scores: episodes an environment or engine failure ended are counted apart, not scored as 0. */
import { describe, expect, it } from 'vitest';
import { scoreCells, trialScores } from './trials.ts';

describe('trialScores', () => {
  it('leaves failed episodes out of the mean score and success rate, counts them, and shows the count', () => {
    const r = trialScores(2, [
      { score: 100, success: true, outcome: 'success' },
      { score: 40, success: false, outcome: 'step_limit' },
      { score: 0, success: false, outcome: 'failed' },
    ]);
    expect(r).toEqual({ trial: 2, mean_score: 70, success_rate: 0.5, scores: [100, 40, 0], failed: 1 });
    expect(scoreCells(r)).toEqual(['2', '70.0 (1 failed)', '50%']);
    expect(scoreCells(trialScores(1, [{ score: 30, success: false, outcome: 'ended' }]))).toEqual(['1', '30.0', '0%']);
  });
});
