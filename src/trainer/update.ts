/**
 * The policy update of one iteration, top to bottom: GRPO's, with GiGPO's step advantage where
 * configured and EMPO²'s update modes (docs/EMPO2.md §4, §7–§8):
 *   1. return of each rollout = sum of its scaled step rewards + its weighted intrinsic rewards;
 *   2. advantage = return normalised within its group (same task and variation); with the GiGPO
 *      step term (algo.step_advantage: gigpo, ../algo/gigpo.ts) plus ω times the step's discounted
 *      return normalised among the group's steps taken from the same state. An episode that an
 *      environment or engine failure ended is left out first: a group of four with one failed is a
 *      group of three;
 *   3. every action token of a step gets that step's advantage (GRPO: the same for every step of a
 *      rollout), and a step whose advantage is 0 is left out (skipZeroAdvantage);
 *   4. the prompt each step is scored on: as sampled (plain and on-policy-with-tips rollouts), or
 *      with the tip block cut out (off-policy rollouts, whose ratio ρ = πθ(a|s,u) / πold(a|s,u,tips)
 *      or its decoupled variant is paired in ../algo/off-policy.ts, offPolicyRatio); with packing, an
 *      episode's steps go into one sequence where their prompts extend each other, and an
 *      on-policy-with-tips episode is scored as its tip-free trunk plus a branch per tipped step where
 *      the engine takes branches (packing.ts packEpisodeBranches: the same log-probs, less work);
 *   5. low-probability masks (token-level δ, or sequence-level min old log-prob) on off-policy
 *      samples (or on all, by config);
 *   6. clipped-ratio objective, token mean, over `minibatches` optimiser steps for `epochs` passes.
 */
import { groupNormalisedAdvantages, rolloutReturn } from '../algo/advantage.ts';
import { gigpoAdvantages, summariseStepGroups, type GigpoSettings, type StepGroupSummary } from '../algo/gigpo.ts';
import { sequenceLowProbKeep, type ObjectiveConfig } from '../algo/objective.ts';
import { offPolicyRatio, type OffPolicyRatio } from '../algo/off-policy.ts';
import { resolveAlgo, type Config } from '../config/schema.ts';
import type { PolicyEngine, StepResumeOptions, TrainSequence, TrainStats } from '../policy/types.ts';
import type { Rng } from '../util/rng.ts';
import type { Mode } from '../algo/modes.ts';
import { isFailed, type Episode, type UpdateStats } from '../run/records.ts';
import { removeTips } from './prompt.ts';
import { promptSettings } from './prompt-style.ts';
import { packEpisodeBranches, packEpisodeChains, sequenceTokens as countSequenceTokens } from './packing.ts';

export interface UpdateEpisode extends Episode {
  /** How the episode was rolled out and is to be updated (default: plain). */
  mode?: Mode;
  /** Weighted intrinsic reward of each step (default: none). */
  intrinsic?: number[];
}

export interface UpdateSettings {
  objective: ObjectiveConfig;
  /** Reference's sequence-level mask: drop responses whose minimum old log-prob is below this. */
  seqMinLogprob: number | null;
  minibatches: number;
  epochs: number;
  rewardScale: number;
  skipZeroAdvantage: boolean;
  temperature: number;
  /** Where the low-probability masks apply: off-policy samples only (EMPO²) or every sample. */
  maskScope?: 'off_policy' | 'all';
  /** Off-policy ratio: the paper's (to the sampler with tips), or decoupled (see algo/off-policy.ts). */
  offPolicyRatio?: OffPolicyRatio;
  /** Decoupled: cap of the importance weight (null: w = 1). */
  offPolicyWeightCap?: number | null;
  lr?: number;
  /** Train each episode's steps as packed sequences where its prompts extend each other (packing.ts). */
  pack?: boolean;
  /**
   * With `pack`, on-policy-with-tips episodes as trunk plus branches (packing.ts packEpisodeBranches) where
   * the engine takes them (PolicyEngine.supportsBranches); false: one sequence per tipped step. The samples
   * stay those of packEpisodeSteps through the shuffle and the minibatch split; each minibatch's steps of an
   * episode are packed into trunk plus branches when it is trained, so every optimiser step sees the same
   * tokens either way. Default: on.
   */
  tipBranches?: boolean;
  /** GiGPO's step-level advantage on top of the episode one (null or absent: GRPO's alone). */
  gigpo?: GigpoSettings | null;
}

/** The config's update settings (algo.*, and the rollout temperature the log-probs are taken at). */
export function updateSettings(cfg: Config): UpdateSettings {
  const algo = resolveAlgo(cfg);
  return {
    objective: {
      clipLow: cfg.algo.clip_low,
      clipHigh: cfg.algo.clip_high,
      dualClip: cfg.algo.dual_clip,
      klCoef: cfg.algo.kl_coef,
      lowProbDelta: cfg.algo.low_prob_delta,
    },
    seqMinLogprob: cfg.algo.seq_min_logprob,
    minibatches: cfg.algo.minibatches,
    epochs: cfg.algo.epochs,
    rewardScale: cfg.algo.reward_scale,
    skipZeroAdvantage: cfg.algo.skip_zero_advantage,
    temperature: cfg.rollout.temperature > 0 ? cfg.rollout.temperature : 1,
    maskScope: cfg.algo.low_prob_scope,
    offPolicyRatio: cfg.experimental.off_policy_ratio,
    offPolicyWeightCap: cfg.experimental.off_policy_weight_cap,
    pack: cfg.optim.pack_episodes ?? promptSettings(cfg).template !== undefined,
    tipBranches: cfg.optim.tip_branches ?? true,
    gigpo: algo.stepAdvantage === 'gigpo' ? { omega: cfg.algo.gigpo_omega, gamma: cfg.algo.gigpo_gamma, mode: cfg.algo.gigpo_mode } : null,
  };
}

/**
 * Steps 1–5: the update's training sequences and what is known of them before the first optimiser step
 * (the decoupled ratio's tip-free log-probs are taken here, with the weights before the update). Plain
 * data, so that an update interrupted between optimiser steps resumes from it (../run/partial.ts).
 */
export interface PreparedUpdate {
  samples: UpdateSample[];
  returns: number[];
  droppedLowProb: number;
  offPolicySequences: number;
  offPolicyMeanWeight: number | null;
  steps: number;
  packedSteps: number;
  stepGroups: UpdateStats['stepGroups'];
}

/**
 * A training sample: a sequence as packEpisodeSteps makes it and, for an on-policy episode with tips whose
 * engine takes branches, the steps it holds, which the minibatch it falls in packs into trunk plus branches
 * with that episode's other steps there (trainedSequences).
 */
export interface UpdateSample extends TrainSequence {
  branchSource?: { episode: number; steps: { index: number; sample: TrainSequence; tipSpan: [number, number] | null }[] };
}

/** Where an update is between optimiser steps: enough to go on from there exactly. */
export interface OptimiserProgress {
  epoch: number;
  /** Minibatches of this epoch already stepped on. */
  minibatchesDone: number;
  /** The samples' order in this epoch (indices into PreparedUpdate.samples), after its shuffle. */
  order: number[];
  /** The random stream's state after this epoch's shuffle. */
  rngState: number;
  totals: { loss: number; tokens: number; clipFraction: number; meanRatio: number; kl: number; gradNorm: number };
  optimizerSteps: number;
  /** Optimiser steps of the whole update (all epochs). */
  optimizerStepsTotal: number;
  sequenceTokens: number;
}

/** Steps 1–6 in one call: the update of one iteration's episodes. */
export async function updatePolicy(engine: PolicyEngine, episodes: UpdateEpisode[], s: UpdateSettings, rng: Rng): Promise<UpdateStats> {
  return runOptimiserSteps(engine, await prepareUpdate(engine, episodes, s), { settings: s, rng });
}

export async function prepareUpdate(engine: PolicyEngine, batch: UpdateEpisode[], s: UpdateSettings): Promise<PreparedUpdate> {
  // An episode a failure ended (the environment's, or the rollout engine's: no rollout server was left)
  // is no sample of the policy: its group is normalised over the others (docs/EMPO2.md §7).
  // A group the judge could not score has no reward to compare (env.reward: judge): it is left out whole.
  const episodes = batch.filter((e) => !isFailed(e) && !e.engineError && e.leftOut === undefined);
  const stepRewards = episodes.map((e) => e.steps.map((st, t) => st.reward * s.rewardScale + (e.intrinsic?.[t] ?? 0)));
  const returns = stepRewards.map(rolloutReturn);
  const { advantages, stepGroups } = stepAdvantages(episodes, { stepRewards, returns }, s);
  const branches = (s.tipBranches ?? true) && engine.supportsBranches === true;
  const built = trainingSamples(episodes, advantages, s, branches);
  const offPolicyMeanWeight = await pairOffPolicyRatios(engine, built.offPolicySamples, s);
  const { samples, droppedLowProb, offPolicySequences, steps, packedSteps } = built;
  return { samples, returns, droppedLowProb, offPolicySequences, offPolicyMeanWeight, steps, packedSteps, stepGroups };
}

/** Steps 1–2: the advantage of every step of every episode (GRPO's per rollout, plus GiGPO's per step where configured). */
function stepAdvantages(
  episodes: readonly UpdateEpisode[],
  r: { stepRewards: number[][]; returns: number[] },
  s: UpdateSettings,
): { advantages: number[][]; stepGroups: UpdateStats['stepGroups'] } {
  if (s.gigpo) {
    // The anchor state of a step is the environment's observation the action was chosen from.
    const g = gigpoAdvantages(
      episodes.map((e, i) => ({ group: e.group, anchors: e.steps.map((st) => st.observation), rewards: r.stepRewards[i] })),
      s.gigpo,
    );
    const multiStep = g.advantages.filter((a) => a.length > 1);
    const varied = multiStep.filter((a) => a.some((x) => Math.abs(x - a[0]) > 1e-9)).length;
    return {
      advantages: g.advantages,
      stepGroups: { ...summariseStepGroups(g.stepGroupSizes), variedRollouts: varied / Math.max(1, multiStep.length) },
    };
  }
  const perRollout = groupNormalisedAdvantages(
    r.returns,
    episodes.map((e) => e.group),
  );
  return { advantages: episodes.map((e, i) => e.steps.map(() => perRollout[i])), stepGroups: null };
}

/** Steps 3–5: the training sequences (packed where configured), with the off-policy ones apart for their ratio. */
function trainingSamples(episodes: readonly UpdateEpisode[], advantages: number[][], s: UpdateSettings, branches: boolean) {
  let droppedLowProb = 0;
  let offPolicySequences = 0;
  let steps = 0;
  let packedSteps = 0;
  const samples: UpdateSample[] = [];
  const offPolicySamples: TrainSequence[] = [];
  episodes.forEach((episode, i) => {
    const offPolicy = episode.mode === 'tips-off-policy';
    const masked = offPolicy || s.maskScope === 'all';
    const stepSamples: TrainSequence[] = [];
    const tipSpans: ([number, number] | null)[] = [];
    episode.steps.forEach((step, t) => {
      const A = advantages[i][t];
      // Without a KL term a step with A = 0 has no gradient; packing keeps its tokens as context of later steps.
      if (s.skipZeroAdvantage && s.objective.klCoef === 0 && Math.abs(A) < 1e-9) return;
      if (step.response.length === 0) return;
      const keep = !masked || s.seqMinLogprob === null || sequenceLowProbKeep(step.logprobs, s.seqMinLogprob);
      if (!keep) droppedLowProb++;
      if (offPolicy) offPolicySequences++;
      stepSamples.push({
        prompt: offPolicy ? removeTips(step.prompt, step.tipSpan) : step.prompt,
        response: step.response,
        advantages: step.response.map(() => A),
        oldLogprobs: step.logprobs,
        mask: step.response.map(() => (keep ? 1 : 0)),
        lowProbMask: masked,
      });
      tipSpans.push(step.tipSpan);
    });
    steps += stepSamples.length;
    const chains = s.pack ? packEpisodeChains(stepSamples) : null;
    // On-policy with tips, where the engine takes branches: each sample keeps its steps, packed into trunk plus branches per minibatch.
    const sequences: UpdateSample[] = !chains
      ? stepSamples
      : branches && episode.mode === 'tips-on-policy'
        ? chains.sequences.map((seq, k) => ({
            ...seq,
            branchSource: { episode: i, steps: chains.members[k].map((t) => ({ index: t, sample: stepSamples[t], tipSpan: tipSpans[t] })) },
          }))
        : chains.sequences;
    for (const seq of sequences) if (seq.policyTokens) packedSteps += countSteps(seq.policyTokens);
    samples.push(...sequences);
    if (offPolicy) offPolicySamples.push(...sequences);
  });
  return { samples, offPolicySamples, droppedLowProb, offPolicySequences, steps, packedSteps };
}

/**
 * The off-policy samples' advantages and old log-probs as their ratio ρ needs them (step 4); returns
 * the decoupled ratio's mean importance weight (null for the paper's ratio, or without off-policy samples).
 */
async function pairOffPolicyRatios(engine: PolicyEngine, offPolicySamples: TrainSequence[], s: UpdateSettings): Promise<number | null> {
  // The engine scores ρ's numerator on each sample's prompt, tip-free for off-policy ones;
  // offPolicyRatio pairs it with its denominator. The decoupled ratio's denominator is πold(a|s,u):
  // the tip-free prompts scored with the weights before this update.
  const ratio = s.offPolicyRatio ?? 'paper';
  const tipFree = ratio === 'decoupled' && offPolicySamples.length > 0 ? await engine.logprobs(offPolicySamples, s.temperature) : null;
  let weightSum = 0;
  let weightCount = 0;
  offPolicySamples.forEach((sample, k) => {
    const terms = offPolicyRatio(
      ratio,
      { advantages: sample.advantages, sampledWithTips: sample.oldLogprobs, tipFreeBeforeUpdate: tipFree?.[k] ?? null },
      s.offPolicyWeightCap ?? null,
    );
    sample.advantages = terms.advantages;
    sample.oldLogprobs = terms.oldLogprobs;
    if (terms.weights) {
      weightSum += terms.weights.reduce((a, b) => a + b, 0);
      weightCount += terms.weights.length;
    }
  });
  return tipFree ? weightSum / Math.max(1, weightCount) : null;
}

/** How step 6 runs: the settings and random stream, and, for an update saved between optimiser steps, where it stands. */
export interface OptimiserOptions {
  settings: UpdateSettings;
  /** Shuffles each epoch's order (an update continued `from` a point restores the state it had there). */
  rng: Rng;
  /** Continues an update at the point `onStep` was told of (the weights and optimiser must then be those saved at that point). */
  from?: OptimiserProgress | null;
  /** Hears after every optimiser step. */
  onStep?: (progress: OptimiserProgress) => Promise<void>;
  /** Asked before each step: where the engine may save that step between micro-batches. */
  stepResume?: () => StepResumeOptions | undefined;
}

/** Step 6: `minibatches` optimiser steps for `epochs` passes over the prepared samples, each pass in a fresh random order. */
export async function runOptimiserSteps(engine: PolicyEngine, prepared: PreparedUpdate, o: OptimiserOptions): Promise<UpdateStats> {
  const { settings: s, rng, onStep, stepResume } = o;
  const from = o.from ?? null;
  const all = prepared.samples;
  const totals = from ? { ...from.totals } : { loss: 0, tokens: 0, clipFraction: 0, meanRatio: 0, kl: 0, gradNorm: 0 };
  let optimizerSteps = from?.optimizerSteps ?? 0;
  let sequenceTokens = from?.sequenceTokens ?? 0;
  // The samples in the current order; each epoch shuffles the previous epoch's order.
  let order = from ? [...from.order] : all.map((_, i) => i);
  if (from) rng.setState(from.rngState);
  const size = Math.ceil(all.length / s.minibatches);
  const optimizerStepsTotal = all.length > 0 ? s.epochs * Math.ceil(all.length / size) : 0;
  for (let epoch = from?.epoch ?? 0; epoch < s.epochs && all.length > 0; epoch++) {
    const resuming = from !== null && epoch === from.epoch;
    if (!resuming) rng.shuffle(order);
    const rngState = rng.getState();
    let done = resuming ? from.minibatchesDone : 0;
    for (let start = done * size; start < all.length; start += size) {
      const minibatch = trainedSequences(order.slice(start, start + size).map((i) => all[i]));
      const stats = await engine.trainStep(minibatch, s.objective, s.temperature, s.lr, stepResume?.());
      sequenceTokens += minibatch.reduce((n, x) => n + countSequenceTokens(x), 0);
      optimizerSteps++;
      totals.loss += stats.loss;
      totals.tokens += stats.tokens;
      totals.clipFraction += stats.clipFraction;
      totals.meanRatio += stats.meanRatio;
      totals.kl += stats.kl;
      totals.gradNorm += stats.gradNorm;
      done++;
      await onStep?.({
        epoch,
        minibatchesDone: done,
        order: [...order],
        rngState,
        totals: { ...totals },
        optimizerSteps,
        optimizerStepsTotal,
        sequenceTokens,
      });
    }
  }
  const { returns, droppedLowProb, offPolicySequences, offPolicyMeanWeight, steps, packedSteps, stepGroups } = prepared;
  const samples = all;
  const n = Math.max(1, optimizerSteps);
  return {
    loss: totals.loss / n,
    tokens: totals.tokens,
    clipFraction: totals.clipFraction / n,
    meanRatio: optimizerSteps ? totals.meanRatio / n : 1,
    kl: totals.kl / n,
    gradNorm: totals.gradNorm / n,
    sequences: samples.length,
    optimizerSteps,
    meanReturn: returns.reduce((a, b) => a + b, 0) / Math.max(1, returns.length),
    droppedLowProb,
    offPolicySequences,
    offPolicyMeanWeight,
    steps,
    packedSteps,
    sequenceTokens,
    stepGroups,
  };
}

/**
 * A minibatch as the engine trains it: samples with a branch source (UpdateSample) are replaced, episode
 * by episode, by their steps packed into trunk plus branches (packing.ts packEpisodeBranches); the others
 * go as they are. The same tokens with the same values, scored as the per-step samples would be.
 */
function trainedSequences(minibatch: readonly UpdateSample[]): TrainSequence[] {
  const out: TrainSequence[] = [];
  const episodes = new Map<number, NonNullable<UpdateSample['branchSource']>['steps']>();
  for (const x of minibatch) {
    if (!x.branchSource) {
      out.push(x);
      continue;
    }
    const steps = episodes.get(x.branchSource.episode) ?? [];
    steps.push(...x.branchSource.steps);
    episodes.set(x.branchSource.episode, steps);
  }
  for (const steps of episodes.values()) {
    steps.sort((a, b) => a.index - b.index);
    out.push(
      ...packEpisodeBranches(
        steps.map((x) => x.sample),
        steps.map((x) => x.tipSpan),
      ),
    );
  }
  return out;
}

/** Responses in a packed sequence: runs of policy tokens. */
function countSteps(policyTokens: readonly number[]): number {
  let n = 0;
  policyTokens.forEach((x, i) => {
    if (x === 1 && (i === 0 || policyTokens[i - 1] === 0)) n++;
  });
  return n;
}
