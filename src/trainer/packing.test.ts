import { describe, expect, it } from 'vitest';
import type { TrainSequence } from '../policy/types.ts';
import { packEpisodeBranches, packEpisodeChains, packEpisodeSteps, sequenceTokens } from './packing.ts';
import { removeTips } from './prompt.ts';

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

  it('keeps an unscored step in its chain as context, and says which steps each sequence holds', () => {
    const s1 = step([1, 2], [10], 1);
    const s2 = step([1, 2, 10, 3], [11, 12], 2);
    const s3 = step([1, 2, 10, 3, 11, 12, 4], [13], 3);
    const s4 = step([9], [14], 4); // starts a new chain
    const { sequences, members } = packEpisodeChains([s1, s2, s3, s4], (t) => t !== 1);
    expect(members).toEqual([[0, 1, 2], [3]]);
    expect(sequences[0].response).toEqual([10, 3, 11, 12, 4, 13]);
    expect(sequences[0].policyTokens).toEqual([1, 0, 0, 0, 0, 1]);
    expect(sequences[0].advantages).toEqual([1, 3]);
    expect(sequences[0].oldLogprobs).toEqual([...s1.oldLogprobs, ...s3.oldLogprobs]);
    expect(sequences[1]).toEqual(s4);
    // A lone unscored step keeps its policyTokens (all 0): it is nobody's scored sequence.
    expect(packEpisodeChains([s2], () => false).sequences[0]).toMatchObject({ policyTokens: [0, 0], advantages: [] });
  });
});

describe('an on-policy episode with tips as trunk plus branches', () => {
  // A step's prompt: the tip-free history, then its tips (100 + …) in the user turn, then the turn end (7, 8).
  const make = (head: number[], tips: number[], response: number[], a: number) => {
    const span: [number, number] | null = tips.length ? [head.length, head.length + tips.length] : null;
    const s = step([...head, ...tips, 7, 8], response, a);
    s.refLogprobs = response.map((_, i) => -1 - a - i);
    return { s, span };
  };

  it('packs the tip-free steps into a trunk and gives each tipped step a branch over the trunk before its tips', () => {
    // Step 1 tips [100, 101]; step 2 no tips (nothing retrieved); step 3 tips [102].
    const e1 = make([1, 2], [100, 101], [10, 11], 1);
    const e2 = make([1, 2, 7, 8, 10, 11, 3], [], [12], 2);
    const e3 = make([1, 2, 7, 8, 10, 11, 3, 7, 8, 12, 4], [102], [13, 14], 3);
    // Today's tip-free trunk: the prompts without tips extend each other.
    expect(removeTips(e2.s.prompt, e2.span)).toEqual([...removeTips(e1.s.prompt, e1.span), 10, 11, 3, 7, 8]);
    const out = packEpisodeBranches([e1.s, e2.s, e3.s], [e1.span, e2.span, e3.span]);
    expect(out).toHaveLength(1);
    const [t] = out;
    expect(t.prompt).toEqual([1, 2, 7, 8]);
    expect(t.response).toEqual([10, 11, 3, 7, 8, 12, 4, 7, 8, 13, 14]);
    // Only the untipped step 2 is scored in the trunk; the tipped steps' responses are context there.
    expect(t.policyTokens).toEqual([0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0]);
    expect(t.branches).toEqual([
      { prefix: 2, ids: [100, 101, 7, 8, 10, 11], policyTokens: [0, 0, 0, 0, 1, 1] },
      { prefix: 11, ids: [102, 7, 8, 13, 14], policyTokens: [0, 0, 0, 1, 1] },
    ]);
    // Each branch is exactly its step: the trunk's first `prefix` tokens + the branch's ids = prompt + response.
    const trunk = [...t.prompt, ...t.response];
    for (const [b, e] of [
      [t.branches![0], e1],
      [t.branches![1], e3],
    ] as const)
      expect([...trunk.slice(0, b.prefix), ...b.ids]).toEqual([...e.s.prompt, ...e.s.response]);
    // Per-token arrays: the trunk's scored tokens, then branch by branch.
    expect(t.advantages).toEqual([2, 1, 1, 3, 3]);
    expect(t.oldLogprobs).toEqual([...e2.s.oldLogprobs, ...e1.s.oldLogprobs, ...e3.s.oldLogprobs]);
    expect(t.refLogprobs).toEqual([...e2.s.refLogprobs!, ...e1.s.refLogprobs!, ...e3.s.refLogprobs!]);
    expect(t.mask).toHaveLength(5);
    expect(sequenceTokens(t)).toBe(4 + 11 + 6 + 5);
    // The inputs are not changed.
    expect(e1.s.response).toEqual([10, 11]);
  });

  it('a step that does not extend the trunk starts a new one; a trunk without tipped steps is packed as packEpisodeSteps packs it', () => {
    const e1 = make([1, 2], [], [10], 1);
    const e2 = make([1, 2, 7, 8, 10, 3], [], [11], 1);
    const e3 = make([9, 2], [100], [12], 1); // the front changed
    const out = packEpisodeBranches([e1.s, e2.s, e3.s], [e1.span, e2.span, e3.span]);
    expect(out).toHaveLength(2);
    expect(out[0]).toEqual(packEpisodeSteps([e1.s, e2.s])[0]);
    expect(out[0].branches).toBeUndefined();
    expect(out[1].prompt).toEqual([9, 2, 7, 8]);
    expect(out[1].response).toEqual([12]);
    expect(out[1].policyTokens).toEqual([0]);
    expect(out[1].branches).toEqual([{ prefix: 2, ids: [100, 7, 8, 12], policyTokens: [0, 0, 0, 1] }]);
  });

  it('without tips (no span, or an empty one) the output is packEpisodeSteps', () => {
    const e1 = make([1, 2], [], [10], 1);
    const e2 = make([1, 2, 7, 8, 10, 3], [], [11], 2);
    const steps = [e1.s, e2.s];
    expect(JSON.stringify(packEpisodeBranches(steps, [null, [6, 6]]))).toBe(JSON.stringify(packEpisodeSteps(steps)));
    expect(JSON.stringify(packEpisodeBranches(steps, [null, undefined]))).toBe(JSON.stringify(packEpisodeSteps(steps)));
  });
});
