import { describe, expect, it } from 'vitest';
import { AllEpisodesFailedError, FailureStreak, MAX_FAILED_ITERATIONS_IN_A_ROW } from './failure-streak.ts';
import type { Episode } from './records.ts';

const episode = (failure: string | null): Episode => ({
  task: 't',
  variation: 0,
  group: 0,
  description: 't',
  steps: [],
  finalObservation: '',
  score: 0,
  success: false,
  ...(failure === null ? { outcome: 'ended' as const } : { outcome: 'failed' as const, failure }),
});

describe('FailureStreak', () => {
  it('stops at the third iteration in a row in which every episode failed, naming them and the last reason', () => {
    expect(MAX_FAILED_ITERATIONS_IN_A_ROW).toBe(3);
    const streak = new FailureStreak();
    streak.count(4, [episode('a'), episode('b')]);
    streak.count(5, [episode('a'), episode('b')]);
    let thrown: unknown;
    try {
      streak.count(6, [episode('a'), episode('exit 127')]);
    } catch (e) {
      thrown = e;
    }
    expect(thrown).toBeInstanceOf(AllEpisodesFailedError);
    const e = thrown as AllEpisodesFailedError;
    expect(e.iterations).toEqual([4, 5, 6]);
    expect(e.lastFailure).toBe('exit 127');
    expect(e.message).toMatch(
      /^every episode failed in iterations 4, 5 and 6 in a row, so the run stopped: .* The last failure: exit 127\./,
    );
  });

  it('starts again after an iteration with an episode that did not fail', () => {
    const streak = new FailureStreak();
    for (const it of [1, 2]) streak.count(it, [episode('x')]);
    streak.count(3, [episode('x'), episode(null)]);
    for (const it of [4, 5]) streak.count(it, [episode('x')]);
    expect(() => streak.count(6, [episode('x')])).toThrow(/iterations 4, 5 and 6 in a row/);
  });
});
