/**
 * What one request may ask of the engine. The engine pads a batch to its longest prompt, so a
 * request's work is prompts × (longest prompt + max_tokens) tokens; without a bound one request
 * (2000 one-token prompts, max_tokens 2000) kept the engine busy for minutes.
 *
 * Texts are checked by their UTF-8 length before they are tokenised: every token stands for at
 * most `longestTokenBytes` bytes, so a text of b bytes is at least ceil(b / longest) tokens, and a
 * text that cannot fit is refused without spending seconds (and gigabytes) tokenising it.
 */
import type { TextTokenizer } from '../policy/types.ts';
import { RequestError } from './protocol.ts';
import type { ServedEngine } from './queue.ts';

/** 64 prompts of 4096 tokens. */
export const DEFAULT_MAX_REQUEST_TOKENS = 262_144;

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

/**
 * Before tokenising: refuses a text that cannot fit in the context with `maxTokens`, naming it
 * by `param`. Returns the fewest tokens it can encode to.
 */
export function checkTextFits(served: ServedEngine, text: string, maxTokens: number, param: string): number {
  if (maxTokens >= served.maxModelLen) {
    throw new RequestError(
      400,
      `max_tokens (${maxTokens}) leaves no room for a prompt in the model's context of ${served.maxModelLen} tokens`,
      'max_tokens',
    );
  }
  const bytes = Buffer.byteLength(text, 'utf8');
  const least = Math.ceil(bytes / longestTokenBytes(served.engine.tokenizer));
  if (least + maxTokens > served.maxModelLen) {
    throw new RequestError(
      400,
      `"${param}" is ${bytes} bytes, at least ${least} tokens (no token is longer than ${longestTokenBytes(served.engine.tokenizer)} bytes): ` +
        `with max_tokens (${maxTokens}) it cannot fit in the model's context of ${served.maxModelLen} tokens`,
      param,
    );
  }
  return least;
}

/** Token ids inside the vocabulary, and the prompt plus max_tokens inside the context. */
export function checkPrompt(served: ServedEngine, ids: number[], param: (j: number | null) => string, maxTokens: number): void {
  if (ids.length === 0) throw new RequestError(400, `"${param(null)}" encodes to no tokens`, param(null));
  const bad = ids.findIndex((id) => id >= served.vocabSize);
  if (bad >= 0)
    throw new RequestError(400, `"${param(bad)}": token id ${ids[bad]} is outside the vocabulary (size ${served.vocabSize})`, param(bad));
  if (ids.length + maxTokens > served.maxModelLen) {
    throw new RequestError(
      400,
      `prompt (${ids.length} tokens) plus max_tokens (${maxTokens}) exceeds the model's context of ${served.maxModelLen} tokens`,
      'max_tokens',
    );
  }
}
