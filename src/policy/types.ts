/**
 * What the trainer needs from a policy, whatever runs it (in-process TensorFlow.js, a remote
 * OpenAI-compatible server, a PyTorch worker). Everything is in token ids so no engine re-tokenises
 * another's text.
 */
import type { ObjectiveConfig } from '../algo/objective-config.ts';
import type { SampleOptions } from './sampling.ts';

// The chat template's types for the layers that may import only this file and ./index.ts: through here
// their declarations stay clear of ./index.ts's, which name the TensorFlow.js engine and so its types.
export type { ChatMessage, ChatTemplate } from './chat-template.ts';

export interface TextTokenizer {
  encode(text: string): number[];
  decode(ids: number[]): string;
  readonly vocabSize: number;
  tokenToId(token: string): number | undefined;
}

/**
 * Decoding constrained by a rule over token ids (./json-constraint.ts: a tool call, JSON for a schema):
 * the ids that may follow the response's tokens so far, the end-of-turn token among them once the text
 * is complete. Sampling renormalises over them as it does over an allowed-texts trie's children.
 */
export interface TokenConstraint {
  allowedAfter(prefix: readonly number[]): readonly number[];
  /** Every text it allows (without the end token) when they are few, else null: engines that take only texts use these. */
  finiteTexts?(): string[] | null;
  /** Its texts as EBNF (xgrammar's GBNF dialect), for a server that constrains by grammar (vLLM). */
  grammar?(): string;
}

export interface GenerateOptions extends SampleOptions {
  maxTokens: number;
  /** Generation stops after any of these texts appears in the response. */
  stop?: string[];
  seed: number;
  /** Per prompt: the only texts the response may be (constrained decoding), or null for free text. */
  allowedTexts?: (readonly string[] | null)[];
  /**
   * Per prompt: a constraint over token ids, or null. A row takes allowedTexts or a constraint, not both.
   * The log-probs recorded are the policy's own, unconstrained, as with allowedTexts.
   */
  constraints?: (TokenConstraint | null)[];
  /**
   * Per prompt: the sequence it continues (e.g. one episode), or null. An engine that keeps KV caches
   * holds, per key, the cache of its last prompt + response, and prefills only the tokens after the
   * longest common prefix of that and the new prompt. Results are the same with or without keys.
   */
  cacheKeys?: (string | null)[];
  /**
   * Jump-forward decoding: where a row's constraint leaves one token at a time (a forced tool call's
   * wrapper, the rest of the one allowed text a prefix names), an engine that can feeds that run of
   * tokens through the model in one pass instead of one pass per token. The tokens, the random draws
   * and the finish are the same as without it; the log-probs differ only by float rounding (other
   * matrix shapes). Engines without it ignore it.
   */
  jumpForward?: boolean;
  /**
   * Given, the engine lets the event loop turn between tokens (a server keeps answering other
   * requests meanwhile) and, once it is aborted, stops and rejects with its reason.
   */
  signal?: AbortSignal;
}

export interface Generation {
  tokens: number[];
  /** log-prob of each generated token under the sampling temperature, unconstrained. */
  logprobs: number[];
  text: string;
  finish: 'stop' | 'length';
  /**
   * Set when the engine could not sample this row (a rollout server died and none was left to take
   * it; tokens and text are empty): the rollout ends that episode instead of the run.
   */
  error?: string;
}

export interface ScoredSequence {
  prompt: number[];
  response: number[];
  /**
   * A packed episode (prompt₁ response₁ obs₂ response₂ …, everything after prompt₁ in `response`): 1 for
   * the policy's tokens, 0 for context tokens (observations, chat headers) that only condition later ones.
   * Only policy tokens are scored, and every per-token array (log-probs out; advantages, old log-probs,
   * masks in) has one value per policy token, in order. Absent: every response token is the policy's.
   */
  policyTokens?: number[];
  /**
   * Trunk plus branches (an on-policy episode scored with its tips, ../trainer/packing.ts
   * packEpisodeBranches): this sequence (prompt + response) is the episode without its tips, and each
   * branch is one step's [tips, the rest of its prompt after them, its response], whose tokens see the
   * first `prefix` tokens of the trunk (prompt + response coordinates) and the branch's earlier tokens,
   * at positions prefix, prefix + 1, …: each branch token has the position and context it has in the
   * step's own full prompt. Scored tokens: the trunk's policy tokens, then each branch's (its
   * `policyTokens`), branch by branch; per-token arrays (log-probs out; advantages, old log-probs,
   * masks in) hold one value per scored token in that order. Only engines whose `supportsBranches`
   * is true take them.
   */
  branches?: SequenceBranch[];
}

/** One branch of a trunk-plus-branches sequence (ScoredSequence.branches). */
export interface SequenceBranch {
  /** Trunk tokens (from the start of its prompt) the branch attends to; its first token is at position `prefix`. */
  prefix: number;
  ids: number[];
  /** 1 for the branch's scored tokens, 0 for context; one per id. */
  policyTokens: number[];
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
  /** Micro-batches of this step taken from a step saved part-way (StepResumeOptions); absent or 0 when none. */
  resumedMicroBatches?: number;
}

/**
 * Where an engine whose training step can run for hours keeps it between micro-batches: a step that is
 * killed goes on from its last save when called again with the same file, batch and starting weights
 * (the PyTorch worker; the TypeScript engine's steps are short and ignore it).
 */
export interface StepResumeOptions {
  file: string;
  /** Time between saves (0: after every micro-batch). */
  everySeconds: number;
}

export interface PolicyEngine {
  readonly tokenizer: TextTokenizer;
  /**
   * Positions the model was made for (max_position_embeddings in its config.json): a prompt and its
   * response longer than this are beyond what it can read. Absent where the engine does not know (a server).
   */
  readonly contextLength?: number;
  generate(prompts: number[][], opts: GenerateOptions): Promise<Generation[]>;
  /** Whether logprobs and trainStep take sequences with `branches` (absent: they do not). */
  readonly supportsBranches?: boolean;
  logprobs(batch: ScoredSequence[], temperature?: number): Promise<number[][]>;
  /** One optimiser step on the whole batch (gradients accumulated over micro-batches). */
  trainStep(
    batch: TrainSequence[],
    objective: ObjectiveConfig,
    temperature?: number,
    lr?: number,
    resume?: StepResumeOptions,
  ): Promise<TrainStats>;
  save(dir: string): Promise<void>;
  /** Drops the KV caches kept for these `cacheKeys` (an episode ended). Engines without caches omit it. */
  releaseCache?(keys: readonly string[]): void;
  /** Prompt tokens run through the model so far, and those skipped because a kept cache held them. */
  prefillCounts?(): { prefilledTokens: number; reusedTokens: number };
  /** Engines whose calls report progress (the PyTorch worker: micro-batches done of the call's total); null stops it. */
  setProgressListener?(listener: ProgressListener | null): void;
  dispose(): void;
}

/** `resumed`: the call's first report, of work it took from a save (a train step saved part-way) instead of doing it. */
export type ProgressListener = (op: string, done: number, total: number, resumed?: boolean) => void;
