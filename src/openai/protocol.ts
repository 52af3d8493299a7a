/**
 * What every endpoint of the protocol layer and both servers share: OpenAI-style errors that name the
 * offending field, request parsing with zod, and the sampling fields every generation request takes.
 * (Moved down from ../serve/protocol.ts, which re-exports them, so that the gateway and `empo2 serve`
 * answer through one layer.)
 */
import { z } from 'zod';

export class RequestError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly param: string | null,
    readonly type: string = status === 404 ? 'not_found_error' : 'invalid_request_error',
    /** OpenAI's error code string; vLLM's routes put the HTTP status here (./lora.ts). */
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
/** `messages[1].role` from zod's path array. */
export function fieldPath(path: readonly PropertyKey[]): string {
  let out = '';
  for (const p of path) out += typeof p === 'number' ? `[${p}]` : out ? `.${String(p)}` : String(p);
  return out;
}

/** Parses with the schema, or throws a 400 naming the first bad field (`serverName`: who refuses an unknown one). */
export function parseRequest<T extends z.ZodType>(schema: T, body: unknown, serverName = 'empo2 serve'): z.infer<T> {
  if (typeof body !== 'object' || body === null || Array.isArray(body))
    throw new RequestError(400, 'the request body must be a JSON object', null);
  const result = schema.safeParse(body);
  if (result.success) return result.data;
  const issue = result.error.issues[0];
  if (issue.code === 'unrecognized_keys') {
    const where = fieldPath([...issue.path, issue.keys[0]]);
    throw new RequestError(400, `unknown field "${where}" (${serverName} refuses fields it would otherwise ignore)`, where);
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
