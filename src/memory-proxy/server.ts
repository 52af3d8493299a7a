/**
 * `empo2 memory-proxy`: EMPO²'s tip memory for a model that cannot be trained (the paper's memory-only
 * adaptation, in front of any OpenAI-compatible server). An agent creates an episode (`POST /episodes`)
 * and gets its own base URL and key, as the training gateway gives them (../gateway/server.ts); its chat
 * completions go to the upstream as they were sent, except that the tips the memory holds for the last
 * observation (the last user or tool message) are put at the end of that message, in the block the
 * trainer shows (../trainer/prompt.ts renderTipBlock). At the episode's end the agent reports its reward
 * as to the gateway (`POST {base}/empo2/reward`); the tip writer (the upstream itself, another model, or
 * the trajectory summary) reflects on the episode, and the tip is stored with the episode's score in an
 * SQLite database (./store.ts) before the report is answered.
 *
 * What the proxy answers itself: its own routes, and errors of the upstream, each as an OpenAI-style
 * error naming the upstream (429 keeps its Retry-After, so the agent's client backs off as it would);
 * an upstream that answers 200 with something that is not a completion is a 502, one that does not
 * answer within `upstreamTimeoutS` a 504, one that is down a 502. It does not retry: the agent's client
 * does, and a retried call must stay one step.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { randomBytes, timingSafeEqual } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import { z } from 'zod';
import { ExternalModelSchema, type ExternalModelSettings } from '../config/schema.ts';
import { ExternalModel } from '../external/client.ts';
import { RewardReportSchema, type RewardReport } from '../gateway/protocol.ts';
import { outcomeProblem } from '../gateway/outcome.ts';
import { ExternalReflector } from '../memory/external-reflector.ts';
import { HashedNgramEmbedder } from '../memory/hashed.ts';
import { stepTipText, TrajectorySummaryReflector, type Reflector, type Trajectory } from '../memory/reflector.ts';
import { DEFAULT_MEMORY_SETTINGS, type MemorySettings } from '../memory/store.ts';
import type { TextTokenizer } from '../policy/types.ts';
import { errorBody, parseRequest, readJson, RequestError } from '../serve/protocol.ts';
import { renderTipBlock } from '../trainer/prompt.ts';
import { listenOn } from '../util/port.ts';
import { TipStore, type NewTip } from './store.ts';
import { sparseKey } from './tip-index.ts';

/** The model behind the proxy, or the one that writes its tips. */
export interface ProxyModel {
  /** e.g. http://127.0.0.1:8080/v1 */
  baseURL: string;
  model: string;
  /** The environment variable that holds its key (null: send none); the key itself is never an option. */
  apiKeyEnv?: string | null;
}

export interface MemoryProxyOptions {
  upstream: ProxyModel;
  /** The SQLite database (created when missing). */
  memory: string;
  /** Who writes the tips: the upstream (default), another model, or the trajectory summary (no model). */
  reflector?: 'upstream' | 'summary' | ProxyModel;
  host?: string;
  /** 0 (default) picks a free port. */
  port?: number;
  /** The environment variable holding the key `POST /episodes` asks for (null: anyone who can reach the proxy). */
  apiKeyEnv?: string | null;
  /** Retrieval and capacity (default the trainer's: 1000 per slot, threshold 0.5, top 10). */
  settings?: Partial<MemorySettings>;
  /** Hashed embedder dimensions (the trainer's memory.dim; default 1024). */
  dim?: number;
  /** One entry per call with its action and the episode's score (the trainer's default), or one per episode keyed by its last observation. */
  perStepEntries?: boolean;
  /** Order of the shown tips (the trainer's experimental.tip_order). */
  tipOrder?: 'best_first' | 'best_last';
  /** How long a chat call waits for the upstream (default 600 s). */
  upstreamTimeoutS?: number;
  /** An episode that makes no call for this long is dropped without a tip (default 3600 s). */
  episodeIdleS?: number;
  /** The tip's cap in characters (tips are also cut at 100 words, as the trainer's). */
  tipMaxChars?: number;
  log?: (line: string) => void;
  env?: NodeJS.ProcessEnv;
}

export interface ProxyEpisodeHandle {
  id: string;
  /** The base URL an OpenAI client of this episode is given. */
  baseURL: string;
  apiKey: string;
  task: string;
}

/** What `POST {base}/empo2/reward` answers, and `MemoryProxy.endEpisode` returns. */
export interface EpisodeEnd {
  episode: string;
  recorded: true;
  tips_added: number;
  /** The tip the writer wrote (null: none, see `skipped`). */
  tip: string | null;
  skipped: string | null;
}

export interface ProxyStats {
  tips: number;
  open_episodes: number;
  ended_episodes: number;
  calls: number;
  calls_with_tips: number;
  upstream_errors: number;
  tips_skipped: number;
  /** Time the proxy added to calls (retrieval and bookkeeping, the upstream excluded), ms: wall clock, and the process's CPU time. */
  added_ms: { mean: number; max: number; cpu_mean: number };
}

export interface MemoryProxy {
  url: string;
  store: TipStore;
  /** Opens an episode as `POST /episodes` does. */
  startEpisode(o?: { task?: string; description?: string }): ProxyEpisodeHandle;
  stats(): ProxyStats;
  close(): Promise<void>;
}

interface Step {
  observation: string;
  action: string;
  key: Float32Array | null;
}

interface Episode {
  id: string;
  key: string;
  task: string;
  description: string | null;
  steps: Step[];
  lastSeen: number;
  ending: boolean;
}

const CreateEpisodeSchema = z.strictObject({
  task: z.string().min(1).max(1000).optional(),
  description: z.string().max(100_000).optional(),
});

/** Just enough of a chat request to find the last observation; everything else goes to the upstream as sent. */
const ChatSchema = z.looseObject({
  messages: z.array(z.looseObject({ role: z.string(), content: z.unknown().optional() })).min(1, { error: 'give at least one message' }),
  stream: z.boolean().nullable().optional(),
});

const MAX_BODY = 32 << 20;
/** Why a call to the upstream was cut when the agent hung up (not the upstream's failure). */
const HUNG_UP = new Error('the client hung up');
const DEFAULT_TASK = 'default';
/** Steps of a trajectory the writer's prompt shows (the trainer's). */
const REFLECTION_HISTORY_STEPS = 12;

/** One token per character: the proxy does not know the upstream's tokenizer, so the tip's cap is in characters. */
const CHARACTERS: TextTokenizer = {
  encode: (text) => Array.from(text, (c) => c.codePointAt(0)!),
  decode: (ids) => String.fromCodePoint(...ids),
  vocabSize: 0x110000,
  tokenToId: (t) => (Array.from(t).length === 1 ? t.codePointAt(0) : undefined),
};

function modelSettings(m: ProxyModel, timeoutS: number): ExternalModelSettings {
  return ExternalModelSchema.parse({
    base_url: m.baseURL,
    model: m.model,
    api_key_env: m.apiKeyEnv ?? null,
    timeout_s: timeoutS,
    max_retries: 2,
    max_retry_wait_s: 30,
    cache: false,
  });
}

function createWriter(o: MemoryProxyOptions, log: (line: string) => void): Reflector {
  const spec = o.reflector ?? 'upstream';
  if (spec === 'summary') return new TrajectorySummaryReflector();
  const m = spec === 'upstream' ? o.upstream : spec;
  const model = new ExternalModel(modelSettings(m, Math.min(o.upstreamTimeoutS ?? 600, 120)), {
    role: 'tip writer',
    defaultCacheDir: null,
    log,
    env: o.env,
  });
  return new ExternalReflector(model, CHARACTERS, { maxTokens: o.tipMaxChars ?? 600, historySteps: REFLECTION_HISTORY_STEPS, seed: 0 });
}

function keyFromEnv(name: string | null | undefined, env: NodeJS.ProcessEnv, what: string): string | null {
  if (!name) return null;
  const key = env[name];
  if (!key) throw new Error(`${what}: the key is to be in $${name}, which is not set in the environment`);
  return key;
}

/** The text of a message's content: a string, or the text of its parts. */
function contentText(content: unknown): string {
  if (typeof content === 'string') return content;
  if (Array.isArray(content))
    return content
      .map((p) =>
        typeof p === 'object' && p !== null && (p as { type?: unknown }).type === 'text'
          ? String((p as { text?: unknown }).text ?? '')
          : '',
      )
      .join('');
  return '';
}

/** The index of the last user or tool message: the observation the call answers. */
export function lastObservation(messages: readonly { role: string }[]): number {
  for (let i = messages.length - 1; i >= 0; i--) if (messages[i].role === 'user' || messages[i].role === 'tool') return i;
  return -1;
}

/** The message with the tip block at the end of its content (a text part added where the content is a list of parts). */
function withTips(message: Record<string, unknown>, block: string): Record<string, unknown> {
  const c = message.content;
  if (Array.isArray(c)) return { ...message, content: [...c, { type: 'text', text: block }] };
  return { ...message, content: `${typeof c === 'string' ? c : ''}${block}` };
}

function sendJson(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  if (res.headersSent || res.destroyed) return void res.end();
  const text = JSON.stringify(body);
  res.writeHead(status, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(text), ...headers });
  res.end(text);
}

function safeEqual(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}

/** The answer of a non-streamed completion: choices[0].message.content (null where the upstream sent none). */
function answerOf(body: unknown): string | null {
  const c = (body as { choices?: { message?: { content?: unknown } }[] } | null)?.choices?.[0]?.message?.content;
  return typeof c === 'string' ? c : null;
}

function quote(text: string): string {
  const t = text.replace(/\s+/g, ' ').trim();
  return t.length > 200 ? `${t.slice(0, 200)}...` : t;
}

export async function startMemoryProxy(o: MemoryProxyOptions): Promise<MemoryProxy> {
  const env = o.env ?? process.env;
  const log = o.log ?? ((line: string) => process.stderr.write(`${line}\n`));
  const upstreamURL = `${o.upstream.baseURL.replace(/\/+$/, '')}`;
  const upstreamKey = keyFromEnv(o.upstream.apiKeyEnv, env, 'upstream');
  const proxyKey = keyFromEnv(o.apiKeyEnv, env, 'memory proxy');
  const timeoutMs = (o.upstreamTimeoutS ?? 600) * 1000;
  const settings: MemorySettings = { ...DEFAULT_MEMORY_SETTINGS, ...o.settings };
  const embedder = new HashedNgramEmbedder({ dim: o.dim ?? 1024 });
  const store = TipStore.open(o.memory, { identity: { embedder: embedder.name, dim: embedder.dim }, settings, create: true });
  const writer = createWriter(o, log);
  const episodes = new Map<string, Episode>();
  const byKey = new Map<string, string>();
  const inFlight = new Set<AbortController>();
  const s = { calls: 0, withTips: 0, upstreamErrors: 0, skipped: 0, ended: 0, addedMs: 0, maxAddedMs: 0, addedCpuMs: 0 };
  let closing = false;
  /** Episodes whose tip is being written: closing waits for them, so none is cut between the writer and the database. */
  const endings = new Set<Promise<EpisodeEnd>>();

  const startEpisode = (req: { task?: string; description?: string } = {}): Episode => {
    const e: Episode = {
      id: `mp-${randomBytes(6).toString('hex')}`,
      key: `empo2-mp-${randomBytes(18).toString('base64url')}`,
      task: req.task ?? DEFAULT_TASK,
      description: req.description ?? null,
      steps: [],
      lastSeen: Date.now(),
      ending: false,
    };
    episodes.set(e.id, e);
    byKey.set(e.key, e.id);
    return e;
  };
  const drop = (e: Episode) => {
    episodes.delete(e.id);
    byKey.delete(e.key);
  };
  const upstreamHeaders = (accept: string | undefined): Record<string, string> => ({
    'Content-Type': 'application/json',
    ...(accept ? { Accept: accept } : {}),
    ...(upstreamKey ? { Authorization: `Bearer ${upstreamKey}` } : {}),
  });

  /** The upstream's answer to a request, with a time limit that a client hanging up also ends. */
  async function forward(
    req: IncomingMessage,
    res: ServerResponse,
    path: string,
    init: { method: string; body?: string },
  ): Promise<Response> {
    const ctrl = new AbortController();
    inFlight.add(ctrl);
    const onClose = () => !res.writableEnded && ctrl.abort(HUNG_UP);
    res.once('close', onClose);
    const timer = setTimeout(() => ctrl.abort(new Error('timeout')), timeoutMs);
    try {
      return await fetch(`${upstreamURL}${path}`, {
        method: init.method,
        headers: upstreamHeaders(req.headers.accept),
        body: init.body,
        signal: ctrl.signal,
      });
    } catch (e) {
      if (ctrl.signal.aborted && ctrl.signal.reason === HUNG_UP) throw new RequestError(499, 'the client hung up', null);
      s.upstreamErrors++;
      if (ctrl.signal.aborted && (ctrl.signal.reason as Error)?.message === 'timeout')
        throw new RequestError(504, `the upstream ${upstreamURL} did not answer within ${timeoutMs / 1000} s`, null, 'upstream_error');
      if (closing) throw new RequestError(503, 'the memory proxy is shutting down', null, 'server_error');
      const cause = (e as { cause?: { code?: string; message?: string } }).cause;
      throw new RequestError(
        502,
        `the upstream ${upstreamURL} could not be reached: ${cause?.code ?? cause?.message ?? (e as Error).message}`,
        null,
        'upstream_error',
      );
    } finally {
      clearTimeout(timer);
      res.off('close', onClose);
      inFlight.delete(ctrl);
    }
  }

  /** The rest of an upstream body, within the call's time limit. */
  async function bodyText(r: Response): Promise<string> {
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        void r.body?.cancel().catch(() => undefined);
        reject(
          new RequestError(
            504,
            `the upstream ${upstreamURL} did not finish its answer within ${timeoutMs / 1000} s`,
            null,
            'upstream_error',
          ),
        );
      }, timeoutMs);
    });
    try {
      return await Promise.race([r.text(), late]);
    } finally {
      clearTimeout(timer);
    }
  }

  async function refused(r: Response): Promise<never> {
    s.upstreamErrors++;
    const text = await bodyText(r).catch(() => '');
    let message = text;
    try {
      const j = JSON.parse(text) as { error?: { message?: unknown } | string };
      const m = typeof j.error === 'string' ? j.error : j.error?.message;
      if (typeof m === 'string') message = m;
    } catch {
      // not JSON: quoted as it is
    }
    const err = new RequestError(
      r.status,
      `the upstream ${upstreamURL} answered ${r.status}${message ? `: ${quote(message)}` : ''}`,
      null,
      'upstream_error',
      r.status,
    );
    const retryAfter = r.headers.get('retry-after');
    throw Object.assign(err, { headers: retryAfter ? { 'Retry-After': retryAfter } : {} });
  }

  /** The tips for this call's observation, put in its message; returns the body to send and the observation's key. */
  async function prepare(
    e: Episode,
    body: z.infer<typeof ChatSchema>,
  ): Promise<{ body: Record<string, unknown>; observation: string; key: Float32Array | null }> {
    const at = lastObservation(body.messages);
    const observation = at < 0 ? '' : contentText(body.messages[at].content);
    if (!observation.trim()) return { body, observation, key: null };
    const [key] = await embedder.embed([observation]);
    const hits = store.index.retrieve(e.task, sparseKey(key));
    if (hits.length === 0) return { body, observation, key };
    s.withTips++;
    const texts = hits.map((h) => h.text);
    if (o.tipOrder === 'best_last') texts.reverse();
    const messages = body.messages.map((m, i) => (i === at ? withTips(m, renderTipBlock(texts)) : m));
    return { body: { ...body, messages }, observation, key };
  }

  async function chat(e: Episode, req: IncomingMessage, res: ServerResponse): Promise<void> {
    const body = parseRequest(ChatSchema, await readJson(req, MAX_BODY));
    const t0 = performance.now();
    // CPU time too: on a machine busy with other work, wall time says more about the machine than the proxy.
    const c0 = process.cpuUsage();
    const call = await prepare(e, body);
    const sent = JSON.stringify(call.body);
    const added = performance.now() - t0;
    const cpu = process.cpuUsage(c0);
    s.calls++;
    s.addedMs += added;
    s.addedCpuMs += (cpu.user + cpu.system) / 1000;
    s.maxAddedMs = Math.max(s.maxAddedMs, added);
    const r = await forward(req, res, '/chat/completions', { method: 'POST', body: sent });
    if (!r.ok) await refused(r);
    const streamed = (r.headers.get('content-type') ?? '').includes('text/event-stream');
    const action = streamed ? await relayStream(r, res) : await relayJson(r, res);
    e.steps.push({ observation: call.observation, action, key: call.key });
    e.lastSeen = Date.now();
  }

  async function relayJson(r: Response, res: ServerResponse): Promise<string> {
    const text = await bodyText(r);
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      s.upstreamErrors++;
      throw new RequestError(
        502,
        `the upstream ${upstreamURL} answered 200 with a body that is not JSON: ${quote(text) || '(empty)'}`,
        null,
        'upstream_error',
      );
    }
    const answer = answerOf(parsed);
    if (answer === null && !Array.isArray((parsed as { choices?: unknown })?.choices)) {
      s.upstreamErrors++;
      throw new RequestError(502, `the upstream ${upstreamURL} answered 200 without choices: ${quote(text)}`, null, 'upstream_error');
    }
    res.writeHead(200, { 'Content-Type': r.headers.get('content-type') ?? 'application/json', 'Content-Length': Buffer.byteLength(text) });
    res.end(text);
    return answer ?? '';
  }

  /** Server-sent events passed on as they come (the idle time limit restarts with each chunk); the answer is read from their deltas. */
  async function relayStream(r: Response, res: ServerResponse): Promise<string> {
    res.writeHead(200, { 'Content-Type': 'text/event-stream', 'Cache-Control': 'no-cache' });
    const reader = r.body!.getReader();
    const decoder = new TextDecoder();
    let pending = '';
    let answer = '';
    const readLines = (chunk: string) => {
      pending += chunk;
      const lines = pending.split('\n');
      pending = lines.pop()!;
      for (const line of lines) {
        const data = /^data:\s?(.*)$/.exec(line.trim())?.[1];
        if (!data || data === '[DONE]') continue;
        try {
          const d = (JSON.parse(data) as { choices?: { delta?: { content?: unknown } }[] }).choices?.[0]?.delta?.content;
          if (typeof d === 'string') answer += d;
        } catch {
          // a chunk the proxy cannot read is still the agent's to read
        }
      }
    };
    for (;;) {
      let timer: NodeJS.Timeout | undefined;
      const next = await Promise.race([
        reader.read(),
        new Promise<'late'>((resolve) => (timer = setTimeout(() => resolve('late'), timeoutMs))),
      ]).finally(() => clearTimeout(timer));
      if (next === 'late') {
        s.upstreamErrors++;
        void reader.cancel().catch(() => undefined);
        res.end(
          `data: ${JSON.stringify(errorBody(new RequestError(504, `the upstream ${upstreamURL} stopped sending for ${timeoutMs / 1000} s`, null, 'upstream_error')))}\n\n`,
        );
        throw new RequestError(504, 'stream cut', null);
      }
      if (next.done) break;
      if (res.destroyed) {
        // The agent hung up: stop the upstream's generation too, and record no step for an answer nobody got.
        void reader.cancel().catch(() => undefined);
        throw new RequestError(499, 'the client hung up', null);
      }
      const chunk = decoder.decode(next.value, { stream: true });
      readLines(chunk);
      res.write(chunk);
    }
    res.end();
    return answer;
  }

  /** The episode's trajectory as the writer reads it, from its calls and the agent's report. */
  function trajectoryOf(e: Episode, report: RewardReport): Trajectory {
    const score = report.score ?? (report.reward ?? 0) * 100;
    const last = e.steps.at(-1);
    return {
      task: e.description ?? (e.task === DEFAULT_TASK ? (e.steps[0]?.observation ?? '') : e.task),
      steps: e.steps.map((st, t) => ({ observation: st.observation, action: st.action, score: report.steps?.[t]?.score ?? 0 })),
      finalObservation: report.final_observation ?? last?.observation ?? '',
      score,
      success: score >= 100,
    };
  }

  async function endEpisode(e: Episode, report: RewardReport): Promise<EpisodeEnd> {
    e.ending = true;
    const t = trajectoryOf(e, report);
    let tip: string | null = null;
    let skipped: string | null = null;
    if (e.steps.length === 0) skipped = 'the episode made no calls';
    else {
      tip = (await writer.reflect([t]))[0];
      if (tip === null)
        skipped = `the tip writer (${writer.name}) wrote no tip: its call failed (the proxy's log says why) or its answer was empty`;
    }
    const tips: NewTip[] = [];
    if (tip !== null) {
      if (o.perStepEntries ?? true)
        e.steps.forEach((st, i) => {
          if (!st.key) return;
          const before = report.steps && i > 0 ? (report.steps[i - 1]?.score ?? null) : report.steps ? 0 : null;
          tips.push({
            slot: e.task,
            text: stepTipText(tip!, st.action.trim(), t.score, 'final'),
            score: t.score,
            action: st.action.trim(),
            progress: before,
            key: st.key,
          });
        });
      else {
        const [key] = await embedder.embed([t.finalObservation]);
        tips.push({ slot: e.task, text: tip, score: t.score, action: null, progress: null, key });
      }
    }
    if (skipped) s.skipped++;
    const added = store.addEpisode({ id: e.id, task: e.task, score: t.score, calls: e.steps.length, tipsAdded: 0, skipped }, tips);
    s.ended++;
    drop(e);
    return { episode: e.id, recorded: true, tips_added: added, tip, skipped };
  }

  function route(req: IncomingMessage): { e: Episode; path: string } {
    const url = (req.url ?? '/').split('?')[0].replace(/\/+$/, '');
    const m = /^\/episodes\/([^/]+)(\/v1\/.*)$/.exec(url);
    const key = /^Bearer\s+(.+)$/i.exec(req.headers.authorization ?? '')?.[1]?.trim() ?? null;
    const path = m ? m[2] : url;
    if (!path.startsWith('/v1/'))
      throw new RequestError(404, `no route ${req.method} ${url}: create an episode (POST /episodes) and use its base URL`, null);
    if (key === null) throw new RequestError(401, "missing API key: send the episode's key as Authorization: Bearer <key>", null);
    const id = m ? m[1] : byKey.get(key);
    const e = id === undefined ? undefined : episodes.get(id);
    if (!e)
      throw new RequestError(
        404,
        m ? `no episode ${m[1]} is open on this proxy (it ended, or never started)` : 'no episode has this key',
        null,
      );
    if (!safeEqual(e.key, key)) throw new RequestError(401, `wrong API key for episode ${e.id}`, null);
    return { e, path };
  }

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    if (closing) throw new RequestError(503, 'the memory proxy is shutting down', null, 'server_error');
    const url = (req.url ?? '/').split('?')[0].replace(/\/+$/, '');
    if (url === '/health' && req.method === 'GET') return sendJson(res, 200, { status: 'ok', model: o.upstream.model, ...stats() });
    if (url === '/episodes') {
      if (req.method !== 'POST') throw new RequestError(405, `/episodes takes POST, not ${req.method}`, null);
      const key = /^Bearer\s+(.+)$/i.exec(req.headers.authorization ?? '')?.[1]?.trim() ?? '';
      if (proxyKey && !safeEqual(key, proxyKey))
        throw new RequestError(401, "creating an episode needs the proxy's key (Authorization: Bearer <key>)", null);
      const text = await readJson(req, 1 << 20).catch((err: unknown) => {
        // An empty body is an episode with the defaults.
        if (err instanceof RequestError && err.message.includes('Unexpected end of JSON input')) return {};
        throw err;
      });
      const e = startEpisode(parseRequest(CreateEpisodeSchema, text));
      return sendJson(res, 201, handleOf(e));
    }
    const { e, path } = route(req);
    if (e.ending) throw new RequestError(409, `episode ${e.id} is ending (its reward was reported)`, null);
    e.lastSeen = Date.now();
    if (path === '/v1/models') {
      if (req.method !== 'GET') throw new RequestError(405, `${path} takes GET, not ${req.method}`, null);
      const r = await forward(req, res, '/models', { method: 'GET' });
      if (!r.ok) await refused(r);
      const text = await bodyText(r);
      res.writeHead(200, { 'Content-Type': r.headers.get('content-type') ?? 'application/json' });
      return void res.end(text);
    }
    if (path === '/v1/chat/completions') {
      if (req.method !== 'POST') throw new RequestError(405, `${path} takes POST, not ${req.method}`, null);
      return chat(e, req, res);
    }
    if (path === '/v1/empo2/reward') {
      if (req.method !== 'POST') throw new RequestError(405, `${path} takes POST, not ${req.method}`, null);
      const report = parseRequest(RewardReportSchema, await readJson(req, 1 << 20));
      if ((report.reward === undefined) === (report.score === undefined))
        throw new RequestError(400, 'give either "reward" (1 is success) or "score" (0-100), not both', 'reward');
      const bad = outcomeProblem(report);
      if (bad) throw new RequestError(400, bad.message, bad.field);
      const ending = endEpisode(e, report);
      endings.add(ending);
      try {
        return sendJson(res, 200, { object: 'empo2.reward', ...(await ending) });
      } finally {
        endings.delete(ending);
      }
    }
    throw new RequestError(404, `no route ${req.method} ${path} (routes: GET models, POST chat/completions, empo2/reward)`, null);
  }

  const server: Server = createServer((req, res) => {
    void handle(req, res).catch((err: unknown) => {
      const e =
        err instanceof RequestError ? err : new RequestError(500, `internal error: ${(err as Error).message}`, null, 'server_error');
      if (e.status === 500) log(`memory proxy error: ${(err as Error).stack ?? String(err)}`);
      if (res.headersSent) return void res.end();
      sendJson(res, e.status, errorBody(e), (err as { headers?: Record<string, string> }).headers ?? {});
    });
  });
  const addr: AddressInfo = await listenOn(server, o.host ?? '127.0.0.1', o.port ?? 0).catch((e: unknown) => {
    store.close();
    writer.close?.();
    throw e;
  });
  const url = `http://${addr.family === 'IPv6' ? `[${addr.address}]` : addr.address}:${addr.port}`;
  const handleOf = (e: Episode): ProxyEpisodeHandle & { base_url: string; api_key: string } => ({
    id: e.id,
    baseURL: `${url}/episodes/${e.id}/v1`,
    apiKey: e.key,
    task: e.task,
    base_url: `${url}/episodes/${e.id}/v1`,
    api_key: e.key,
  });
  const idleMs = (o.episodeIdleS ?? 3600) * 1000;
  const sweep = setInterval(
    () => {
      const now = Date.now();
      for (const e of episodes.values()) if (!e.ending && now - e.lastSeen > idleMs) drop(e);
    },
    Math.min(idleMs, 60_000),
  );
  sweep.unref();
  function stats(): ProxyStats {
    return {
      tips: store.index.size(),
      open_episodes: episodes.size,
      ended_episodes: s.ended,
      calls: s.calls,
      calls_with_tips: s.withTips,
      upstream_errors: s.upstreamErrors,
      tips_skipped: s.skipped,
      added_ms: { mean: s.calls ? s.addedMs / s.calls : 0, max: s.maxAddedMs, cpu_mean: s.calls ? s.addedCpuMs / s.calls : 0 },
    };
  }
  log(
    `memory proxy at ${url} in front of ${upstreamURL} (${o.upstream.model}); ${store.index.size()} tips in ${o.memory}; tips written by ${writer.name}`,
  );
  return {
    url,
    store,
    startEpisode: (req) => {
      const { id, baseURL, apiKey, task } = handleOf(startEpisode(req));
      return { id, baseURL, apiKey, task };
    },
    stats,
    close: async () => {
      closing = true;
      clearInterval(sweep);
      for (const c of inFlight) c.abort(new Error('closing'));
      writer.close?.();
      await Promise.allSettled([...endings]);
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
      store.close();
    },
  };
}

/**
 * The library's memory proxy (`empo2 memory-proxy` is the same): EMPO²'s tip memory in front of a model
 * that is not trained. Start it, open an episode per attempt with `startEpisode()`, give its `baseURL`
 * and `apiKey` to any OpenAI client, and report the reward at the end by `POST {baseURL}/empo2/reward`.
 */
export function withMemory(options: MemoryProxyOptions): Promise<MemoryProxy> {
  return startMemoryProxy(options);
}
