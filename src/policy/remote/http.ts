/**
 * JSON over HTTP for the remote engine: a time limit per attempt, and retries with exponential
 * backoff where trying again can help (connection failures, time-outs, 5xx, 429) but never on
 * other 4xx answers, which mean the request itself is wrong and would fail the same way again.
 * Redirects are followed only under the base URL (another host or port could be anything, and
 * would be sent the prompts and the API key); one elsewhere fails the request at once, naming it.
 */
import { fetchUnderBase, MAX_REDIRECTS } from '../../util/redirect.ts';

/** The API key `empo2 serve` requires and the clients here send when none is given. */
export const API_KEY_ENV = 'EMPO2_API_KEY';

export interface HttpSettings {
  timeoutMs: number;
  /** Extra attempts after the first. */
  retries: number;
  /** First wait; each later wait doubles, capped at 30 s. */
  backoffMs: number;
  /** Sent as a bearer token; default $EMPO2_API_KEY. */
  apiKey?: string;
  /** Told of each failed attempt that will be retried. */
  onRetry?: (message: string) => void;
  /** Redirects are followed only to URLs under this one (default: the origin of the URL requested). */
  baseUrl?: string;
}

/** The server answered with an error status; `param` is the field an OpenAI-style error names. */
export class RemoteHttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly param: string | null,
    /** The OpenAI-style error's `type` (vLLM: "NotFoundError", ...); null when the body has none. */
    readonly type: string | null = null,
  ) {
    super(message);
    this.name = 'RemoteHttpError';
  }
}

/** The server's error answer behind a failure (requestJson wraps the last one after its retries), if any. */
export function httpErrorOf(e: unknown): RemoteHttpError | null {
  const cause = e instanceof RemoteHttpError ? e : (e as { cause?: unknown } | null)?.cause;
  return cause instanceof RemoteHttpError ? cause : null;
}

/** Whether a failure says the request was wrong (a 4xx other than 429) rather than the server unwell. */
export function isClientError(e: unknown): boolean {
  const answer = httpErrorOf(e);
  return answer !== null && answer.status < 500 && answer.status !== 429;
}

function retriable(e: unknown): boolean {
  if (e instanceof RemoteHttpError) return e.status >= 500 || e.status === 429;
  return true; // network errors, time-outs, truncated bodies
}

function describeFailure(e: unknown, timeoutMs: number): string {
  const err = e as Error & { cause?: { code?: string; message?: string } };
  if (err.name === 'TimeoutError' || err.name === 'AbortError') return `no answer within ${timeoutMs} ms`;
  if (err.cause?.code) return `${err.message} (${err.cause.code}${err.cause.message ? `: ${err.cause.message}` : ''})`;
  return err.message;
}

export function requestJson(url: string, body: unknown | undefined, s: HttpSettings): Promise<unknown> {
  return request(url, body, s, (text, status) => {
    try {
      if (text.length > 0) return JSON.parse(text) as unknown;
    } catch {
      // answered below
    }
    throw new Error(`${url} answered ${status} with a body that is not JSON: ${text.slice(0, 200)}`);
  });
}

/** A POST whose success is a text body (vLLM's LoRA routes answer "Success: ..." as plain text). */
export function requestText(url: string, body: unknown, s: HttpSettings): Promise<string> {
  return request(url, body, s, (text) => text);
}

async function request<T>(url: string, body: unknown | undefined, s: HttpSettings, read: (text: string, status: number) => T): Promise<T> {
  const attempts = s.retries + 1;
  let lastError: unknown;
  for (let attempt = 1; attempt <= attempts; attempt++) {
    try {
      const { text, status } = await attemptOnce(url, body, s);
      return read(text, status);
    } catch (e) {
      lastError = e;
      if (!retriable(e)) throw e;
      if (attempt === attempts) break;
      const wait = Math.min(30_000, s.backoffMs * 2 ** (attempt - 1));
      s.onRetry?.(
        `${body === undefined ? 'GET' : 'POST'} ${url} failed (${describeFailure(e, s.timeoutMs)}); retry ${attempt}/${s.retries} in ${wait} ms`,
      );
      await new Promise((r) => setTimeout(r, wait));
    }
  }
  const what = lastError instanceof RemoteHttpError ? lastError.message : describeFailure(lastError, s.timeoutMs);
  throw new Error(`${body === undefined ? 'GET' : 'POST'} ${url} failed after ${attempts} attempt${attempts === 1 ? '' : 's'}: ${what}`, {
    cause: lastError,
  });
}

async function attemptOnce(url: string, body: unknown | undefined, s: HttpSettings): Promise<{ text: string; status: number }> {
  const headers: Record<string, string> = { Accept: 'application/json' };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const apiKey = s.apiKey ?? process.env[API_KEY_ENV];
  if (apiKey) headers.Authorization = `Bearer ${apiKey}`;
  // One signal for the whole attempt, so a server that stalls mid-body also times out.
  const res = await fetchUnderBase(
    url,
    {
      method: body === undefined ? 'GET' : 'POST',
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: AbortSignal.timeout(s.timeoutMs),
    },
    {
      baseUrl: s.baseUrl ?? new URL(url).origin,
      refuse: (r) =>
        new RemoteHttpError(
          r.status,
          r.why === 'outside'
            ? `${r.at} answered ${r.status}, a redirect to ${r.target?.href ?? `${JSON.stringify(r.location)} (not a URL)`}, outside the base URL ${s.baseUrl ?? new URL(url).origin}: not followed`
            : `${url} was redirected ${MAX_REDIRECTS} times (last to ${r.target?.href})`,
          null,
        ),
    },
  );
  const text = await res.text();
  let json: unknown;
  try {
    json = text.length > 0 ? JSON.parse(text) : undefined;
  } catch {
    json = undefined;
  }
  if (!res.ok) {
    type ErrorFields = { message?: unknown; param?: unknown; type?: unknown };
    const body = json as { error?: ErrorFields; object?: unknown } | undefined;
    // OpenAI's {"error": {...}}; older vLLM releases answer {"object": "error", "message", "type", ...} at the top.
    const error = body?.error ?? (body?.object === 'error' ? (body as ErrorFields) : undefined);
    const message = typeof error?.message === 'string' ? error.message : text.slice(0, 300) || res.statusText;
    const param = typeof error?.param === 'string' ? error.param : null;
    const type = typeof error?.type === 'string' ? error.type : null;
    throw new RemoteHttpError(res.status, `${url} answered ${res.status}: ${message}${param ? ` (field "${param}")` : ''}`, param, type);
  }
  return { text, status: res.status };
}

/** Whether `url` is the base URL or under it: same origin, and its path at or below the base's. */
