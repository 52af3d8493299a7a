/**
 * JSON over HTTP to an environment server, with a deadline per attempt and retries that never
 * repeat an action: a request the server never received (connection refused, 503/429) may be sent
 * again whatever it is, while a time-out, a reset connection or another 5xx is retried only for
 * calls that are safe to repeat (reset, observation, available actions, close), because the
 * server may already have carried out a step or created an instance. 4xx answers, answers that
 * are not JSON and the servers' own {"error": ...} answers are never retried. Each retry is told
 * (onRetry), with the failure and the wait. Redirects are followed only within the configured base
 * URL: one to another host or port (a dead one cost seconds of silent retries) is an error naming
 * where it pointed.
 */
import { fetchUnderBase, MAX_REDIRECTS } from '../../util/redirect.ts';

export type FailureKind =
  /** The request never reached the server (refused, no route, name unknown). */
  | 'unreachable'
  /** The connection broke after the request was sent (reset, closed mid-answer). */
  | 'connection'
  | 'timeout'
  /** An HTTP status other than 2xx. */
  | 'status'
  /** An answer that is not the JSON the protocol expects. */
  | 'garbage'
  /** A well-formed answer in which the server reports an error ({"error": "..."}). */
  | 'server';

export class EnvServerError extends Error {
  constructor(
    /** e.g. "POST http://127.0.0.1:36001/step". */
    readonly call: string,
    readonly kind: FailureKind,
    message: string,
    readonly status: number | null = null,
  ) {
    super(message);
    this.name = 'EnvServerError';
  }
}

export interface CallSettings {
  /** env.options.base_url: redirects are followed only to URLs under it. */
  baseUrl: string;
  timeoutMs: number;
  /** Extra attempts after the first, for failures that allow one. */
  retries: number;
  /** First wait between attempts; each later one doubles, capped at 10 s. */
  backoffMs: number;
  /** Safe to repeat after the server may have acted on it. */
  idempotent: boolean;
  maxResponseBytes: number;
}

export interface JsonCall {
  method: 'GET' | 'POST';
  url: string;
  body?: unknown;
}

const UNREACHABLE_CODES = new Set(['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH', 'ENETUNREACH', 'UND_ERR_CONNECT_TIMEOUT']);
const MAX_BACKOFF_MS = 10_000;

export function retryable(e: EnvServerError, idempotent: boolean): boolean {
  if (e.kind === 'unreachable') return true;
  if (e.kind === 'status') return e.status === 503 || e.status === 429 || (idempotent && e.status !== null && e.status >= 500);
  if (e.kind === 'connection' || e.kind === 'timeout') return idempotent;
  return false;
}

/** The body sent, shortened for error messages. */
export function describePayload(body: unknown): string {
  if (body === undefined) return 'no body';
  const text = JSON.stringify(body);
  return `payload ${text.length > 300 ? `${text.slice(0, 300)}…` : text}`;
}

export function excerpt(text: string, max = 200): string {
  const flat = text.replace(/\s+/g, ' ').trim();
  return JSON.stringify(flat.length > max ? `${flat.slice(0, max)}…` : flat);
}

export async function callJson(call: JsonCall, s: CallSettings, onRetry?: (message: string) => void): Promise<unknown> {
  const attempts = s.retries + 1;
  for (let attempt = 1; ; attempt++) {
    try {
      return await attemptOnce(call, s);
    } catch (e) {
      if (!(e instanceof EnvServerError)) throw e;
      const last = attempt >= attempts || !retryable(e, s.idempotent);
      if (last) {
        if (attempt > 1) e.message = `${e.message} (after ${attempt} attempts)`;
        throw e;
      }
      const wait = Math.min(MAX_BACKOFF_MS, s.backoffMs * 2 ** (attempt - 1));
      onRetry?.(`${e.message}; retry ${attempt}/${s.retries} in ${wait} ms`);
      await new Promise((r) => setTimeout(r, wait));
    }
  }
}

async function attemptOnce(call: JsonCall, s: CallSettings): Promise<unknown> {
  const name = `${call.method} ${call.url}`;
  const sent = describePayload(call.body);
  // One signal for the whole attempt, so a server that stalls in the middle of its answer also times out.
  const signal = AbortSignal.timeout(s.timeoutMs);
  let text: string;
  let status: number;
  try {
    const res = await fetchUnderBase(
      call.url,
      {
        method: call.method,
        headers:
          call.body === undefined ? { Accept: 'application/json' } : { Accept: 'application/json', 'Content-Type': 'application/json' },
        body: call.body === undefined ? undefined : JSON.stringify(call.body),
        signal,
      },
      {
        baseUrl: s.baseUrl,
        refuse: (r) =>
          new EnvServerError(
            name,
            'status',
            r.why === 'outside'
              ? `${name} answered HTTP ${r.status}, a redirect to ${r.target?.href ?? `${JSON.stringify(r.location)} (not a URL)`}, outside the configured base URL ${s.baseUrl} (env.options.base_url): not followed (${sent})`
              : `${name} was redirected ${MAX_REDIRECTS} times (last to ${r.target?.href}) (${sent})`,
            r.status,
          ),
      },
    );
    status = res.status;
    text = await readCapped(res, s.maxResponseBytes, name);
  } catch (e) {
    if (e instanceof EnvServerError) throw e;
    throw networkFailure(e, name, s.timeoutMs, sent);
  }
  if (status < 200 || status > 299) {
    throw new EnvServerError(name, 'status', `${name} answered HTTP ${status}: ${excerpt(text)} (${sent})`, status);
  }
  try {
    return JSON.parse(text);
  } catch {
    throw new EnvServerError(name, 'garbage', `${name} answered something that is not JSON: ${excerpt(text)} (${sent})`, status);
  }
}

/** The body as text, refusing more than `max` bytes so a runaway server cannot fill the memory. */
async function readCapped(res: Response, max: number, name: string): Promise<string> {
  const declared = Number(res.headers.get('content-length'));
  if (Number.isFinite(declared) && declared > max) {
    await res.body?.cancel().catch(() => undefined);
    throw new EnvServerError(
      name,
      'garbage',
      `${name} announced an answer of ${declared} bytes, more than the ${max} allowed (env.options.max_response_bytes)`,
      res.status,
    );
  }
  if (!res.body) return '';
  const reader = res.body.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.byteLength;
    if (size > max) {
      await reader.cancel().catch(() => undefined);
      throw new EnvServerError(
        name,
        'garbage',
        `${name} sent an answer longer than the ${max} bytes allowed (env.options.max_response_bytes)`,
        res.status,
      );
    }
    chunks.push(value);
  }
  return Buffer.concat(chunks).toString('utf8');
}

function networkFailure(e: unknown, name: string, timeoutMs: number, sent: string): EnvServerError {
  const err = e as Error & { cause?: { code?: string; message?: string; errors?: { code?: string }[] } };
  if (err.name === 'TimeoutError' || err.name === 'AbortError') {
    return new EnvServerError(name, 'timeout', `${name} gave no complete answer within ${timeoutMs} ms (${sent})`);
  }
  // fetch refuses a few ports outright (the Fetch standard's "bad ports", e.g. 1, 25, 6000).
  if (err.cause?.message === 'bad port')
    return new EnvServerError(
      name,
      'unreachable',
      `${name} could not reach the server (fetch refuses to use this port; pick another) (${sent})`,
    );
  const code = err.cause?.code ?? err.cause?.errors?.[0]?.code;
  const detail = code ? `${code}${err.cause?.message ? `: ${err.cause.message}` : ''}` : (err.cause?.message ?? err.message);
  const kind: FailureKind = code && UNREACHABLE_CODES.has(code) ? 'unreachable' : 'connection';
  const what = kind === 'unreachable' ? 'could not reach the server' : 'lost the connection';
  return new EnvServerError(name, kind, `${name} ${what} (${detail}) (${sent})`);
}

/**
 * Fails fast, with a message saying what to do, when nothing listens at the server's address:
 * any HTTP answer to GET {base}/ will do (AgentGym's servers name themselves there), a redirect
 * too (it is not followed).
 */
export async function checkReachable(s: Omit<CallSettings, 'idempotent'>, onRetry?: (message: string) => void): Promise<void> {
  const baseUrl = s.baseUrl;
  const name = `GET ${baseUrl}/`;
  let last: EnvServerError | undefined;
  for (let attempt = 1; attempt <= s.retries + 1; attempt++) {
    try {
      const res = await fetch(`${baseUrl}/`, { signal: AbortSignal.timeout(s.timeoutMs), redirect: 'manual' });
      await res.body?.cancel();
      return;
    } catch (e) {
      last = networkFailure(e, name, s.timeoutMs, 'no body');
      if (attempt <= s.retries) {
        const wait = Math.min(MAX_BACKOFF_MS, s.backoffMs * 2 ** (attempt - 1));
        onRetry?.(`${last.message}; retry ${attempt}/${s.retries} in ${wait} ms`);
        await new Promise((r) => setTimeout(r, wait));
      }
    }
  }
  throw new Error(`cannot reach the environment server at ${baseUrl} (env.options.base_url): ${last!.message}; is it running?`);
}
