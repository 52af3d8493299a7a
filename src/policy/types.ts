/**
 * What the trainer needs from a policy, whatever runs it (in-process TensorFlow.js, a remote
 * OpenAI-compatible server, a PyTorch worker). Everything is in token ids so no engine re-tokenises
 * another's text.
 */
import type { ObjectiveConfig } from '../algo/objective.ts';
import type { SampleOptions } from './sampling.ts';

export interface TextTokenizer {
  encode(text: string): number[];
  decode(ids: number[]): string;
  readonly vocabSize: number;
  tokenToId(token: string): number | undefined;
}

export interface GenerateOptions extends SampleOptions {
  maxTokens: number;
  /** Generation stops after any of these texts appears in the response. */
  stop?: string[];
  seed: number;
  /** Per prompt: the only texts the response may be (constrained decoding), or null for free text. */
  allowedTexts?: (readonly string[] | null)[];
}

export interface Generation {
  tokens: number[];
  /** log-prob of each generated token under the sampling temperature, unconstrained. */
  logprobs: number[];
  text: string;
  finish: 'stop' | 'length';
}

export interface ScoredSequence {
  prompt: number[];
  response: number[];
}

export interface TrainSequence extends ScoredSequence {
  /** A per response token. */
  advantages: number[];
  /** log πold per response token (from the prompt the action was sampled with). */
  oldLogprobs: number[];
  /** 1 if the token counts in the loss. */
  mask: number[];
  /** log πref per response token, when a KL penalty is used. */
  refLogprobs?: number[];
  /** Whether the token-level low-probability (δ) mask applies to this sequence (default: yes). */
  lowProbMask?: boolean;
}

export interface TrainStats {
  loss: number;
  tokens: number;
  clipFraction: number;
  meanRatio: number;
  kl: number;
  gradNorm: number;
}

export interface PolicyEngine {
  readonly tokenizer: TextTokenizer;
  generate(prompts: number[][], opts: GenerateOptions): Promise<Generation[]>;
  logprobs(batch: ScoredSequence[], temperature?: number): Promise<number[][]>;
  /** One optimiser step on the whole batch (gradients accumulated over micro-batches). */
  trainStep(batch: TrainSequence[], objective: ObjectiveConfig, temperature?: number, lr?: number): Promise<TrainStats>;
  save(dir: string): Promise<void>;
  dispose(): void;
}
