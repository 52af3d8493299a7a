/**
 * Retrospex acting: the frozen LLM proposes candidate actions with their likelihoods, the critic gives
 * each its Q, and dynamic action rescoring (src/algo/rescore.ts) picks one. Wraps any PolicyEngine (the
 * in-process engines or a served model) as an ActingEngine, so `empo2 eval` plays, records and tabulates
 * it exactly as it does the policy alone.
 *
 * Proposals: each episode's prompt is sampled `candidates` times in one batch (constrained to the valid
 * actions when the rollout is), at `temperature`, and the distinct actions kept in the order drawn. The
 * authors propose by beam search (6 beams, ScienceWorld) or by sampling 4 answers at temperature 0.9
 * (ALFWorld, WebShop), and then score each with one more forward pass; here the sampler's own log-probs
 * are the likelihood, which at temperature 1 are the model's, so no second pass is needed. Their
 * environment heuristics (SwiftSage's action buffer, focus rules, the SBERT mapping of invalid answers
 * to valid ones) are left out, as the EMPO² paper ran Retrospex: the project's action parsing applies.
 */
import { actionLikelihood, checkSchedule, rescore, type RescoreSchedule } from '../algo/rescore.ts';
import type { GenerateOptions, Generation, PolicyEngine, TextTokenizer } from '../policy/types.ts';
import type { ActingEngine, ActRow } from '../trainer/rollout.ts';
import type { RescoredStep } from '../trajectory/format.ts';
import * as tf from '@tensorflow/tfjs';
import type { Critic } from './critic.ts';
import type { TextVectors } from './encoder.ts';

export interface ActingSettings {
  /** Answers sampled per step (k); their distinct actions are the candidates. */
  candidates: number;
  /** Sampling temperature of the proposals (1: the likelihoods are the model's own). */
  temperature: number;
  schedule: RescoreSchedule;
}

/** Four samples at temperature 1 (the authors' ALFWorld/WebShop k, and the model's own likelihoods); ScienceWorld's schedule. */
export const RETROSPEX_ACTING: ActingSettings = { candidates: 4, temperature: 1, schedule: { decay: 0.95, floor: 0.25 } };

export function checkActing(s: ActingSettings): void {
  if (!Number.isInteger(s.candidates) || s.candidates < 1)
    throw new RangeError(`--candidates must be a positive integer, got ${s.candidates}`);
  if (!(s.temperature > 0)) throw new RangeError(`--proposal-temperature must be positive, got ${s.temperature}`);
  checkSchedule(s.schedule);
}

/** The cache key of an episode's j-th proposal row: row 0 keeps the episode's own, so its cache is the one the rollout releases. */
const rowKey = (key: string, j: number) => (j === 0 ? key : `${key}#retrospex-${j}`);

interface Candidate {
  action: string;
  generation: Generation;
  likelihood: number;
}

/** The distinct actions of one episode's samples, in the order drawn, each with the highest likelihood any of its samples had. */
export function distinctCandidates(gens: readonly Generation[], parse: (text: string) => string): Candidate[] {
  const byAction = new Map<string, Candidate>();
  for (const g of gens) {
    const action = parse(g.text);
    // A response of no tokens (the model ended at once) has nothing to average: it ranks last.
    const likelihood = g.logprobs.length > 0 ? actionLikelihood(g.logprobs) : 0;
    const seen = byAction.get(action);
    if (!seen) byAction.set(action, { action, generation: g, likelihood });
    else if (likelihood > seen.likelihood) byAction.set(action, { action, generation: g, likelihood });
  }
  return [...byAction.values()];
}

export class RetrospexEngine implements ActingEngine {
  readonly tokenizer: TextTokenizer;

  constructor(
    private readonly inner: PolicyEngine,
    private readonly critic: Critic,
    private readonly vectors: TextVectors,
    readonly settings: ActingSettings,
  ) {
    checkActing(settings);
    if (vectors.embedder.name !== critic.encoder.name || vectors.dim !== critic.encoder.dim)
      throw new Error(
        `the critic was trained on ${critic.encoder.name} vectors (${critic.encoder.dim} dimensions), but acting embeds with ${vectors.embedder.name} (${vectors.dim})`,
      );
    this.tokenizer = inner.tokenizer;
  }

  async act(rows: readonly ActRow[], opts: GenerateOptions, parse: (text: string, valid: readonly string[]) => string) {
    const k = this.settings.candidates;
    const repeat = <T>(xs: readonly T[]) => xs.flatMap((x) => Array.from({ length: k }, () => x));
    const gens = await this.inner.generate(repeat(rows.map((r) => r.prompt)), {
      ...opts,
      temperature: this.settings.temperature,
      allowedTexts: opts.allowedTexts && repeat(opts.allowedTexts),
      cacheKeys: opts.cacheKeys?.flatMap((key) => Array.from({ length: k }, (_, j) => (key === null ? null : rowKey(key, j)))),
    });
    const candidates = rows.map((r, i) => distinctCandidates(gens.slice(i * k, (i + 1) * k), (text) => parse(text, r.validActions)));
    const q = await this.qValues(rows, candidates);
    return rows.map((r, i) => {
      const c = candidates[i];
      const scored = rescore(
        c.map((x) => x.likelihood),
        q[i],
        r.stepsTaken,
        this.settings.schedule,
      );
      const rescored: RescoredStep = {
        weight: scored.weight,
        candidates: c.map((x, j) => ({ action: x.action, likelihood: x.likelihood, q: q[i][j], score: scored.scores[j] })),
      };
      return { ...c[scored.chosen].generation, rescored };
    });
  }

  /** Q̄(s, a) of every candidate of every row, in one batch through the critic. */
  private async qValues(rows: readonly ActRow[], candidates: readonly Candidate[][]): Promise<number[][]> {
    const flat = rows.flatMap((r, i) => candidates[i].map((c) => ({ task: r.task, observation: r.observation, action: c.action })));
    const [task, observation, action] = await Promise.all(
      (['task', 'observation', 'action'] as const).map((f) => this.vectors.of(flat.map((x) => x[f]))),
    );
    const stack = (vs: Float32Array[]) => tf.tensor2d(vs.length ? concat(vs) : new Float32Array(0), [vs.length, this.vectors.dim]);
    const values = tf.tidy(() => this.critic.targetQ({ task: stack(task), observation: stack(observation), action: stack(action) }));
    const all = Array.from(await values.data());
    values.dispose();
    let at = 0;
    return candidates.map((c) => c.map(() => all[at++]));
  }

  /** The text vectors computed so far: a later step reuses them rather than computing them in another batch. */
  actingState(): { vectors: [string, string][] } {
    return { vectors: this.vectors.snapshot() };
  }

  restoreActingState(state: unknown): void {
    const vectors = (state as { vectors?: unknown } | null)?.vectors;
    if (!Array.isArray(vectors)) throw new Error('the saved Retrospex state has no text vectors');
    this.vectors.restore(vectors as [string, string][]);
  }

  generate(prompts: number[][], opts: GenerateOptions): Promise<Generation[]> {
    return this.inner.generate(prompts, opts);
  }

  logprobs(...args: Parameters<PolicyEngine['logprobs']>): ReturnType<PolicyEngine['logprobs']> {
    return this.inner.logprobs(...args);
  }

  trainStep(): never {
    throw new Error('Retrospex keeps the LLM frozen: its critic is trained offline (empo2 critic train), not by RL steps');
  }

  save(dir: string): Promise<void> {
    return this.inner.save(dir);
  }

  releaseCache(keys: readonly string[]): void {
    this.inner.releaseCache?.(keys.flatMap((key) => Array.from({ length: this.settings.candidates }, (_, j) => rowKey(key, j))));
  }

  prefillCounts(): { prefilledTokens: number; reusedTokens: number } {
    return this.inner.prefillCounts?.() ?? { prefilledTokens: 0, reusedTokens: 0 };
  }

  setProgressListener(...args: Parameters<NonNullable<PolicyEngine['setProgressListener']>>): void {
    this.inner.setProgressListener?.(...args);
  }

  /** Disposes the critic and the LLM engine it wraps. */
  dispose(): void {
    this.critic.dispose();
    this.vectors.embedder.dispose?.();
    this.inner.dispose();
  }
}

function concat(vs: readonly Float32Array[]): Float32Array {
  const out = new Float32Array(vs.reduce((n, v) => n + v.length, 0));
  let at = 0;
  for (const v of vs) {
    out.set(v, at);
    at += v.length;
  }
  return out;
}
