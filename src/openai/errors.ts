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
  return parseAt(schema, body, { at: [], server: o.server });
}

/** `value` (found at path `o.at` of the request) parsed with `schema`; a 400 names the first bad field by its full path. */
export function parseAt<T extends z.ZodType>(schema: T, value: unknown, o: { at: readonly PropertyKey[]; server?: string }): z.infer<T> {
  const result = schema.safeParse(value);
  if (result.success) return result.data;
  const issue = deepest(result.error.issues[0]);
  if (issue.code === 'unrecognized_keys') {
    const where = fieldPath([...o.at, ...issue.path, issue.keys[0]]);
    throw new RequestError(400, `unknown field "${where}" (${o.server ?? 'empo2 serve'} refuses fields it would otherwise ignore)`, where);
  }
  const where = fieldPath([...o.at, ...issue.path]);
  if (valueAt(value, issue.path) === undefined) throw new RequestError(400, `"${where}" is required`, where);
  throw new RequestError(400, `"${where}": ${issue.message}`, where || null);
}

/**
 * A union's failure told by the alternative that got furthest into the value (an array of parts whose
 * third part has a bad `type` is named `content[2].type`, not `content`), when one got past its top.
 */
function deepest(issue: z.core.$ZodIssue): z.core.$ZodIssue {
  if (issue.code !== 'invalid_union' || issue.errors.length === 0) return issue;
  const best = issue.errors.map((branch) => branch[0]).reduce((a, b) => (b && b.path.length > (a?.path.length ?? 0) ? b : a));
  if (!best || best.path.length === 0) return issue;
  return deepest({ ...best, path: [...issue.path, ...best.path] } as z.core.$ZodIssue);
}

function valueAt(body: unknown, path: readonly PropertyKey[]): unknown {
  let at: unknown = body;
  for (const key of path) {
    if (typeof at !== 'object' || at === null) return undefined;
    at = (at as Record<PropertyKey, unknown>)[key];
  }
  return at;
}
