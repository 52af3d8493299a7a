import { describe, expect, it } from 'vitest';
import type { TrainSequence } from '../policy/types.ts';
import { packEpisodeSteps } from './packing.ts';

const step = (prompt: number[], response: number[], a = 1): TrainSequence => ({
  prompt,
  response,
  advantages: response.map(() => a),
  oldLogprobs: response.map((_, i) => -0.1 * (i + 1)),
  mask: response.map(() => 1),
  lowProbMask: false,
});

describe('packing an episode into one training sequence', () => {
  it("joins steps whose prompt extends the previous prompt + response; the context is not the policy's", () => {
    const s1 = step([1, 2, 3], [10, 11]);
    const s2 = step([1, 2, 3, 10, 11, 4, 5], [12]);
    const s3 = step([1, 2, 3, 10, 11, 4, 5, 12, 6], [13, 14]);
    const [packed, ...rest] = packEpisodeSteps([s1, s2, s3]);
    expect(rest).toEqual([]);
    expect(packed.prompt).toEqual([1, 2, 3]);
    expect(packed.response).toEqual([10, 11, 4, 5, 12, 6, 13, 14]);
    expect(packed.policyTokens).toEqual([1, 1, 0, 0, 1, 0, 1, 1]);
    expect(packed.advantages).toEqual([1, 1, 1, 1, 1]);
    expect(packed.oldLogprobs).toEqual([...s1.oldLogprobs, ...s2.oldLogprobs, ...s3.oldLogprobs]);
    expect(packed.mask).toEqual([1, 1, 1, 1, 1]);
    // The inputs are not changed.
    expect(s1.response).toEqual([10, 11]);
  });

  it('starts a new sequence where a prompt does not extend (tips, a window), and leaves lone steps unpacked', () => {
    const s1 = step([1, 2], [10]);
    const s2 = step([1, 2, 10, 3], [11]);
    const s3 = step([9, 2, 10, 3, 11, 4], [12]); // the front changed
    const s4 = step([9, 2, 10, 3, 11, 4, 12, 5], [13]);
    const out = packEpisodeSteps([s1, s2, s3, s4]);
    expect(out.map((s) => s.prompt)).toEqual([
      [1, 2],
      [9, 2, 10, 3, 11, 4],
    ]);
    expect(out.map((s) => s.policyTokens)).toEqual([
      [1, 0, 1],
      [1, 0, 1],
    ]);
    const lone = packEpisodeSteps([s1, s3]);
    expect(lone).toEqual([s1, s3]);
    expect('policyTokens' in lone[0]).toBe(false);
  });

  it('never joins steps with different low-probability masking', () => {
    const s1 = step([1], [10]);
    const s2 = { ...step([1, 10, 2], [11]), lowProbMask: true };
    expect(packEpisodeSteps([s1, s2])).toHaveLength(2);
  });
});
