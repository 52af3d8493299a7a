/**
 * A sampled turn written back as OpenAI's Responses API answers it (vLLM's
 * `entrypoints/openai/responses/serving.py`): a `response` object whose `output` holds a `message` item
 * (the text, as one `output_text` part) and a `function_call` item per tool call, with `usage`, and
 * `status` "incomplete" (`incomplete_details.reason` "max_output_tokens") when the token cap cut it; or,
 * streamed, the server-sent events the SDKs read, each with its `sequence_number`: response.created,
 * response.in_progress, per item response.output_item.added, (text) response.content_part.added,
 * response.output_text.delta per token, response.output_text.done, response.content_part.done, (call)
 * response.function_call_arguments.delta and .done, response.output_item.done, and last
 * response.completed (or response.incomplete). The turn is sampled before the first event is written
 * (the gateway samples calls in batches), so the events carry the finished answer piece by piece.
 *
 * Which weights answered: the `x-empo2-policy-version` header and `metadata.empo2_policy_version` (a
 * Response has no `system_fingerprint`; metadata is the field the SDKs pass through untouched).
 */
import type { ServerResponse } from 'node:http';
import { randomBytes } from 'node:crypto';
import type { TextTokenizer } from '../../policy/types.ts';
import { errorBody, RequestError } from '../errors.ts';
import type { TurnBackend, TurnMessage, TurnResult } from '../types.ts';
import { contentPieces, POLICY_VERSION_HEADER, tokenLogprobs } from '../chat_completion/serving.ts';
import { includable, readResponsesRequest, type ResponsesCall } from './protocol.ts';
import type { OutputItem, ResponseObject, ResponseStore, StoredItem, TextLogprob } from './store.ts';

const newId = (prefix: string) => `${prefix}_${randomBytes(16).toString('hex')}`;

/**
 * `result` as the Response object of `call`, its text's log-probs in (each token of the text as sampled:
 * Chat Completions' `logprobs.content` entries); `withLogprobs` leaves them out where `include` does not ask.
 */
export function responseObject(o: {
  id: string;
  call: ResponsesCall;
  result: TurnResult;
  model: string;
  createdAt: number;
  tokenizer: TextTokenizer;
}): ResponseObject {
  const { call, result } = o;
  const r = call.request;
  const cut = result.finishReason === 'length';
  const output: OutputItem[] = [];
  if (result.content !== null && (result.content !== '' || result.toolCalls.length === 0))
    output.push({
      type: 'message',
      id: newId('msg'),
      status: cut ? 'incomplete' : 'completed',
      role: 'assistant',
      content: [{ type: 'output_text', text: result.content, annotations: [], logprobs: textLogprobs(o.tokenizer, result) }],
    });
  for (const c of result.toolCalls)
    output.push({ type: 'function_call', id: newId('fc'), call_id: c.id, name: c.name, arguments: c.arguments, status: 'completed' });
  const outputTokens = result.generation.tokens.length;
  return {
    id: o.id,
    object: 'response',
    created_at: o.createdAt,
    status: cut ? 'incomplete' : 'completed',
    error: null,
    incomplete_details: cut ? { reason: 'max_output_tokens' } : null,
    instructions: r.instructions ?? null,
    max_output_tokens: r.max_output_tokens ?? null,
    model: o.model,
    output,
    parallel_tool_calls: call.turn.parallelToolCalls,
    previous_response_id: r.previous_response_id ?? null,
    reasoning: { effort: null, summary: null },
    store: call.store,
    temperature: r.temperature ?? null,
    text: { format: r.text?.format ?? { type: 'text' } },
    tool_choice: r.tool_choice ?? 'auto',
    tools: r.tools ?? [],
    top_p: r.top_p ?? null,
    truncation: r.truncation ?? 'disabled',
    user: r.user ?? null,
    metadata: { ...r.metadata, empo2_policy_version: String(result.policyVersion) },
    usage: {
      input_tokens: result.promptIds.length,
      input_tokens_details: { cached_tokens: 0 },
      output_tokens: outputTokens,
      output_tokens_details: { reasoning_tokens: 0 },
      total_tokens: result.promptIds.length + outputTokens,
    },
  };
}

/**
 * The tokens of the answer's text: all of them when it made no tool call (the end-of-turn token too, as
 * Chat Completions counts it); with calls, those up to the last one that adds to the text (the rest are the
 * calls'). Their log-probs, as sampled, are the text's `logprobs`.
 */
function textTokenCount(tok: TextTokenizer, result: TurnResult): number {
  const g = result.generation;
  let n = g.tokens.length;
  if (result.toolCalls.length > 0) {
    const pieces = contentPieces(tok, g.tokens, result.content ?? '');
    while (n > 0 && pieces[n - 1] === '') n--;
  }
  return n;
}

function textLogprobs(tok: TextTokenizer, result: TurnResult): TextLogprob[] {
  const g = result.generation;
  const n = textTokenCount(tok, result);
  return tokenLogprobs(tok, { ...g, tokens: g.tokens.slice(0, n), logprobs: g.logprobs.slice(0, n) }) as TextLogprob[];
}

/** `response` with its text's log-probs (`include: ["message.output_text.logprobs"]`) or without (`[]`, as OpenAI answers). */
export function withLogprobs(response: ResponseObject, logprobs: boolean): ResponseObject {
  if (logprobs) return response;
  const output = response.output.map((item) =>
    item.type === 'message' ? { ...item, content: item.content.map((part) => ({ ...part, logprobs: [] as TextLogprob[] })) } : item,
  );
  return { ...response, output };
}

/**
 * The text each token adds to `content`, as deltas: `from`-`to` are the tokens of each (a token that adds
 * nothing, a byte of a character or the end of the turn, goes with the next delta, or the last); empty
 * pieces are left out, and together they are `content` exactly.
 */
export function textDeltas(tok: TextTokenizer, ids: readonly number[], content: string): { delta: string; from: number; to: number }[] {
  const stream = (tok as { streamDecoder?: () => { push(id: number): string } }).streamDecoder?.();
  let text = '';
  let sent = 0;
  let from = 0;
  const out: { delta: string; from: number; to: number }[] = [];
  ids.forEach((id, k) => {
    text += stream ? stream.push(id) : tok.decode([id]);
    const upTo = Math.min(text.length, content.length);
    if (upTo > sent) {
      out.push({ delta: content.slice(sent, upTo), from, to: k + 1 });
      from = k + 1;
    }
    sent = Math.max(sent, upTo);
  });
  // The content is not the decoded text's prefix (a parser trimmed it): what is left goes last.
  if (sent < content.length) out.push({ delta: content.slice(sent), from, to: ids.length });
  else if (out.length > 0) out[out.length - 1].to = ids.length;
  return out;
}

/** A log-prob as the stream's text events carry it (`ResponseTextDeltaEvent.Logprob`: no bytes). */
const eventLogprob = (l: TextLogprob) => ({ token: l.token, logprob: l.logprob, top_logprobs: [] });

/** The server-sent events of `response`, in the order OpenAI sends them, numbered from 0. */
export function responseEvents(response: ResponseObject, o: { tokenizer: TextTokenizer; result: TurnResult }): Record<string, unknown>[] {
  const events: Record<string, unknown>[] = [];
  const emit = (type: string, body: Record<string, unknown>) => events.push({ type, sequence_number: events.length, ...body });
  const pending = { ...response, status: 'in_progress', incomplete_details: null, output: [], usage: null };
  emit('response.created', { response: pending });
  emit('response.in_progress', { response: pending });
  response.output.forEach((item, output_index) => {
    const item_id = item.id;
    if (item.type === 'message') {
      emit('response.output_item.added', { output_index, item: { ...item, status: 'in_progress', content: [] } });
      const part = item.content[0];
      const content_index = 0;
      emit('response.content_part.added', { item_id, output_index, content_index, part: { ...part, text: '', logprobs: [] } });
      const ids = o.result.generation.tokens.slice(0, textTokenCount(o.tokenizer, o.result));
      for (const { delta, from, to } of textDeltas(o.tokenizer, ids, part.text))
        emit('response.output_text.delta', {
          item_id,
          output_index,
          content_index,
          delta,
          logprobs: part.logprobs.slice(from, to).map(eventLogprob),
        });
      emit('response.output_text.done', {
        item_id,
        output_index,
        content_index,
        text: part.text,
        logprobs: part.logprobs.map(eventLogprob),
      });
      emit('response.content_part.done', { item_id, output_index, content_index, part });
    } else {
      emit('response.output_item.added', { output_index, item: { ...item, status: 'in_progress', arguments: '' } });
      emit('response.function_call_arguments.delta', { item_id, output_index, delta: item.arguments });
      emit('response.function_call_arguments.done', { item_id, output_index, name: item.name, arguments: item.arguments });
    }
    emit('response.output_item.done', { output_index, item });
  });
  emit(response.status === 'incomplete' ? 'response.incomplete' : 'response.completed', { response });
  return events;
}

/** What `previous_response_id` and `item_reference` find of `response` later. */
function stored(call: ResponsesCall, response: ResponseObject, result: TurnResult) {
  const items: StoredItem[] = response.output.map((item) =>
    item.type === 'message'
      ? { type: 'message', id: item.id, role: 'assistant', content: item.content[0].text }
      : { type: 'function_call', id: item.id, call_id: item.call_id, name: item.name, arguments: item.arguments },
  );
  const answer: TurnMessage = { role: 'assistant', content: result.content, toolCalls: result.toolCalls };
  return { id: response.id, response, conversation: [...call.conversation, answer], items };
}

/** The query parameters `GET /v1/responses/{id}` takes (the `openai` client writes `include` as `include[]`). */
const RETRIEVE_QUERY = new Set(['include', 'include[]', 'stream', 'starting_after', 'include_obfuscation']);

/**
 * `GET /v1/responses/{id}` (OpenAI's "retrieve a response"): the Response object a `POST /v1/responses`
 * of the same store answered (an episode's own, in the gateway), as JSON. A response not in the store (never
 * made, made with `store: false`, another episode's, or pushed out by newer ones) is a 404 in OpenAI's shape
 * (vLLM's words). `stream=true` (replaying a response's events) is refused; `include_obfuscation` and
 * `starting_after`, which only shape a stream, are ignored; `include` is read as on creation (its log-probs
 * are there whether or not the call that made it asked for them).
 */
export function retrieveResponse(o: { store: ResponseStore; id: string; query: URLSearchParams; server: string }): ResponseObject {
  for (const key of o.query.keys())
    if (!RETRIEVE_QUERY.has(key))
      throw new RequestError(
        400,
        `unknown query parameter "${key}" (${o.server} takes include, stream, starting_after and include_obfuscation)`,
        key,
      );
  const include = [...o.query.getAll('include'), ...o.query.getAll('include[]')];
  include.forEach((value, i) => {
    const ok = includable.safeParse(value);
    if (!ok.success) throw new RequestError(400, `"include[${i}]": ${ok.error.issues[0].message}`, `include[${i}]`);
  });
  const stream = o.query.get('stream');
  if (stream !== null && stream !== 'false')
    throw new RequestError(
      400,
      `streaming a stored response again is not supported by ${o.server}: retrieve it without "stream"`,
      'stream',
    );
  let id = o.id;
  try {
    id = decodeURIComponent(o.id);
  } catch {
    // not percent-encoded text: looked up as it is (and not found)
  }
  const stored = o.store.response(id);
  if (!stored)
    throw new RequestError(
      404,
      `Response with id '${id}' not found. (${o.server} keeps the last ${o.store.capacity} stored responses of ${o.store.scope}, for it alone)`,
      'response_id',
      'invalid_request_error',
    );
  return withLogprobs(stored.response, include.includes('message.output_text.logprobs'));
}

/** Answers `GET /v1/responses/{id}` on `res` (`id` as the path has it; errors are thrown, for the server to answer). */
export function answerRetrieve(o: { store: ResponseStore; id: string; query: URLSearchParams; server: string; res: ServerResponse }): void {
  const response = retrieveResponse(o);
  const text = JSON.stringify(response);
  o.res.writeHead(200, {
    'Content-Type': 'application/json',
    'Content-Length': Buffer.byteLength(text),
    [POLICY_VERSION_HEADER]: String(response.metadata.empo2_policy_version),
  });
  o.res.end(text);
}

/**
 * Answers one `POST /v1/responses`: `body` read against the episode's `store`, sampled by `backend`
 * (aborted with `signal`), the answer kept in `store` (unless `store: false`) and written to `res`, as
 * JSON or as events. Throws RequestError for the client before anything is written.
 */
export async function answerResponses(o: {
  backend: TurnBackend;
  store: ResponseStore;
  body: unknown;
  res: ServerResponse;
  signal: AbortSignal;
}): Promise<ResponseObject> {
  const { backend } = o;
  const call = readResponsesRequest(o.body, { store: o.store, server: backend.serverName });
  if (backend.checkModel) backend.checkModel(call.model);
  else if (call.model !== undefined && call.model !== backend.modelName)
    throw new RequestError(
      404,
      `model "${call.model}" is not served here (${backend.serverName} serves "${backend.modelName}")`,
      'model',
      'not_found_error',
      'model_not_found',
    );
  const result = await backend.turn(call.turn, { signal: o.signal });
  const full = responseObject({
    id: newId('resp'),
    call,
    result,
    model: call.model ?? backend.modelName,
    createdAt: Math.floor(Date.now() / 1000),
    tokenizer: backend.tokenizer(),
  });
  // Kept with its log-probs, so that a retrieval may ask for them whether or not this call did.
  if (call.store) o.store.put(stored(call, full, result));
  const response = withLogprobs(full, call.logprobs);
  const version = String(result.policyVersion);
  if (!call.stream) {
    const text = JSON.stringify(response);
    o.res.writeHead(200, {
      'Content-Type': 'application/json',
      'Content-Length': Buffer.byteLength(text),
      [POLICY_VERSION_HEADER]: version,
    });
    o.res.end(text);
    return response;
  }
  o.res.writeHead(200, {
    'Content-Type': 'text/event-stream',
    'Cache-Control': 'no-cache',
    Connection: 'keep-alive',
    [POLICY_VERSION_HEADER]: version,
  });
  for (const e of responseEvents(response, { tokenizer: backend.tokenizer(), result }))
    o.res.write(`event: ${String(e.type)}\ndata: ${JSON.stringify(e)}\n\n`);
  o.res.end();
  return response;
}

/** An error as OpenAI's servers answer it: JSON before the answer started, an `error` event after. */
export function sendResponsesError(res: ServerResponse, e: RequestError): void {
  if (res.headersSent) {
    if (!res.writableEnded)
      res.end(`event: error\ndata: ${JSON.stringify({ type: 'error', message: e.message, code: e.code, param: e.param })}\n\n`);
    return;
  }
  if (res.destroyed) return;
  const text = JSON.stringify(errorBody(e));
  res.writeHead(e.status, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(text) });
  res.end(text);
}
