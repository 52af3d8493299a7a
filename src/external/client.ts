/**
 * One client for the OpenAI-compatible models a run asks for text (the tip writer; docs/EXTERNAL.md):
 * `POST {base_url}/chat/completions` with a time limit per attempt, retries with backoff on 429,
 * 5xx, time-outs and connection errors (a Retry-After is waited out, or the call fails if it asks
 * for more than max_retry_wait_s), at most `concurrency` calls in flight, answers kept on disk by
 * request, and the tokens and time spent counted per role.
 *
 * A request may name weaker forms of its extra fields to fall back to (`ChatRequest.fallbacks`: the judge's
 * `response_format` json_schema, then json_object with a schema, then none): a server that refuses a field
 * as unsupported gets the next form, and the client starts there for the rest of its calls.
 *
 * A call never throws for what the server does: it resolves to `{ ok: false, error }`, and the caller
 * skips what needed the answer and counts it. Only bad settings (a key variable that is not set)
 * throw, when the client is made, before a run starts.
 *
 * Plain `fetch` rather than the `openai` package: the run needs its own retry policy (respecting
 * long Retry-After waits or failing fast, counting every retry for metrics.jsonl, aborting
 * everything on close), which the SDK hides behind its own; the one request is a JSON POST; and
 * the package stays free of a runtime dependency for it.
 */
import pLimit, { type LimitFunction } from 'p-limit';
import { ConfigError } from '../config/load.ts';
import type { ExternalModelSettings } from '../config/schema.ts';
import { ResponseCache, requestKey, type CachedAnswer } from './cache.ts';
import { UsageMeter, type ExternalUsage } from './usage.ts';

export interface ChatMessage {
  role: 'system' | 'user' | 'assistant';
  content: string;
}

export interface ChatRequest {
  messages: ChatMessage[];
  maxTokens?: number;
  seed?: number;
  /** More body fields (a `response_format` with a JSON schema, ...); part of the cache key. */
  extra?: Record<string, unknown>;
  /** Weaker forms of `extra`, in order, for servers that refuse it (see `FallbackExtras`). */
  fallbacks?: FallbackExtras;
}

/**
 * What to send instead of a request's `extra` when the server refuses it as unsupported: an error status
 * (not 401, 403, 408 or 429) whose message names one of the fields in `extra`, such as the 422 of a strict
 * validator or llama-cpp-python's 500 for `response_format: {type: json_schema}`. The next form is sent at
 * once (the refusal is no failure, and no retry); the client remembers, per `id`, the form it came to and
 * starts there for its later calls. The cache is looked up under every form, so a resumed run asks nothing.
 */
export interface FallbackExtras {
  id: string;
  /** What `extra` is, for the log line that says a form was refused. */
  label: string;
  forms: { label: string; extra: Record<string, unknown> }[];
}

export type ChatOutcome =
  | { ok: true; text: string; finishReason: string | null; cached: boolean; promptTokens: number; completionTokens: number }
  | { ok: false; error: string };

export interface ExternalModelOptions {
  /** What the model does in this run (reflector, judge): named in messages. */
  role: string;
  /** Where the cache goes when the settings name no cache_dir (the run folder); null: no cache. */
  defaultCacheDir: string | null;
  /** Notes: the first failure of each kind, unreadable cache lines. Never the key. */
  log?: (line: string) => void;
  /** Where the key variable is read (process.env). */
  env?: NodeJS.ProcessEnv;
}

const RETRY_STATUS = (status: number) => status === 408 || status === 429 || status >= 500;
const BASE_BACKOFF_MS = 500;
/** How much of an error body a message quotes. */
const QUOTED = 200;

class ClosedError extends Error {}

/** What one attempt came to: an answer, a reason to try again (with the wait the server asked for), or a reason to stop. */
type Attempt =
  | { kind: 'answer'; answer: CachedAnswer }
  | { kind: 'retry'; error: string; retryAfterMs: number | null }
  | { kind: 'fail'; error: string; unsupported?: boolean };

export class ExternalModel {
  private readonly url: string;
  private readonly headers: Record<string, string>;
  private readonly limit: LimitFunction;
  private readonly cache: ResponseCache | null;
  private readonly meter = new UsageMeter();
  private readonly closer = new AbortController();
  private readonly logged = new Set<string>();
  private readonly log: (line: string) => void;
  /** Per FallbackExtras id: the first form the server has not refused. */
  private readonly formFrom = new Map<string, number>();

  constructor(
    readonly settings: ExternalModelSettings,
    private readonly o: ExternalModelOptions,
  ) {
    this.url = `${settings.base_url.replace(/\/+$/, '')}/chat/completions`;
    this.headers = { 'Content-Type': 'application/json', ...authHeader(settings, o) };
    // Calls still queued when the client closes are rejected, so that none of them waits forever.
    this.limit = pLimit({ concurrency: settings.concurrency, rejectOnClear: true });
    this.log = o.log ?? (() => undefined);
    const dir = settings.cache ? (settings.cache_dir ?? o.defaultCacheDir) : null;
    this.cache = dir ? new ResponseCache(dir, this.log) : null;
  }

  get cacheFile(): string | null {
    return this.cache?.file ?? null;
  }

  /** One chat completion; resolves (never rejects) once answered, failed after its retries, or closed. */
  async chat(req: ChatRequest): Promise<ChatOutcome> {
    const forms = [{ label: req.fallbacks?.label ?? 'as asked', extra: req.extra ?? {} }, ...(req.fallbacks?.forms ?? [])];
    const bodies = forms.map((f) => this.body({ ...req, extra: f.extra }));
    this.meter.add({ calls: 1 });
    for (const body of bodies) {
      const hit = this.cache?.get(requestKey(body));
      if (!hit) continue;
      this.meter.add({ cached: 1 });
      return { ok: true, text: hit.text, finishReason: hit.finish_reason, cached: true, promptTokens: 0, completionTokens: 0 };
    }
    const id = req.fallbacks?.id;
    let form = id === undefined ? 0 : Math.min(this.formFrom.get(id) ?? 0, forms.length - 1);
    let outcome: Attempt;
    for (;;) {
      const body = bodies[form];
      outcome = await this.limit(() => this.send(body, form < forms.length - 1 ? Object.keys(forms[form].extra) : [])).catch(
        (e: unknown) => ({
          kind: 'fail' as const,
          error: this.closer.signal.aborted ? `${this.o.role} model: closed before it answered` : String(e),
        }),
      );
      if (outcome.kind !== 'fail' || !outcome.unsupported || id === undefined) break;
      // Refused as unsupported: the next form, for this call and the later ones (another call may have moved on already).
      const next = Math.max(form + 1, this.formFrom.get(id) ?? 0);
      if ((this.formFrom.get(id) ?? 0) < next) {
        this.formFrom.set(id, next);
        this.log(
          `${this.o.role} model ${this.settings.model}: the server refused ${forms[form].label} (${outcome.error}); asking with ${forms[next].label} from now on`,
        );
      }
      form = next;
    }
    if (outcome.kind !== 'answer') {
      this.meter.add({ failed: 1 });
      this.note(outcome.error);
      return { ok: false, error: outcome.error };
    }
    const a = outcome.answer;
    this.meter.add({ prompt_tokens: a.prompt_tokens, completion_tokens: a.completion_tokens });
    this.cache?.put(requestKey(bodies[form]), this.settings.model, a);
    return {
      ok: true,
      text: a.text,
      finishReason: a.finish_reason,
      cached: false,
      promptTokens: a.prompt_tokens,
      completionTokens: a.completion_tokens,
    };
  }

  /** Tokens, calls and time since the last take. */
  takeUsage(): ExternalUsage {
    return this.meter.take();
  }

  /** Aborts the requests in flight and the waits before retries; later calls fail at once. */
  close(): void {
    this.limit.clearQueue();
    this.closer.abort();
  }

  private body(req: ChatRequest): Record<string, unknown> {
    return {
      model: this.settings.model,
      messages: req.messages,
      temperature: this.settings.temperature,
      ...(req.maxTokens !== undefined ? { max_tokens: req.maxTokens } : {}),
      ...(req.seed !== undefined ? { seed: req.seed } : {}),
      ...req.extra,
    };
  }

  /**
   * The attempts of one call: the first, then up to max_retries more, each after its wait. `fallbackFields`:
   * the body's fields whose refusal as unsupported ends the call at once (a weaker form follows).
   */
  private async send(body: Record<string, unknown>, fallbackFields: readonly string[] = []): Promise<Attempt> {
    this.meter.start();
    try {
      let last: Attempt = { kind: 'fail', error: 'no attempt made' };
      for (let attempt = 0; attempt <= this.settings.max_retries; attempt++) {
        if (this.closer.signal.aborted) return { kind: 'fail', error: `${this.o.role} model: closed before it answered` };
        if (attempt > 0) this.meter.add({ retries: 1 });
        this.meter.add({ requests: 1 });
        last = await this.attempt(body, fallbackFields);
        if (last.kind !== 'retry') return last;
        if (attempt === this.settings.max_retries) break;
        const capMs = this.settings.max_retry_wait_s * 1000;
        if (last.retryAfterMs !== null && last.retryAfterMs > capMs)
          return {
            kind: 'fail',
            error: `${last.error}; the server asked to wait ${(last.retryAfterMs / 1000).toFixed(0)} s, more than max_retry_wait_s ${this.settings.max_retry_wait_s}`,
          };
        await this.sleep(last.retryAfterMs ?? backoffMs(attempt, capMs));
      }
      return { kind: 'fail', error: `${last.kind === 'retry' ? last.error : 'failed'} (after ${this.settings.max_retries} retries)` };
    } finally {
      this.meter.stop();
    }
  }

  private async attempt(body: Record<string, unknown>, fallbackFields: readonly string[]): Promise<Attempt> {
    const timeoutMs = this.settings.timeout_s * 1000;
    const ctrl = new AbortController();
    const onClose = () => ctrl.abort(new ClosedError());
    this.closer.signal.addEventListener('abort', onClose);
    const timer = setTimeout(() => ctrl.abort(new Error('timeout')), timeoutMs);
    try {
      const res = await fetch(this.url, { method: 'POST', headers: this.headers, body: JSON.stringify(body), signal: ctrl.signal });
      const text = await res.text();
      if (!res.ok) return this.refused(res, text, fallbackFields);
      return parseAnswer(text, this.url);
    } catch (e) {
      if (ctrl.signal.reason instanceof ClosedError) return { kind: 'fail', error: `${this.o.role} model: closed before it answered` };
      if (ctrl.signal.aborted)
        return { kind: 'retry', error: `${this.url} did not answer within timeout_s ${this.settings.timeout_s}`, retryAfterMs: null };
      const cause = (e as { cause?: { code?: string; message?: string } }).cause;
      return { kind: 'retry', error: `${this.url}: ${cause?.code ?? cause?.message ?? (e as Error).message}`, retryAfterMs: null };
    } finally {
      clearTimeout(timer);
      this.closer.signal.removeEventListener('abort', onClose);
    }
  }

  private refused(res: Response, text: string, fallbackFields: readonly string[]): Attempt {
    const error = `${this.url} answered ${res.status}${quoteError(text)}`;
    if (res.status === 401 || res.status === 403)
      return { kind: 'fail', error: `${error} (check the key in ${this.settings.api_key_env ?? 'api_key_env: none is sent'})` };
    if (res.status !== 408 && res.status !== 429 && fallbackFields.some((f) => text.includes(f)))
      return { kind: 'fail', error, unsupported: true };
    if (!RETRY_STATUS(res.status)) return { kind: 'fail', error };
    return { kind: 'retry', error, retryAfterMs: retryAfterMs(res.headers) };
  }

  private sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.closer.signal.removeEventListener('abort', done);
        resolve();
      };
      const timer = setTimeout(done, ms);
      this.closer.signal.addEventListener('abort', done);
    });
  }

  /** Says each kind of failure once per client (a dead server would otherwise fill the log); metrics.jsonl counts them all. */
  private note(error: string): void {
    const kind = error.replace(/\d+(\.\d+)?/g, '#');
    if (this.logged.has(kind)) return;
    this.logged.add(kind);
    this.log(`${this.o.role} model ${this.settings.model}: ${error}; what needed the answer is skipped and counted in metrics.jsonl`);
  }
}

function authHeader(settings: ExternalModelSettings, o: ExternalModelOptions): Record<string, string> {
  const name = settings.api_key_env;
  if (name === null) return {};
  const key = (o.env ?? process.env)[name];
  if (!key) {
    // The name is shown only where it looks like a variable name: a key pasted in its place must not reach a log.
    const shown = /^[A-Z_][A-Z0-9_]{0,63}$/.test(name) ? `$${name}` : 'the variable it names (not shown: is it the key itself?)';
    throw new ConfigError(`${o.role} model: api_key_env says the key is in ${shown}, which is not set in the environment`);
  }
  return { Authorization: `Bearer ${key}` };
}

/** Exponential backoff with jitter: 0.5 s, 1 s, 2 s, ... (±25%), at most `capMs`. */
function backoffMs(attempt: number, capMs: number): number {
  return Math.min(capMs, BASE_BACKOFF_MS * 2 ** attempt * (0.75 + Math.random() * 0.5));
}

/** Retry-After in seconds or as an HTTP date (and OpenAI's retry-after-ms); null when absent or unreadable. */
export function retryAfterMs(headers: Headers, now = Date.now()): number | null {
  const ms = Number(headers.get('retry-after-ms'));
  if (headers.get('retry-after-ms') !== null && Number.isFinite(ms) && ms >= 0) return ms;
  const value = headers.get('retry-after');
  if (value === null) return null;
  if (/^\s*\d+(\.\d+)?\s*$/.test(value)) return Number(value) * 1000;
  const at = Date.parse(value);
  return Number.isNaN(at) ? null : Math.max(0, at - now);
}

function quoteError(text: string): string {
  let message = text;
  try {
    const j = JSON.parse(text) as { error?: { message?: unknown } | string; message?: unknown; detail?: unknown };
    const m = typeof j.error === 'string' ? j.error : (j.error?.message ?? j.message ?? validationDetail(j.detail));
    if (typeof m === 'string') message = m;
  } catch {
    // not JSON: quote the body as it is
  }
  message = message.replace(/\s+/g, ' ').trim();
  return message ? `: ${message.length > QUOTED ? message.slice(0, QUOTED) + '...' : message}` : '';
}

/** FastAPI's 422 body, `{"detail": [{"loc": [...], "msg": ...}]}` (or a string), as one line. */
function validationDetail(detail: unknown): string | undefined {
  if (typeof detail === 'string') return detail;
  if (!Array.isArray(detail)) return undefined;
  return detail
    .map((d: { loc?: unknown; msg?: unknown }) => `${Array.isArray(d?.loc) ? d.loc.join('.') + ': ' : ''}${String(d?.msg ?? '')}`)
    .join('; ');
}

/** A 200's body as an answer: JSON with choices[0].message.content; anything else fails (not retried: the server answered). */
function parseAnswer(text: string, url: string): Attempt {
  let j: {
    choices?: { message?: { content?: unknown }; finish_reason?: unknown }[];
    usage?: { prompt_tokens?: unknown; completion_tokens?: unknown };
  };
  try {
    j = JSON.parse(text);
  } catch {
    return { kind: 'fail', error: `${url} answered 200 with a body that is not JSON${quoteError(text)}` };
  }
  const choice = Array.isArray(j?.choices) ? j.choices[0] : undefined;
  const content = choice?.message?.content;
  if (typeof content !== 'string') return { kind: 'fail', error: `${url} answered 200 without choices[0].message.content` };
  const n = (x: unknown) => (typeof x === 'number' && Number.isFinite(x) ? x : 0);
  return {
    kind: 'answer',
    answer: {
      text: content,
      finish_reason: typeof choice?.finish_reason === 'string' ? choice.finish_reason : null,
      prompt_tokens: n(j.usage?.prompt_tokens),
      completion_tokens: n(j.usage?.completion_tokens),
    },
  };
}
