/**
 * What one request may ask of the engine. The engine pads a batch to its longest prompt, so a
 * request's work is prompts × (longest prompt + max_tokens) tokens; without a bound one request
 * (2000 one-token prompts, max_tokens 2000) kept the engine busy for minutes.
 *
 * Texts are checked by their UTF-8 length before they are tokenised: every token stands for at
 * most `longestTokenBytes` bytes, so a text of b bytes is at least ceil(b / longest) tokens, and a
 * text that cannot fit is refused without spending seconds (and gigabytes) tokenising it.
 *
 * How many items a request holds (prompts, messages, allowed texts) is checked on the parsed body
 * before anything looks at the items: validating two million prompts blocked the server for
 * seconds, and spreading them into Math.max overflowed the stack.
 */
import type { TextTokenizer } from '../policy/types.ts';
import { RequestError } from './protocol.ts';
import type { ServedEngine } from './queue.ts';

/** 64 prompts of 4096 tokens. */
export const DEFAULT_MAX_REQUEST_TOKENS = 262_144;

/** Prompts in one completions request. */
export const MAX_PROMPTS = 4096;
/** Messages in one chat request, and text parts over all its messages. */
export const MAX_MESSAGES = 4096;
/**
 * Allowed texts in one request (a list shared by every prompt counts once), and their UTF-8 bytes.
 * Generous: a batch of 64 ScienceWorld states offers tens of thousands of valid actions.
 */
export const MAX_ALLOWED_TEXTS = 262_144;
export const MAX_ALLOWED_TEXT_BYTES = 8 << 20;

const longestByTokenizer = new WeakMap<TextTokenizer, number>();

/** UTF-8 bytes of the longest token (special tokens included: they are matched in raw text). */
export function longestTokenBytes(tok: TextTokenizer): number {
  let longest = longestByTokenizer.get(tok);
  if (longest !== undefined) return longest;
  const bytesOf = (tok as { tokenBytes?: (id: number) => Uint8Array }).tokenBytes?.bind(tok);
  longest = 1;
  for (let id = 0; id < tok.vocabSize; id++) {
    try {
      // A token that is part of a character decodes to U+FFFD (3 bytes): an overestimate, which keeps the bound safe.
      longest = Math.max(longest, bytesOf ? bytesOf(id).length : Buffer.byteLength(tok.decode([id])));
    } catch {
      // An id the vocabulary skips.
    }
  }
  longestByTokenizer.set(tok, longest);
  return longest;
}

/** Refuses a request of `rows` prompts padded to `longest` tokens plus `maxTokens` over `limit`. */
export function checkWork(rows: number, longest: number, maxTokens: number, limit: number, param: string): void {
  const work = rows * (longest + maxTokens);
  if (work > limit) {
    throw new RequestError(
      400,
      `this request asks for ${rows} prompt${rows === 1 ? '' : 's'} × (${longest} prompt tokens + ${maxTokens} max_tokens) = ${work} tokens of work; ` +
        `the server takes at most ${limit} per request (empo2 serve --max-request-tokens): send fewer or shorter prompts, or a smaller max_tokens`,
      param,
    );
  }
}

/** What a prompt must fit in: the model's context (prompt plus max_tokens), and the tokenizer that measures it. */
export interface PromptLimit {
  tokenizer: TextTokenizer;
  /** The model's context in tokens (max_position_embeddings). */
  maxModelLen: number;
}

/** The limit a served engine's requests are checked against. */
export function servedLimit(served: ServedEngine): PromptLimit {
  return { tokenizer: served.engine.tokenizer, maxModelLen: served.maxModelLen };
}

/** Error code OpenAI's API gives a prompt too long for the model; clients (litellm, LangChain) recognise it. */
export const CONTEXT_LENGTH_EXCEEDED = 'context_length_exceeded';

/**
 * Before tokenising: refuses a text that cannot fit in the context with `maxTokens`, naming it
 * by `param`. Returns the fewest tokens it can encode to.
 */
export function checkTextFits(limit: PromptLimit, text: string, maxTokens: number, param: string): number {
  return checkBytesFit(limit, Buffer.byteLength(text, 'utf8'), maxTokens, param);
}

/** checkTextFits for texts of `bytes` UTF-8 bytes in all (several messages, measured one by one). */
export function checkBytesFit(limit: PromptLimit, bytes: number, maxTokens: number, param: string): number {
  if (maxTokens >= limit.maxModelLen) {
    throw new RequestError(
      400,
      `max_tokens (${maxTokens}) leaves no room for a prompt in the model's context of ${limit.maxModelLen} tokens`,
      'max_tokens',
      'invalid_request_error',
      CONTEXT_LENGTH_EXCEEDED,
    );
  }
  const longest = longestTokenBytes(limit.tokenizer);
  const least = Math.ceil(bytes / longest);
  if (least + maxTokens > limit.maxModelLen) {
    throw new RequestError(
      400,
      `"${param}" is ${bytes} bytes, at least ${least} tokens (no token is longer than ${longest} bytes): ` +
        `with max_tokens (${maxTokens}) it cannot fit in the model's context of ${limit.maxModelLen} tokens`,
      param,
      'invalid_request_error',
      CONTEXT_LENGTH_EXCEEDED,
    );
  }
  return least;
}

/**
 * After tokenising: refuses a prompt of `promptTokens` that, with `maxTokens` to generate, exceeds the
 * context, in the words of vLLM's and OpenAI's error (which clients match on to shorten their history).
 */
export function checkContext(promptTokens: number, maxTokens: number, maxModelLen: number, param: string): void {
  if (promptTokens + maxTokens <= maxModelLen) return;
  const where = param === 'messages' ? 'messages' : 'prompt';
  throw new RequestError(
    400,
    `This model's maximum context length is ${maxModelLen} tokens. However, you requested ${promptTokens + maxTokens} tokens ` +
      `(${promptTokens} in the ${where}, ${maxTokens} in the completion). Please reduce the length of the ${where} or completion.`,
    param,
    'invalid_request_error',
    CONTEXT_LENGTH_EXCEEDED,
  );
}

/** Token ids inside the vocabulary, and the prompt plus max_tokens inside the context. */
export function checkPrompt(served: ServedEngine, ids: number[], param: (j: number | null) => string, maxTokens: number): void {
  if (ids.length === 0) throw new RequestError(400, `"${param(null)}" encodes to no tokens`, param(null));
  const bad = ids.findIndex((id) => id >= served.vocabSize);
  if (bad >= 0)
    throw new RequestError(400, `"${param(bad)}": token id ${ids[bad]} is outside the vocabulary (size ${served.vocabSize})`, param(bad));
  checkContext(ids.length, maxTokens, served.maxModelLen, param(null));
}

function checkCount(n: number, limit: number, what: string, param: string, advice: string): void {
  if (n > limit)
    throw new RequestError(400, `"${param}" holds ${n} ${what}; empo2 serve takes at most ${limit} per request: ${advice}`, param);
}

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** The allowed texts a body holds, counted from the list lengths alone: one list, or one (or null) per prompt. */
function countAllowedTexts(a: unknown): void {
  if (!Array.isArray(a)) return;
  const advice = 'send fewer, or split the prompts over several requests';
  checkCount(a.length, MAX_ALLOWED_TEXTS, 'texts', 'allowed_texts', advice);
  if (!Array.isArray(a[0]) && a[0] !== null) return;
  let n = 0;
  for (const list of a) if (Array.isArray(list)) n += list.length;
  checkCount(n, MAX_ALLOWED_TEXTS, 'texts', 'allowed_texts', advice);
}

/**
 * A /v1/completions body's item counts and, for token-id prompts, its work from the prompts'
 * lengths, before the body is validated (which looks at every item). What is not the right shape
 * is left to validation.
 */
export function checkCompletionCounts(body: unknown, defaultMaxTokens: number, maxRequestTokens: number): void {
  if (!isRecord(body)) return;
  const m = body.max_tokens;
  // An invalid max_tokens is refused by validation; until then it counts as 0, the least work.
  const maxTokens = m === undefined || m === null ? defaultMaxTokens : Number.isInteger(m) && (m as number) >= 0 ? (m as number) : 0;
  const p = body.prompt;
  if (Array.isArray(p)) {
    if (typeof p[0] === 'number') {
      checkWork(1, p.length, maxTokens, maxRequestTokens, 'prompt'); // one prompt of token ids
    } else {
      checkCount(p.length, MAX_PROMPTS, 'prompts', 'prompt', 'send them as several requests');
      let longest = 0;
      for (const ids of p) if (Array.isArray(ids)) longest = Math.max(longest, ids.length);
      if (longest > 0) checkWork(p.length, longest, maxTokens, maxRequestTokens, 'prompt');
    }
  }
  countAllowedTexts(body.allowed_texts);
}

/** A /v1/chat/completions body's item counts, before it is validated. */
export function checkChatCounts(body: unknown): void {
  if (!isRecord(body)) return;
  const messages = body.messages;
  if (Array.isArray(messages)) {
    const advice = 'a conversation that long cannot fit in the context';
    checkCount(messages.length, MAX_MESSAGES, 'messages', 'messages', advice);
    let parts = 0;
    for (const msg of messages) if (isRecord(msg) && Array.isArray(msg.content)) parts += msg.content.length;
    checkCount(parts, MAX_MESSAGES, 'content parts', 'messages', advice);
  }
  countAllowedTexts(body.allowed_texts);
}

/**
 * Before tokenising allowed texts: their bytes within MAX_ALLOWED_TEXT_BYTES, and each short
 * enough to be generated within `maxTokens`. `lists` are the distinct lists of the request;
 * `param(i, j)` names text j of list i.
 */
export function checkAllowedTexts(
  served: ServedEngine,
  lists: readonly (readonly string[])[],
  maxTokens: number,
  param: (i: number, j: number) => string,
): void {
  const bytes = lists.map((list) => list.map((t) => Buffer.byteLength(t, 'utf8')));
  const total = bytes.reduce((n, list) => list.reduce((m, b) => m + b, n), 0);
  if (total > MAX_ALLOWED_TEXT_BYTES)
    throw new RequestError(
      400,
      `"allowed_texts" holds ${total} bytes of text; empo2 serve takes at most ${MAX_ALLOWED_TEXT_BYTES} per request: send fewer or shorter texts`,
      'allowed_texts',
    );
  const longest = longestTokenBytes(served.engine.tokenizer);
  bytes.forEach((list, i) =>
    list.forEach((b, j) => {
      const least = Math.ceil(b / longest);
      if (least > maxTokens)
        throw new RequestError(
          400,
          `"${param(i, j)}" is ${b} bytes, at least ${least} tokens (no token is longer than ${longest} bytes): it cannot be generated within max_tokens (${maxTokens})`,
          param(i, j),
        );
    }),
  );
}
