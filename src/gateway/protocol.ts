/**
 * The request bodies the training gateway accepts: OpenAI's chat and text completions, as the
 * official clients send them, checked with zod so that a bad request is answered with an OpenAI-style
 * error naming the field (../serve/protocol.ts does the same for `empo2 serve`).
 *
 * What differs from `empo2 serve`, and why:
 * - `stream` is accepted (chat and text): the answer is sent as server-sent events once the call's
 *   tokens are sampled (calls are sampled in batches with the other episodes', so tokens are not
 *   sent as they are sampled; the chunk format is OpenAI's).
 * - `temperature`, `top_p` and `seed` are accepted and ignored: during training the trainer samples at
 *   `rollout.temperature` / `rollout.top_p` with its own seeds, since the update scores every action at
 *   that temperature (docs/AGENTS.md).
 * - Tool calls are refused with a clear error: a tool call is not a text action the policy's chat
 *   template renders the same way in every model, and the tips and the update work on text. An agent
 *   describes its tools in the prompt and parses the answer (docs/AGENTS.md).
 * - `empo2_state` (optional, a string): the state the memory keys on for this call (tips, novelty,
 *   GiGPO's anchor); default the last user message.
 * - `empo2_valid_actions` (optional, strings): the state's valid actions, for the records and the
 *   memory's query, without constraining the answer (`allowed_texts` constrains it, and stands for them
 *   when they are not given): an agent whose model answers in free text can still say what it could do.
 */
import { z } from 'zod';
import { RequestError, samplingFields } from '../serve/protocol.ts';

export { RequestError, errorBody, parseRequest, readJson } from '../serve/protocol.ts';

const TOOLS_REFUSED =
  'tool calls are not supported by the empo2 gateway: describe the tools in the prompt and parse the text answer (docs/AGENTS.md, "Tool calls")';

const zeroPenalty = z.literal(0, { error: 'penalties are not supported (only 0)' }).nullable().optional();

/** Fields both routes share. */
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

const textPart = z.strictObject({ type: z.literal('text', { error: 'only text content parts are supported' }), text: z.string() });
const message = z.strictObject({
  role: z.enum(['system', 'developer', 'user', 'assistant'], {
    error: `must be "system", "developer", "user" or "assistant" (a "tool" message means a tool call: ${TOOLS_REFUSED})`,
  }),
  content: z.union([z.string(), z.array(textPart)], { error: 'must be a string or an array of {type: "text", text} parts' }),
  name: z.string().optional(),
  tool_calls: z.array(z.unknown()).max(0, { error: TOOLS_REFUSED }).nullable().optional(),
});
export type GatewayMessage = z.infer<typeof message>;

export const GatewayChatSchema = z.strictObject({
  ...common,
  messages: z.array(message).min(1, { error: 'give at least one message' }).max(4096),
  max_tokens: z.number().int().min(1).nullable().optional(),
  max_completion_tokens: z.number().int().min(1).nullable().optional(),
  logprobs: z.boolean().nullable().optional(),
  top_logprobs: z.literal(0, { error: 'only top_logprobs: 0 is supported; top alternatives are not computed' }).nullable().optional(),
  response_format: z.strictObject({ type: z.literal('text', { error: 'only response_format {type: "text"} is supported' }) }).optional(),
  tools: z.array(z.unknown()).max(0, { error: TOOLS_REFUSED }).nullable().optional(),
  functions: z.array(z.unknown()).max(0, { error: TOOLS_REFUSED }).nullable().optional(),
  tool_choice: z.unknown().optional(),
  function_call: z.unknown().optional(),
  parallel_tool_calls: z.boolean().nullable().optional(),
});
export type GatewayChatRequest = z.infer<typeof GatewayChatSchema>;

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

/** A chat request asks for tools only with a non-empty list; `tool_choice` alone (some clients always send "auto") is not a tool call. */
export function refuseToolChoice(r: GatewayChatRequest): void {
  const choice = r.tool_choice ?? r.function_call;
  if (choice !== undefined && choice !== null && choice !== 'none' && choice !== 'auto')
    throw new RequestError(400, TOOLS_REFUSED, r.tool_choice !== undefined ? 'tool_choice' : 'function_call');
}

/** The text of a message, its parts joined. */
export function messageText(m: GatewayMessage): string {
  return typeof m.content === 'string' ? m.content : m.content.map((p) => p.text).join('');
}

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
