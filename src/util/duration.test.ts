import { describe, expect, it } from 'vitest';
import { formatDuration } from './duration.ts';

describe('formatDuration', () => {
  it('rounds to whole seconds before splitting into minutes and hours', () => {
    expect(formatDuration(42.4)).toBe('42s');
    expect(formatDuration(59.6)).toBe('1m00s');
    expect(formatDuration(239.7)).toBe('4m00s');
    expect(formatDuration(65)).toBe('1m05s');
    expect(formatDuration(3599.6)).toBe('1h00m');
    expect(formatDuration(7380)).toBe('2h03m');
  });
  it('says ? when the time is unknown', () => {
    expect(formatDuration(Number.NaN)).toBe('?');
    expect(formatDuration(-1)).toBe('?');
    expect(formatDuration(Infinity)).toBe('?');
  });
});
