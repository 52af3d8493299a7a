/**
 * Packed training sequences: when each step's prompt of an episode is the previous step's prompt plus
 * its response plus new context (the instruct prompt's token-in/token-out dialogue), the steps are one
 * causal sequence prompt₁ response₁ context₂ response₂ … and are trained as one, instead of re-encoding
 * the growing prompt once per step. The log-probs of every response token are the same either way
 * (the same causal computation); only the work differs.
 */
import type { TrainSequence } from '../policy/types.ts';
import { removeTips } from './prompt.ts';

function startsWith(ids: readonly number[], prefix: readonly number[]): boolean {
  if (prefix.length > ids.length) return false;
  for (let i = 0; i < prefix.length; i++) if (ids[i] !== prefix[i]) return false;
  return true;
}

/**
 * Joins consecutive steps of one episode into packed sequences wherever a step's prompt extends the
 * previous step's prompt + response; a step that does not (a tip block that changed, a history window
 * that dropped a turn) starts a new sequence. Per-token arrays keep one value per policy token.
 */
export function packEpisodeSteps(steps: readonly TrainSequence[]): TrainSequence[] {
  return packEpisodeChains(steps).sequences;
}

/**
 * packEpisodeSteps, with the indices (into `steps`) of the steps in each sequence. A step for which
 * `scored(t)` is false still extends its sequence, but its response is context there (policy token 0,
 * no per-token values): packEpisodeBranches scores it in a branch instead.
 */
export function packEpisodeChains(
  steps: readonly TrainSequence[],
  scored: (t: number) => boolean = () => true,
): { sequences: TrainSequence[]; members: number[][] } {
  const members: number[][] = [];
  const out: TrainSequence[] = [];
  let chain: TrainSequence | null = null;
  let full: number[] = [];
  for (const [t, step] of steps.entries()) {
    const values = scored(t);
    const policy = step.response.map(() => (values ? 1 : 0));
    if (
      !chain ||
      chain.lowProbMask !== step.lowProbMask ||
      Boolean(chain.refLogprobs) !== Boolean(step.refLogprobs) ||
      !startsWith(step.prompt, full)
    ) {
      chain = {
        ...step,
        prompt: [...step.prompt],
        response: [],
        policyTokens: [],
        advantages: [],
        oldLogprobs: [],
        mask: [],
        ...(step.refLogprobs ? { refLogprobs: [] } : {}),
      };
      full = [...step.prompt];
      out.push(chain);
      members.push([]);
    }
    const context = step.prompt.slice(full.length);
    chain.response.push(...context, ...step.response);
    chain.policyTokens!.push(...context.map(() => 0), ...policy);
    if (values) {
      chain.advantages.push(...step.advantages);
      chain.oldLogprobs.push(...step.oldLogprobs);
      chain.mask.push(...step.mask);
      if (chain.refLogprobs) chain.refLogprobs.push(...step.refLogprobs!);
    }
    full.push(...context, ...step.response);
    members[members.length - 1].push(t);
  }
  // A sequence of one scored step is an ordinary one: no policyTokens to carry.
  const sequences = out.map((s) => (s.policyTokens!.every((x) => x === 1) ? (({ policyTokens: _, ...rest }) => rest)(s) : s));
  return { sequences, members };
}

type TipSpan = readonly [number, number] | null | undefined;

/**
 * An on-policy episode scored with the tips each step was sampled with, as trunk plus branches
 * (ScoredSequence.branches): each step's prompt with its tips cut out extends the previous step's
 * (earlier turns carry no tips), so the steps without their tips pack into one trunk as in
 * packEpisodeSteps; each step that had tips (`tipSpans[t]`, a non-empty [start, end) of its prompt)
 * becomes a branch [its tips, the rest of its prompt, its response] that sees the trunk's first
 * `start` tokens (the step's prompt before its tips), where its response is scored; in the trunk that
 * response is context. A step without tips is scored in the trunk. Every scored token then has the
 * context and position it has in the step's own full prompt: the same log-probs as scoring the steps
 * one by one, with the history encoded once instead of once per step.
 *
 * Per-token arrays: the trunk's scored tokens in order, then each branch's, in step order. A trunk
 * step that does not extend the previous one starts a new trunk, as in packEpisodeSteps. Without any
 * tips the result is packEpisodeSteps(steps).
 */
export function packEpisodeBranches(steps: readonly TrainSequence[], tipSpans: readonly TipSpan[]): TrainSequence[] {
  if (tipSpans.length !== steps.length) throw new Error(`packEpisodeBranches: ${steps.length} steps but ${tipSpans.length} tip spans`);
  const tipped = (t: number): boolean => Boolean(tipSpans[t] && tipSpans[t][1] > tipSpans[t][0]);
  const tipFree = steps.map((step, t) => (tipped(t) ? { ...step, prompt: removeTips(step.prompt, tipSpans[t]!) } : step));
  const { sequences, members } = packEpisodeChains(tipFree, (t) => !tipped(t));
  return sequences.map((trunk, i) => {
    const branched = members[i].filter(tipped);
    if (branched.length === 0) return trunk;
    const seq: TrainSequence = { ...trunk, branches: [] };
    for (const t of branched) {
      const step = steps[t];
      const start = tipSpans[t]![0];
      const tail = step.prompt.slice(start);
      seq.branches!.push({
        prefix: start,
        ids: [...tail, ...step.response],
        policyTokens: [...tail.map(() => 0), ...step.response.map(() => 1)],
      });
      seq.advantages.push(...step.advantages);
      seq.oldLogprobs.push(...step.oldLogprobs);
      seq.mask.push(...step.mask);
      if (seq.refLogprobs) seq.refLogprobs.push(...step.refLogprobs!);
    }
    return seq;
  });
}

/** Tokens a sequence runs through the model: its prompt and response, and its branches' tokens. */
export function sequenceTokens(s: Pick<TrainSequence, 'prompt' | 'response' | 'branches'>): number {
  return s.prompt.length + s.response.length + (s.branches ?? []).reduce((n, b) => n + b.ids.length, 0);
}
