/**
 * The errors the OpenAI protocol layer answers with, in OpenAI's shape (`{error: {message, type, param,
 * code}}`), and the zod check every endpoint's request goes through: a bad request is answered with a
 * 400 that names the offending field (`messages[1].role`, `input[2].call_id`). Unknown fields are
 * refused rather than ignored: a misspelt field silently ignored gives answers that look valid.
 */
import { z } from 'zod';

export class RequestError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly param: string | null,
    readonly type: string = status === 404 ? 'not_found_error' : 'invalid_request_error',
    /** OpenAI's error code string; vLLM's routes put the HTTP status here (../serve/lora.ts). */
    readonly code: string | number | null = null,
  ) {
    super(message);
  }
}

export interface OpenAIErrorBody {
  error: { message: string; type: string; param: string | null; code: string | number | null };
}

export function errorBody(e: RequestError): OpenAIErrorBody {
  return { error: { message: e.message, type: e.type, param: e.param, code: e.code } };
}

/** `messages[1].role` from zod's path array. */
export function fieldPath(path: readonly PropertyKey[]): string {
  let out = '';
  for (const p of path) out += typeof p === 'number' ? `[${p}]` : out ? `.${String(p)}` : String(p);
  return out;
}

/** Parses with the schema, or throws a 400 naming the first bad field; `o.server` names who refuses an unknown one. */
export function parseRequest<T extends z.ZodType>(schema: T, body: unknown, o: { server?: string } = {}): z.infer<T> {
  if (typeof body !== 'object' || body === null || Array.isArray(body))
    throw new RequestError(400, 'the request body must be a JSON object', null);
  const result = schema.safeParse(body);
  if (result.success) return result.data;
  const issue = result.error.issues[0];
  if (issue.code === 'unrecognized_keys') {
    const where = fieldPath([...issue.path, issue.keys[0]]);
    throw new RequestError(400, `unknown field "${where}" (${o.server ?? 'empo2 serve'} refuses fields it would otherwise ignore)`, where);
  }
  const where = fieldPath(issue.path);
  if (valueAt(body, issue.path) === undefined) throw new RequestError(400, `"${where}" is required`, where);
  throw new RequestError(400, `"${where}": ${issue.message}`, where || null);
}

function valueAt(body: unknown, path: readonly PropertyKey[]): unknown {
  let at: unknown = body;
  for (const key of path) {
    if (typeof at !== 'object' || at === null) return undefined;
    at = (at as Record<PropertyKey, unknown>)[key];
  }
  return at;
}
