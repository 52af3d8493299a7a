/**
 * The training gateway: an OpenAI-compatible HTTP server the trainer runs while a user's agent plays
 * its episodes. Every episode gets its own base URL, `{url}/episodes/{id}/v1`, and its own key (the
 * key alone, on `{url}/v1`, also names it), so every call is attributed to its episode exactly, as
 * agent-lightning's proxy gives each rollout attempt its own `/rollout/{id}/attempt/{id}/v1` prefix.
 *
 * Routes under a base URL: GET models, POST chat/completions, completions and responses (OpenAI's
 * Responses API, ../openai/responses/; streaming or not), GET responses/{id} (a response of the episode's
 * own, as answered), and POST empo2/reward (the agent's reward, for agents that cannot return it: ./agent-process.ts).
 * Every completion call is one step of its episode: the messages rendered with the model's chat
 * template, the tips of a memory rollout put in the last user message (./prompt.ts), the call sampled
 * with the other episodes' in lockstep (./batch.ts), and the sampled token ids and log-probs recorded
 * as sampled. Each choice also carries `token_ids` (and `prompt_token_ids` with `return_token_ids`),
 * as vLLM and `empo2 serve` name them.
 */
import { listenOn } from '../util/port.ts';
import { startHttpFront } from '../util/http-front.ts';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { randomBytes, randomUUID } from 'node:crypto';
import type { Generation, TextTokenizer, TokenConstraint } from '../policy/types.ts';
import { jsonFormatConstraint, requireEndTokenIds, toolCallConstraint, type JsonTokenConstraint } from '../policy/index.ts';
import type { ShownTip } from '../run/records.ts';
import { outcomeProblem } from './outcome.ts';
import { policyFingerprint, POLICY_VERSION_HEADER, serveChatCompletion, usage } from '../openai/chat_completion/serving.ts';
import { usesTools } from '../openai/render.ts';
import { answerResponses, answerRetrieve } from '../openai/responses/serving.ts';
import { toolParser, type ToolParser } from '../openai/tool-parsers/index.ts';
import type { ToolCall, TurnBackend, TurnMessage, TurnRequest, TurnResult } from '../openai/types.ts';
import { encodeCall, historyAfter, lastObservation, recordedAction, spliceSampled, turnText, type PromptRendering } from './prompt.ts';
import { GatewayCompletionSchema, readJson, RequestError, RewardReportSchema, errorBody, parseRequest } from './protocol.ts';
import type { CallSlot, EpisodeSession } from './session.ts';
import { RECEIVED_AT_HEADER } from './agent-clock.ts';
import type { CallRequest } from './batch.ts';
import { sendStream, type StreamedAnswer } from './stream.ts';
import { checkBytesFit, checkContext, type PromptLimit } from '../serve/limits.ts';

export interface GatewayOptions {
  /** The id /models lists and answers carry; requests naming another model get a 404. */
  modelName: string;
  rendering: PromptRendering;
  tokenizer: () => TextTokenizer;
  /** The model's context in tokens (the engine's max_position_embeddings); undefined: unknown, prompts are not checked. */
  contextLength?: () => number | undefined;
  /** The tool parser that reads the model's tool calls (`model.tool_parser`; default hermes). */
  toolParser?: string;
  host?: string;
  /** 0 (default) picks a free port. */
  port?: number;
  maxBodyBytes?: number;
  log?: (line: string) => void;
}

/** Tips for a memory rollout's state: what the trainer's tip source answers for one query. */
/** `validActions`: the call's allowed texts (none: free text). */
export type CallTips = (session: EpisodeSession, state: string, validActions: readonly string[]) => Promise<ShownTip[]>;

export interface Gateway {
  url: string;
  /** The base URL an OpenAI client of `session` is given. */
  baseURL(session: EpisodeSession): string;
  /** Makes `session` reachable (its tips, if it uses the memory, from `tips`). */
  add(session: EpisodeSession, tips: CallTips | null): void;
  remove(session: EpisodeSession): void;
  /** The run is stopping: every request from now on is answered 503 with `reason`. */
  stop(reason: string): void;
  /** Requests received and not yet answered, over all episodes. */
  openRequests(): number;
  /** What the trainer is doing now, as `GET /health` tells it (answered at once whatever the trainer does). */
  setPhase(phase: GatewayPhase): void;
  close(): Promise<void>;
}

/** The trainer's phase, and the policy version: the iteration whose weights sample now (0: the initial ones). */
export interface GatewayPhase {
  phase: 'starting' | 'rollout' | 'update' | 'evaluation' | 'checkpoint' | 'finished';
  iteration: number;
  policyVersion: number;
}

interface Ctx extends GatewayOptions {
  parseTools: ToolParser;
  /** What the trainer does now; its policy version stamps every answer. */
  phase: GatewayPhase;
  byId: Map<string, { session: EpisodeSession; tips: CallTips | null }>;
  byKey: Map<string, string>;
  created: number;
  stopped: string | null;
}

export async function startGateway(o: GatewayOptions): Promise<Gateway> {
  const ctx: Ctx = {
    ...o,
    parseTools: toolParser(o.toolParser ?? 'hermes'),
    phase: { phase: 'starting', iteration: 0, policyVersion: 0 },
    byId: new Map(),
    byKey: new Map(),
    created: Math.floor(Date.now() / 1000),
    stopped: null,
  };
  let open = 0;
  const server = createServer((req, res) => {
    open++;
    res.once('close', () => open--);
    void handle(ctx, req, res).catch((e: unknown) => {
      const err = e instanceof RequestError ? e : new RequestError(500, `internal error: ${(e as Error).message}`, null, 'server_error');
      if (err.status >= 500 && err.status !== 503) o.log?.(`gateway error: ${(e as Error).stack ?? String(e)}`); // 503: the run stopping
      if (err.status === 401) res.setHeader('WWW-Authenticate', 'Bearer');
      sendJson(res, err.status, errorBody(err));
    });
  });
  // The server listens on loopback only, behind a front on another thread that owns the public socket
  // and answers while the trainer blocks this one (../util/http-front.ts).
  server.keepAliveTimeout = 0; // the front's connections stay open: closing one idle could meet a request sent on it
  const inner = await listenOn(server, '127.0.0.1', 0);
  const health = () => ({
    model: o.modelName,
    phase: ctx.phase.phase,
    iteration: ctx.phase.iteration,
    policy_version: ctx.phase.policyVersion,
    episodes: ctx.byId.size,
  });
  const front = await startHttpFront({
    host: o.host ?? '127.0.0.1',
    port: o.port ?? 0,
    upstream: { host: inner.address, port: inner.port },
    health: health(),
    onError: (e) => o.log?.(`gateway: its HTTP front failed: ${e.stack ?? e.message}`),
  }).catch((e: unknown) => {
    server.close();
    throw e;
  });
  const addr = front.address;
  const url = `http://${addr.family === 'IPv6' ? `[${addr.address}]` : addr.address}:${addr.port}`;
  return {
    url,
    baseURL: (s) => `${url}/episodes/${s.id}/v1`,
    add: (session, tips) => {
      ctx.byId.set(session.id, { session, tips });
      ctx.byKey.set(session.key, session.id);
      front.setHealth(health());
    },
    remove: (session) => {
      ctx.byId.delete(session.id);
      ctx.byKey.delete(session.key);
      front.setHealth(health());
    },
    stop: (reason) => {
      ctx.stopped = reason;
    },
    openRequests: () => open,
    setPhase: (p) => {
      ctx.phase = p;
      front.setHealth(health());
    },
    close: async () => {
      await front.close();
      await new Promise<void>((resolve, reject) => {
        server.close((e) => (e ? reject(e) : resolve()));
        server.closeAllConnections();
      });
    },
  };
}

/** The episode a request is for: by its path (`/episodes/{id}/v1/...`, the key must match) or by its key alone (`/v1/...`). */
function route(ctx: Ctx, req: IncomingMessage): { entry: { session: EpisodeSession; tips: CallTips | null }; path: string } {
  const url = (req.url ?? '/').split('?')[0].replace(/\/+$/, '');
  const m = /^\/episodes\/([^/]+)(\/v1\/.*)$/.exec(url);
  const auth = req.headers.authorization ?? '';
  const key = /^Bearer\s+(.+)$/i.exec(auth)?.[1]?.trim() ?? null;
  const path = m ? m[2] : url;
  if (!path.startsWith('/v1/'))
    throw new RequestError(404, `no route ${req.method} ${url}: use the episode's base URL ({gateway}/episodes/{id}/v1)`, null);
  if (key === null) throw new RequestError(401, "missing API key: send the episode's key as Authorization: Bearer <key>", null);
  const id = m ? m[1] : ctx.byKey.get(key);
  const entry = id === undefined ? undefined : ctx.byId.get(id);
  if (!entry)
    throw new RequestError(
      404,
      m ? `no episode ${m[1]} is playing on this gateway (it ended, or never started)` : 'no episode has this key',
      null,
    );
  if (entry.session.key !== key) throw new RequestError(401, `wrong API key for episode ${entry.session.id}`, null);
  return { entry, path };
}

async function handle(ctx: Ctx, req: IncomingMessage, res: ServerResponse): Promise<void> {
  if (ctx.stopped !== null) throw new RequestError(503, ctx.stopped, null, 'server_error');
  const { entry, path } = route(ctx, req);
  const { session } = entry;
  const post = async () => {
    if (req.method !== 'POST') throw new RequestError(405, `${path} takes POST, not ${req.method}`, null);
    return readJson(req, ctx.maxBodyBytes ?? 16 << 20, { jsonContentType: true });
  };
  if (path === '/v1/models') {
    if (req.method !== 'GET') throw new RequestError(405, `${path} takes GET, not ${req.method}`, null);
    return sendJson(res, 200, { object: 'list', data: [{ id: ctx.modelName, object: 'model', created: ctx.created, owned_by: 'empo2' }] });
  }
  const retrieve = /^\/v1\/responses\/([^/]+)$/.exec(path);
  if (retrieve) {
    if (req.method !== 'GET') throw new RequestError(405, `${path} takes GET, not ${req.method}`, null);
    return answerRetrieve({
      store: session.responses,
      id: retrieve[1],
      query: new URL(req.url ?? '/', 'http://gateway').searchParams,
      server: GATEWAY_NAME,
      res,
    });
  }
  if (path === '/v1/empo2/reward') {
    const report = parseRequest(RewardReportSchema, await post());
    if ((report.reward === undefined) === (report.score === undefined))
      throw new RequestError(400, 'give either "reward" (1 is success) or "score" (0-100), not both', 'reward');
    session.report = report;
    const bad = outcomeProblem(report);
    if (bad) throw new RequestError(400, `${bad.message}; the episode fails unless a valid report replaces it`, bad.field);
    return sendJson(res, 200, { object: 'empo2.reward', episode: session.id, recorded: true });
  }
  // Open until its answer (an error too: sent after this returns) has gone, so that a player that waits
  // for none to be open returns once every call of its episodes is answered.
  session.openRequests++;
  res.once('close', () => session.openRequests--);
  if (path === '/v1/chat/completions' || path === '/v1/completions' || path === '/v1/responses') {
    inGateway(session, req, res);
    const body = await post();
    // Its step's place, taken as its request is read: calls at once are steps in order of arrival (./session.ts).
    const slot = session.reserve();
    try {
      if (path === '/v1/chat/completions') return await chat(ctx, { entry, res, slot }, body);
      if (path === '/v1/responses') return await responses(ctx, { entry, res, slot }, body);
      return await completion(ctx, { entry, res, slot }, body);
    } finally {
      session.release(slot); // a call that failed leaves no hole (none once it is recorded)
    }
  }
  throw new RequestError(
    404,
    `no route ${req.method} ${path} (routes: GET models, POST chat/completions, completions, responses, GET responses/{id}, POST empo2/reward)`,
    null,
  );
}

/**
 * The call is inside the gateway, its agent's clock standing still (./agent-clock.ts), from when the HTTP
 * front received it until its whole answer is written (`res.end`: not read, which is the agent's business)
 * or the client hung up.
 */
function inGateway(session: EpisodeSession, req: IncomingMessage, res: ServerResponse): void {
  const stamp = req.headers[RECEIVED_AT_HEADER];
  const done = session.clock.arrived(typeof stamp === 'string' && /^\d+$/.test(stamp) ? Number(stamp) : undefined);
  res.once('close', done);
  const end = res.end.bind(res) as (...args: unknown[]) => ServerResponse;
  res.end = ((...args: unknown[]) => {
    const r = end(...args);
    done();
    return r;
  }) as ServerResponse['end'];
}

interface CallCtx {
  entry: { session: EpisodeSession; tips: CallTips | null };
  res: ServerResponse;
  slot: CallSlot;
}

function checkModel(ctx: Ctx, model: string | undefined): void {
  if (model !== undefined && model !== ctx.modelName)
    throw new RequestError(
      404,
      `model "${model}" is not trained here (this gateway trains "${ctx.modelName}")`,
      'model',
      'not_found_error',
      'model_not_found',
    );
}

/**
 * The response tokens this call may have: within the request's ask, the per-call cap and what the episode
 * has left. A call beyond the episode's calls at once is refused and the episode goes on; one beyond its
 * calls (those in flight count: the call's own slot is taken) ends it.
 */
function callBudget(session: EpisodeSession, asked: number | null | undefined): number {
  const { budget } = session.o;
  if (session.ended) throw session.endedError();
  if (session.inFlight() > budget.maxConcurrentCalls)
    throw new RequestError(
      429,
      `episode ${session.id} has ${budget.maxConcurrentCalls} calls in flight, the most it may have at once ` +
        '(maxConcurrentCalls, --agent-max-concurrent-calls): send this call again once one is answered',
      null,
      'rate_limit_error',
      'rate_limit_exceeded',
    );
  if (session.callsMade() > budget.maxCalls) {
    session.end(`went over its budget of ${budget.maxCalls} calls`);
    throw new RequestError(
      429,
      `episode ${session.id} went over its budget of ${budget.maxCalls} calls; it has ended`,
      null,
      'rate_limit_error',
    );
  }
  const left = budget.maxTokens - session.completionTokens;
  if (left <= 0) {
    session.end(`went over its budget of ${budget.maxTokens} response tokens`);
    throw new RequestError(
      429,
      `episode ${session.id} went over its budget of ${budget.maxTokens} response tokens; it has ended`,
      null,
      'rate_limit_error',
    );
  }
  return Math.min(asked ?? budget.maxTokensPerCall, budget.maxTokensPerCall, left);
}

/** The context a call's prompt must fit in, where the engine knows it. */
function promptLimit(ctx: Ctx): PromptLimit | null {
  const context = ctx.contextLength?.();
  return context === undefined ? null : { tokenizer: ctx.tokenizer(), maxModelLen: context };
}

/**
 * A prompt that cannot fit in the context with the call's max tokens (the request's max_tokens, at most
 * rollout.max_tokens) ends its episode as failed with the 400 as its reason, as the built-in rollout ends
 * an episode whose prompt outgrows the context: refusing before sampling keeps the batch's other episodes
 * going (it is never sent to the engine) and keeps an over-long prompt out of the update. Refusing
 * prompt + max tokens, not the prompt alone, is vLLM's rule (a 400 when it exceeds max_model_len).
 */
function refusePrompt(session: EpisodeSession, check: () => unknown): void {
  try {
    check();
  } catch (e) {
    if (!(e instanceof RequestError)) throw e;
    session.end(`a call's prompt was refused: ${e.message}`);
    const said = e.message.endsWith('.') ? e.message : `${e.message}.`;
    throw new RequestError(e.status, `${said} Episode ${session.id} has ended.`, e.param, e.type, e.code);
  }
}

/** Samples one step of `session`: waits for its lockstep batch; a client that hangs up (`signal`) takes its call out. */
async function sampleStep(session: EpisodeSession, signal: AbortSignal, call: CallRequest): Promise<Generation> {
  const gone = () => session.o.batch.cancel(session, signal.reason, call);
  signal.addEventListener('abort', gone);
  try {
    let g: Generation;
    try {
      g = await session.o.batch.submit(session, call);
    } catch (e) {
      if (e instanceof RequestError) throw e;
      if (session.ended) throw session.endedError();
      // The engine could not sample this call (the batch sampled the others apart from it: ./batch.ts).
      const why = `the engine failed on its call: ${e instanceof Error ? e.message : String(e)}`;
      session.end(why);
      throw new RequestError(500, `${why}; episode ${session.id} has ended`, null, 'server_error');
    }
    if (session.ended) throw session.endedError();
    return g;
  } finally {
    signal.removeEventListener('abort', gone);
  }
}

/** Aborts when the client hangs up before its answer is written. */
function hangUp(res: ServerResponse): { signal: AbortSignal; done: () => void } {
  const abort = new AbortController();
  const gone = () => {
    if (!res.writableFinished) abort.abort(new RequestError(499, 'the client closed the connection', null));
  };
  res.once('close', gone);
  return { signal: abort.signal, done: () => res.off('close', gone) };
}

/** Who answers, in the protocol layer's error messages. */
const GATEWAY_NAME = 'the empo2 gateway';

/** A chat call, through the protocol layer, sampled as one step of its episode. */
async function chat(ctx: Ctx, c: CallCtx, body: unknown): Promise<void> {
  return serveChatCompletion(episodeBackend(ctx, c.entry, c.slot), body, c.res);
}

/** A Responses call, through the protocol layer, sampled as one step of its episode; `previous_response_id` names one of its own. */
async function responses(ctx: Ctx, c: CallCtx, body: unknown): Promise<void> {
  const client = hangUp(c.res);
  try {
    await answerResponses({
      backend: episodeBackend(ctx, c.entry, c.slot),
      store: c.entry.session.responses,
      body,
      res: c.res,
      signal: client.signal,
    });
  } finally {
    client.done();
  }
}

/** The protocol layer's backend for one call of an episode: a turn is a step. */
function episodeBackend(ctx: Ctx, entry: CallCtx['entry'], slot: CallSlot): TurnBackend {
  return {
    modelName: ctx.modelName,
    serverName: GATEWAY_NAME,
    tokenizer: ctx.tokenizer,
    turn: (req, o) => episodeTurn(ctx, entry, slot, req, o.signal),
  };
}

/**
 * One step: the episode's budget, the prompt's limits, the memory's tips on the state (the last
 * observation), the prompt encoded with the sampled turns kept as sampled, the call sampled in its batch,
 * the answer's tool calls parsed, and the step recorded.
 */
async function episodeTurn(ctx: Ctx, entry: CallCtx['entry'], slot: CallSlot, req: TurnRequest, signal: AbortSignal): Promise<TurnResult> {
  const { session, tips: tipSource } = entry;
  const maxTokens = callBudget(session, req.maxTokens);
  const limit = promptLimit(ctx);
  // Measured before the memory is asked for tips on the state or anything is tokenised (a 10 MB message took 23-50 s to tokenise).
  // The tools are rendered into the prompt too.
  const bytes =
    req.messages.reduce((n, m) => n + messageBytes(m), 0) + (req.tools.length ? Buffer.byteLength(JSON.stringify(req.tools), 'utf8') : 0);
  const field = req.messagesField ?? 'messages';
  if (limit) refusePrompt(session, () => checkBytesFit(limit, bytes, maxTokens, field));
  const u = lastObservation(req.messages);
  const state = req.state ?? turnText(req.messages[u >= 0 ? u : req.messages.length - 1]);
  // The state's valid actions as the agent names them; a constrained call's allowed texts are them otherwise.
  const valid = req.validActions ?? req.allowedTexts ?? [];
  const shown = u >= 0 && session.o.usesMemory && tipSource ? await tipSource(session, state, valid) : [];
  const tok = ctx.tokenizer();
  const spliced = spliceSampled(session.turns, req.messages);
  const encoded = encodeCall(tok, ctx.rendering, {
    messages: spliced.messages,
    tools: req.tools,
    tips: shown.map((t) => t.text),
    previous: session.history(),
  });
  if (limit) refusePrompt(session, () => checkContext(encoded.ids.length, maxTokens, limit.maxModelLen, field));
  const forced = forcedAnswer(ctx, req, tok);
  const g = await sampleStep(session, signal, {
    prompt: encoded.ids,
    maxTokens,
    stop: req.stop,
    allowedTexts: forced && 'allowedTexts' in forced ? forced.allowedTexts : (req.allowedTexts ?? null),
    constraint: forced && 'constraint' in forced ? forced.constraint : null,
    forced: forced !== null,
  });
  const text = cutAtStop(g.text, req.stop);
  // An answer constrained to a JSON format is that JSON, not a call (unless a call was forced).
  const jsonOnly = req.format.type !== 'text' && req.toolChoice !== 'required' && typeof req.toolChoice !== 'object';
  const parsed =
    req.tools.length > 0 && req.toolChoice !== 'none' && !jsonOnly
      ? ctx.parseTools(text, { tools: req.tools })
      : { content: text, calls: [], malformed: null };
  // parallel_tool_calls false: at most one call goes back (the sampled text, both calls in it, is what is trained on).
  const calls = req.parallelToolCalls ? parsed.calls : parsed.calls.slice(0, 1);
  const toolCalls = calls.map((call) => ({ id: `call_${randomBytes(12).toString('hex')}`, ...call }));
  const hadAssistant = req.messages.some((m) => m.role === 'assistant');
  const tokenExact = spliced.exact && (!hadAssistant || encoded.extended !== null);
  // Recorded for tool conversations: a plain-text call's step stays the built-in rollout's step, field for field.
  const facts = usesTools(req.messages, req.tools)
    ? { call: { tokenExact, ...(parsed.malformed !== null ? { malformedToolCall: parsed.malformed } : {}) } }
    : {};
  session.record(
    slot,
    {
      observation: state,
      validActions: valid.slice(0, session.o.keptValidActions),
      validActionCount: valid.length,
      prompt: encoded.ids,
      tipSpan: encoded.tipSpan,
      response: g.tokens,
      logprobs: g.logprobs,
      action: toolCalls.length > 0 ? callsAction(toolCalls) : recordedAction(ctx.rendering, parsed.content ?? '', valid),
      ...facts,
    },
    shown,
  );
  session.answered(historyAfter(tok, encoded, g.tokens), encoded.extended);
  session.turns.push({ text: g.text, content: parsed.content, toolCalls });
  return {
    content: parsed.content,
    toolCalls,
    finishReason: toolCalls.length > 0 ? 'tool_calls' : g.finish,
    generation: g,
    promptIds: encoded.ids,
    policyVersion: ctx.phase.policyVersion,
  };
}

/** Forced answers with at most this many texts are sampled as allowed texts (every engine takes them). */
const FINITE_ANSWERS = 256;

/**
 * The constraint of a call whose answer is decided by its form (and no `allowed_texts` of the agent's
 * own): a call that must call a tool (`tool_choice` "required" or a named function) is decoded as one
 * valid call of the tools' JSON Schemas in the run's tool-call format, and a `response_format` of JSON as
 * JSON (for its schema), as the built-in rollout limits its actions to the valid ones; the recorded
 * log-probs are the policy's own (../policy/json-constraint.ts). Where a constraint leaves few texts
 * (enums), they are sampled as allowed texts, which every engine takes. (The protocol layer has checked
 * that the schemas can be constrained, naming the field.)
 */
function forcedAnswer(
  ctx: Ctx,
  req: TurnRequest,
  tok: TextTokenizer,
): { allowedTexts: readonly string[] } | { constraint: TokenConstraint } | null {
  if (req.allowedTexts) return null;
  const choice = req.toolChoice;
  const callForced = req.tools.length > 0 && (choice === 'required' || typeof choice === 'object');
  if (!callForced && req.format.type === 'text') return null;
  const base = { tokenizer: tok, endTokens: requireEndTokenIds(tok, "the model's tokenizer"), finiteLimit: FINITE_ANSWERS };
  let c: JsonTokenConstraint;
  if (callForced) {
    const parser = ctx.toolParser ?? 'hermes';
    if (parser !== 'hermes' && parser !== 'llama3_json')
      throw new RequestError(
        400,
        `tool_choice ${JSON.stringify(choice)} needs model.tool_parser hermes or llama3_json to constrain the call to (this run reads calls with "${parser}")`,
        'tool_choice',
      );
    c = toolCallConstraint({ ...base, tools: req.tools, choice: choice as 'required' | { name: string }, parser });
  } else {
    const f = req.format;
    c = jsonFormatConstraint(f.type === 'json_schema' ? { type: 'json_schema', schema: f.schema } : { type: 'json_object' }, base);
  }
  const texts = c.finiteTexts();
  return texts ? { allowedTexts: texts } : { constraint: c };
}

/** A step's action when the answer is tool calls: each as `name {arguments}` (what the memory and GiGPO compare). */
function callsAction(calls: readonly ToolCall[]): string {
  return calls.map((c) => `${c.name} ${c.arguments}`).join('; ');
}

function messageBytes(m: TurnMessage): number {
  const calls = m.role === 'assistant' ? m.toolCalls.reduce((n, c) => n + Buffer.byteLength(c.arguments, 'utf8') + c.name.length, 0) : 0;
  return Buffer.byteLength(turnText(m), 'utf8') + calls;
}

async function completion(ctx: Ctx, c: CallCtx, body: unknown): Promise<void> {
  const r = parseRequest(GatewayCompletionSchema, body, { server: GATEWAY_NAME });
  checkModel(ctx, r.model);
  const { session } = c.entry;
  const maxTokens = callBudget(session, r.max_tokens);
  const tok = ctx.tokenizer();
  const limit = promptLimit(ctx);
  if (limit) refusePrompt(session, () => checkBytesFit(limit, Buffer.byteLength(r.prompt, 'utf8'), maxTokens, 'prompt'));
  // A raw prompt has no user message to put tips in: text completions play without the memory's tips.
  const prompt = tok.encode(r.prompt);
  if (prompt.length === 0) throw new RequestError(400, '"prompt" encodes to no tokens', 'prompt');
  if (limit) refusePrompt(session, () => checkContext(prompt.length, maxTokens, limit.maxModelLen, 'prompt'));
  const stop = r.stop == null ? [] : typeof r.stop === 'string' ? [r.stop] : r.stop;
  const client = hangUp(c.res);
  let g: Generation;
  try {
    g = await sampleStep(session, client.signal, { prompt, maxTokens, stop, allowedTexts: r.allowed_texts ?? null });
  } finally {
    client.done();
  }
  const text = cutAtStop(g.text, stop);
  const state = r.empo2_state ?? r.prompt;
  const valid = r.empo2_valid_actions ?? r.allowed_texts ?? [];
  session.record(
    c.slot,
    {
      observation: state,
      validActions: valid.slice(0, session.o.keptValidActions),
      validActionCount: valid.length,
      prompt,
      tipSpan: null,
      response: g.tokens,
      logprobs: g.logprobs,
      action: text.trim(),
    },
    [],
  );
  const answer: StreamedAnswer = {
    id: `cmpl-${randomUUID()}`,
    model: ctx.modelName,
    content: text,
    generation: g,
    promptTokens: prompt.length,
    policyVersion: ctx.phase.policyVersion,
  };
  if (r.stream) return sendStream(c.res, tok, answer, { logprobs: r.logprobs != null, usage: !!r.stream_options?.include_usage });
  const labels = g.tokens.map((id) => tok.decode([id]));
  c.res.setHeader(POLICY_VERSION_HEADER, String(answer.policyVersion));
  sendJson(c.res, 200, {
    id: answer.id,
    object: 'text_completion',
    created: Math.floor(Date.now() / 1000),
    model: ctx.modelName,
    system_fingerprint: policyFingerprint(answer.policyVersion),
    choices: [
      {
        index: 0,
        text,
        logprobs:
          r.logprobs != null ? { tokens: labels, token_logprobs: g.logprobs, top_logprobs: null, text_offset: offsets(labels) } : null,
        finish_reason: g.finish,
        token_ids: g.tokens,
        ...(r.return_token_ids ? { prompt_token_ids: prompt } : {}),
      },
    ],
    usage: usage(prompt.length, g.tokens.length),
  });
}

function offsets(labels: string[]): number[] {
  let at = 0;
  return labels.map((l) => {
    const o = at;
    at += l.length;
    return o;
  });
}

/** Response text as OpenAI returns it: cut before the first stop string. */
function cutAtStop(text: string, stop: readonly string[]): string {
  let end = text.length;
  for (const s of stop) {
    const at = text.indexOf(s);
    if (at >= 0 && at < end) end = at;
  }
  return text.slice(0, end);
}

export function sendJson(res: ServerResponse, status: number, body: unknown): void {
  if (res.headersSent) {
    // An error after a stream started: said as an event, as OpenAI's servers do.
    if (!res.writableEnded) res.end(`data: ${JSON.stringify(body)}\n\n`);
    return;
  }
  if (res.destroyed) return;
  const text = JSON.stringify(body);
  res.writeHead(status, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(text) });
  res.end(text);
}
