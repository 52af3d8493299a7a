/**
 * The request bodies `empo2 serve` checks itself (/v1/completions; chat completions and responses are read
 * by the OpenAI protocol layer, ../openai/), checked with zod so that a bad request is answered
 * with an OpenAI-style error that names the offending field (`messages[1].role`, `prompt[0][3]`).
 *
 * Unknown fields are refused rather than ignored: a misspelt `allowed_texts` silently ignored
 * would give unconstrained samples that look valid. Standard OpenAI fields this server does not
 * implement are accepted only at their neutral values, so generic clients that always send them
 * (penalties 0, best_of 1...) still work.
 */
import type { IncomingMessage } from 'node:http';
import { z } from 'zod';
import { RequestError } from '../openai/errors.ts';

export { RequestError, errorBody, fieldPath, parseRequest, type OpenAIErrorBody } from '../openai/errors.ts';

const tokenId = z
  .number({ error: 'must be a token id (an integer)' })
  .int({ error: 'must be a token id (an integer)' })
  .min(0, { error: 'a token id cannot be negative' });
const tokenIds = z.array(tokenId).min(1, { error: 'a prompt needs at least one token' });
const stop = z
  .union([z.string(), z.array(z.string()).max(16)], { error: 'must be a string or an array of strings' })
  .nullable()
  .optional();
/** OpenAI's sampling fields as both servers here (serve, the training gateway) accept them. */
export const samplingFields = {
  model: z.string().optional(),
  temperature: z.number().min(0).max(2).nullable().optional(),
  top_p: z.number().gt(0).max(1).nullable().optional(),
  seed: z.number().int().nullable().optional(),
  stop,
};
const allowedList = z
  .array(z.string().min(1, { error: 'an allowed text cannot be empty' }))
  .min(1, { error: 'give at least one allowed text' });

/** Fields every generation request shares. */
const sampling = {
  ...samplingFields,
  n: z.literal(1, { error: 'only n = 1 is supported (send the prompt again, or several prompts, for more samples)' }).nullable().optional(),
  stream: z.literal(false, { error: 'streaming is not supported by empo2 serve' }).nullable().optional(),
  user: z.string().optional(),
  frequency_penalty: z.literal(0, { error: 'penalties are not supported (only 0)' }).nullable().optional(),
  presence_penalty: z.literal(0, { error: 'penalties are not supported (only 0)' }).nullable().optional(),
  logit_bias: z
    .record(z.string(), z.number())
    .refine((o) => Object.keys(o).length === 0, { error: 'logit_bias is not supported (only {})' })
    .nullable()
    .optional(),
  /** vLLM's option: also return `prompt_token_ids` (generated `token_ids` are always returned). */
  return_token_ids: z.boolean().nullable().optional(),
  /** vLLM's option: logprob tokens as "token_id:N" strings instead of text pieces. */
  return_tokens_as_token_ids: z.boolean().nullable().optional(),
};

export const CompletionRequestSchema = z.strictObject({
  ...sampling,
  prompt: z.union([z.string(), z.array(z.string()).min(1), tokenIds, z.array(tokenIds).min(1)], {
    error: 'must be a string, an array of strings, an array of token ids, or an array of token-id arrays',
  }),
  max_tokens: z.number().int().min(0).nullable().optional(),
  /** Only the sampled token's log-prob is computed; alternatives (top-k) are not. */
  logprobs: z
    .literal(0, { error: "only logprobs: 0 (the sampled token's log-prob) is supported; top alternatives are not computed" })
    .nullable()
    .optional(),
  echo: z.boolean().nullable().optional(),
  best_of: z.literal(1, { error: 'best_of is not supported (only 1)' }).nullable().optional(),
  suffix: z.null({ error: 'suffix is not supported' }).optional(),
  /** Constrained decoding: the only texts the response may be; one list for every prompt, or one per prompt (null: free). */
  allowed_texts: z
    .union([allowedList, z.array(allowedList.nullable()).min(1)], {
      error: 'must be an array of strings, or one array of strings (or null) per prompt',
    })
    .nullable()
    .optional(),
});
export type CompletionRequest = z.infer<typeof CompletionRequestSchema>;

/**
 * A request's JSON body, at most `limit` bytes (413 past it, before reading when Content-Length says
 * so); 400 when it is not JSON, and 415 without a JSON Content-Type where `o.jsonContentType` asks for one.
 */
export async function readJson(req: IncomingMessage, limit: number, o: { jsonContentType?: boolean } = {}): Promise<unknown> {
  if (o.jsonContentType && !/^application\/json\b/i.test(req.headers['content-type'] ?? ''))
    throw new RequestError(415, 'send the body as JSON (Content-Type: application/json)', null);
  if (Number(req.headers['content-length']) > limit) throw new RequestError(413, `request body over ${limit} bytes`, null);
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > limit) throw new RequestError(413, `request body over ${limit} bytes`, null);
    chunks.push(chunk as Buffer);
  }
  const text = Buffer.concat(chunks).toString('utf8');
  try {
    return JSON.parse(text);
  } catch (e) {
    throw new RequestError(400, `the request body is not valid JSON: ${(e as Error).message}`, null);
  }
}
