/**
 * A Chat Completions call answered through a `TurnBackend` (../types.ts): the request read
 * (./protocol.ts), the turn sampled by the server, the result written as a `chat.completion` (the calls in
 * `message.tool_calls`, `finish_reason: "tool_calls"`) or as server-sent `chat.completion.chunk` events
 * (the role first, the content one token a chunk, each tool call as OpenAI streams it: its index, id and
 * name, then its arguments, then the finish reason, the usage when asked, `[DONE]`). Every answer carries
 * the policy version that sampled it, in `system_fingerprint` and the `x-empo2-policy-version` header.
 * Each choice also carries `token_ids`; with `return_token_ids`, `prompt_token_ids` are where vLLM's chat
 * completions put them (at the top of the answer, and of a stream's first chunk; test/support/
 * vllm-tools-0.32.0.json) and, as before, in the choice.
 */
import type { ServerResponse } from 'node:http';
import { randomUUID } from 'node:crypto';
import type { Generation, TextTokenizer } from '../../policy/types.ts';
import { RequestError } from '../errors.ts';
import type { TurnBackend, TurnResult } from '../types.ts';
import { readChatRequest, type ChatAnswerOptions } from './protocol.ts';

/** The header that says which policy version (training iteration's weights) sampled the answer. */
export const POLICY_VERSION_HEADER = 'x-empo2-policy-version';

/** `system_fingerprint` of an answer sampled by `policyVersion`. */
export function policyFingerprint(policyVersion: number): string {
  return `empo2-policy-${policyVersion}`;
}

/** Answers one `POST /v1/chat/completions` with body `body` through `backend`. */
export async function serveChatCompletion(backend: TurnBackend, body: unknown, res: ServerResponse): Promise<void> {
  const { request, answer } = readChatRequest(body, backend.serverName);
  if (backend.checkModel) backend.checkModel(answer.model);
  else if (answer.model !== undefined && answer.model !== backend.modelName)
    throw new RequestError(
      404,
      `model "${answer.model}" is not served by ${backend.serverName} (it serves "${backend.modelName}")`,
      'model',
      'not_found_error',
      'model_not_found',
    );
  // The name the client gave, once the backend serves it (a LoRA adapter's on empo2 serve).
  const model = answer.model ?? backend.modelName;
  const abort = new AbortController();
  const gone = () => {
    if (!res.writableFinished) abort.abort(new RequestError(499, 'the client closed the connection', null));
  };
  res.once('close', gone);
  let result: TurnResult;
  try {
    result = await backend.turn(request, { signal: abort.signal });
  } finally {
    res.off('close', gone);
  }
  const tok = backend.tokenizer();
  const id = `chatcmpl-${randomUUID()}`;
  if (answer.stream) return streamChat(res, tok, { id, model, result, answer });
  const message: Record<string, unknown> = { role: 'assistant', content: result.content };
  if (result.toolCalls.length > 0) message.tool_calls = result.toolCalls.map((c) => wireCall(c));
  const g = result.generation;
  const text = JSON.stringify({
    id,
    object: 'chat.completion',
    created: Math.floor(Date.now() / 1000),
    model,
    system_fingerprint: policyFingerprint(result.policyVersion),
    choices: [
      {
        index: 0,
        message,
        logprobs: answer.logprobs ? { content: tokenLogprobs(tok, g, { asIds: answer.tokensAsIds }) } : null,
        finish_reason: result.finishReason,
        token_ids: g.tokens,
        ...(answer.returnTokenIds ? { prompt_token_ids: result.promptIds } : {}),
      },
    ],
    usage: usage(result.promptIds.length, g.tokens.length),
    ...(answer.returnTokenIds ? { prompt_token_ids: result.promptIds } : {}),
  });
  if (res.destroyed) return;
  res.writeHead(200, {
    'Content-Type': 'application/json',
    'Content-Length': Buffer.byteLength(text),
    [POLICY_VERSION_HEADER]: String(result.policyVersion),
  });
  res.end(text);
}

function wireCall(c: { id: string; name: string; arguments: string }) {
  return { id: c.id, type: 'function' as const, function: { name: c.name, arguments: c.arguments } };
}

/** Each sampled token's log-prob as OpenAI writes them; `o.asIds` labels tokens "token_id:N" (vLLM's option). */
export function tokenLogprobs(tok: TextTokenizer, g: Generation, o: { asIds?: boolean } = {}) {
  const bytesOf = (tok as { tokenBytes?: (id: number) => Uint8Array }).tokenBytes?.bind(tok);
  return g.tokens.map((id, k) => ({
    token: o.asIds ? `token_id:${id}` : tok.decode([id]),
    logprob: g.logprobs[k],
    bytes: [...(bytesOf ? bytesOf(id) : new TextEncoder().encode(tok.decode([id])))],
    top_logprobs: [],
  }));
}

export function usage(promptTokens: number, completionTokens: number) {
  return { prompt_tokens: promptTokens, completion_tokens: completionTokens, total_tokens: promptTokens + completionTokens };
}

/** The text each token adds to `content`, in order (tokens past its end add nothing). */
export function contentPieces(tok: TextTokenizer, ids: readonly number[], content: string): string[] {
  const stream = (tok as { streamDecoder?: () => { push(id: number): string } }).streamDecoder?.();
  let text = '';
  let sent = 0;
  return ids.map((id) => {
    text += stream ? stream.push(id) : tok.decode([id]);
    const upTo = Math.min(text.length, content.length);
    const piece = content.slice(sent, upTo);
    sent = Math.max(sent, upTo);
    return piece;
  });
}

/**
 * The answer as server-sent events. The turn's tokens are all there when this runs (the gateway samples
 * its calls in batches), so the chunks are written at once: a content chunk per token of the content, then
 * for each tool call a chunk with its index, id, type and name, and one with its arguments; the tokens of
 * the calls ride on the first call's chunk (`token_ids`, and their log-probs where asked).
 */
function streamChat(
  res: ServerResponse,
  tok: TextTokenizer,
  a: { id: string; model: string; result: TurnResult; answer: ChatAnswerOptions },
): void {
  const { result } = a;
  const g = result.generation;
  const created = Math.floor(Date.now() / 1000);
  const system_fingerprint = policyFingerprint(result.policyVersion);
  res.writeHead(200, {
    'Content-Type': 'text/event-stream',
    'Cache-Control': 'no-cache',
    Connection: 'keep-alive',
    [POLICY_VERSION_HEADER]: String(result.policyVersion),
  });
  const send = (choices: unknown[], extra: Record<string, unknown> = {}) =>
    res.write(
      `data: ${JSON.stringify({ id: a.id, object: 'chat.completion.chunk', created, model: a.model, system_fingerprint, choices, ...extra })}\n\n`,
    );
  const logprobsOf = (from: number, to: number) =>
    a.answer.logprobs
      ? {
          content: g.tokens.slice(from, to).map((id, k) => ({
            token: a.answer.tokensAsIds ? `token_id:${id}` : tok.decode([id]),
            logprob: g.logprobs[from + k],
            bytes: [],
            top_logprobs: [],
          })),
        }
      : null;
  const content = result.content ?? '';
  const text = contentPieces(tok, g.tokens, content);
  // With tool calls, the content's tokens are those up to the last one that adds to it; the rest are the calls'.
  let contentTokens = g.tokens.length;
  if (result.toolCalls.length > 0) while (contentTokens > 0 && text[contentTokens - 1] === '') contentTokens--;
  send(
    [{ index: 0, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null }],
    a.answer.returnTokenIds ? { prompt_token_ids: result.promptIds } : {},
  );
  for (let k = 0; k < contentTokens; k++)
    send([{ index: 0, delta: { content: text[k] }, logprobs: logprobsOf(k, k + 1), finish_reason: null, token_ids: [g.tokens[k]] }]);
  result.toolCalls.forEach((c, i) => {
    const head = { index: i, id: c.id, type: 'function', function: { name: c.name, arguments: '' } };
    const rest = i === 0 ? { token_ids: g.tokens.slice(contentTokens) } : {};
    send([
      {
        index: 0,
        delta: { tool_calls: [head] },
        logprobs: i === 0 ? logprobsOf(contentTokens, g.tokens.length) : null,
        finish_reason: null,
        ...rest,
      },
    ]);
    send([{ index: 0, delta: { tool_calls: [{ index: i, function: { arguments: c.arguments } }] }, logprobs: null, finish_reason: null }]);
  });
  send([{ index: 0, delta: {}, logprobs: null, finish_reason: result.finishReason }]);
  if (a.answer.includeUsage) send([], { usage: usage(result.promptIds.length, g.tokens.length) });
  res.end('data: [DONE]\n\n');
}
