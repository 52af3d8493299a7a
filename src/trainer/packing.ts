/**
 * Packed training sequences: when each step's prompt of an episode is the previous step's prompt plus
 * its response plus new context (the instruct prompt's token-in/token-out dialogue), the steps are one
 * causal sequence prompt₁ response₁ context₂ response₂ … and are trained as one, instead of re-encoding
 * the growing prompt once per step. The log-probs of every response token are the same either way
 * (the same causal computation); only the work differs.
 */
import type { TrainSequence } from '../policy/types.ts';

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
  const out: TrainSequence[] = [];
  let chain: TrainSequence | null = null;
  let full: number[] = [];
  for (const step of steps) {
    if (
      chain &&
      chain.lowProbMask === step.lowProbMask &&
      Boolean(chain.refLogprobs) === Boolean(step.refLogprobs) &&
      startsWith(step.prompt, full)
    ) {
      const context = step.prompt.slice(full.length);
      chain.response.push(...context, ...step.response);
      chain.policyTokens!.push(...context.map(() => 0), ...step.response.map(() => 1));
      chain.advantages.push(...step.advantages);
      chain.oldLogprobs.push(...step.oldLogprobs);
      chain.mask.push(...step.mask);
      if (chain.refLogprobs) chain.refLogprobs.push(...step.refLogprobs!);
      full.push(...context, ...step.response);
      continue;
    }
    chain = {
      ...step,
      response: [...step.response],
      policyTokens: step.response.map(() => 1),
      advantages: [...step.advantages],
      oldLogprobs: [...step.oldLogprobs],
      mask: [...step.mask],
      ...(step.refLogprobs ? { refLogprobs: [...step.refLogprobs] } : {}),
    };
    full = [...step.prompt, ...step.response];
    out.push(chain);
  }
  // A sequence of one step is an ordinary one: no policyTokens to carry.
  return out.map((s) => (s.policyTokens!.every((x) => x === 1) ? (({ policyTokens: _, ...rest }) => rest)(s) : s));
}
