/**
 * The request bodies the training gateway accepts besides chat (which the protocol layer reads:
 * ../openai/chat_completion/protocol.ts): text completions and the agent's reward, checked with zod so
 * that a bad request is answered with an OpenAI-style error naming the field.
 *
 * What differs from `empo2 serve`, and why:
 * - `stream` is accepted: the answer is sent as server-sent events once the call's tokens are sampled
 *   (calls are sampled in batches with the other episodes', so tokens are not sent as they are sampled;
 *   the chunk format is OpenAI's).
 * - `temperature`, `top_p` and `seed` are accepted and ignored: during training the trainer samples at
 *   `rollout.temperature` / `rollout.top_p` with its own seeds, since the update scores every action at
 *   that temperature (docs/AGENTS.md).
 * - `empo2_state` (optional, a string): the state the memory keys on for this call (tips, novelty,
 *   GiGPO's anchor); default the last user message.
 * - `empo2_valid_actions` (optional, strings): the state's valid actions, for the records and the
 *   memory's query, without constraining the answer (`allowed_texts` constrains it, and stands for them
 *   when they are not given): an agent whose model answers in free text can still say what it could do.
 */
import { z } from 'zod';
import { RequestError, samplingFields } from '../serve/protocol.ts';

export { RequestError, errorBody, parseRequest, readJson } from '../serve/protocol.ts';

const zeroPenalty = z.literal(0, { error: 'penalties are not supported (only 0)' }).nullable().optional();

/** Fields of a text completion (chat's are the protocol layer's). */
const common = {
  ...samplingFields,
  n: z.literal(1, { error: 'only n = 1 is supported: each call is one step of the episode' }).nullable().optional(),
  stream: z.boolean().nullable().optional(),
  stream_options: z.strictObject({ include_usage: z.boolean().optional() }).nullable().optional(),
  user: z.string().optional(),
  frequency_penalty: zeroPenalty,
  presence_penalty: zeroPenalty,
  logit_bias: z
    .record(z.string(), z.number())
    .refine((o) => Object.keys(o).length === 0, { error: 'logit_bias is not supported (only {})' })
    .nullable()
    .optional(),
  return_token_ids: z.boolean().nullable().optional(),
  empo2_state: z.string().optional(),
  empo2_valid_actions: z.array(z.string()).max(100_000).nullable().optional(),
  /** Constrained decoding, as `empo2 serve` offers it: the only texts the answer may be. */
  allowed_texts: z.array(z.string().min(1)).min(1).nullable().optional(),
};

export const GatewayCompletionSchema = z.strictObject({
  ...common,
  prompt: z.string({ error: 'must be a string (one prompt: each call is one step of the episode)' }),
  max_tokens: z.number().int().min(1).nullable().optional(),
  logprobs: z.literal(0, { error: "only logprobs: 0 (the sampled token's log-prob) is supported" }).nullable().optional(),
  echo: z.literal(false, { error: 'echo is not supported by the gateway' }).nullable().optional(),
  best_of: z.literal(1, { error: 'best_of is not supported (only 1)' }).nullable().optional(),
  suffix: z.null({ error: 'suffix is not supported' }).optional(),
});
export type GatewayCompletionRequest = z.infer<typeof GatewayCompletionSchema>;

/** Any number, an infinity too (JSON's 1e999 reads as one): ./outcome.ts names a value out of range, so that the agent is told it. */
const reported = z.custom<number>((v) => typeof v === 'number', { error: 'must be a number' });

/** What the agent reports at the end of an episode, by POST {baseURL}/empo2/reward (ranges: ./outcome.ts). */
export const RewardReportSchema = z.strictObject({
  reward: reported.optional(),
  score: reported.optional(),
  steps: z.array(z.strictObject({ reward: reported, score: reported })).optional(),
  final_observation: z.string().optional(),
  description: z.string().optional(),
});
export type RewardReport = z.infer<typeof RewardReportSchema>;
