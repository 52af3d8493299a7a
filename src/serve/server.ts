/**
 * `empo2 serve`: an OpenAI-compatible HTTP API over a PolicyEngine (node:http, no framework: three
 * JSON routes do not need one).
 *
 * Routes: GET /v1/models, POST /v1/completions, POST /v1/chat/completions, POST /v1/responses and GET
 * /v1/responses/{id} (the last three through the OpenAI protocol layer the training gateway answers through
 * too, ../openai/chat_completion/ and ../openai/responses/, sampled by ./turn.ts: tools, structured outputs,
 * the policy version) (and, with
 * weight updates allowed, /v1/empo2/load_weights and vLLM's runtime LoRA routes, ./lora.ts). Beyond OpenAI's
 * fields, every choice carries `token_ids` (the sampled ids, the end-of-turn token included when
 * the model emitted it) and, with `return_token_ids: true`, `prompt_token_ids`, as vLLM names
 * them; `return_tokens_as_token_ids: true` writes logprob tokens as "token_id:N" (vLLM's option);
 * `allowed_texts` constrains the response to one of the given texts. Log-probs of generated tokens
 * are those the engine sampled from: softmax(logits / temperature), before top-p and before the
 * allowed-text constraint. Echoed prompt log-probs are at temperature 1.
 *
 * One request cannot stall the server: its work is bounded (limits.ts), generation yields between
 * tokens and stops when its clients hang up (queue.ts). Web pages cannot drive it (access.ts).
 */
import { listenOn } from '../util/port.ts';
import { startHttpFront } from '../util/http-front.ts';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { randomUUID } from 'node:crypto';
import { realpathSync } from 'node:fs';
import { resolve } from 'node:path';
import type { Generation, PolicyEngine, TextTokenizer } from '../policy/types.ts';
import type { ChatTemplate } from '../policy/index.ts';
import { checkAccess, checkJsonContentType, type AccessRules } from './access.ts';
import { allowedHostNames } from '../util/host-check.ts';
import { EngineQueue, QueueFullError, type ServedEngine } from './queue.ts';
import { AdapterRegistry, PlainText, isUnder, type AdapterReader } from './lora.ts';
import { answerResponses, answerRetrieve } from '../openai/responses/serving.ts';
import { serveChatCompletion } from '../openai/chat_completion/serving.ts';
import { ResponseStore } from '../openai/responses/store.ts';
import type { TurnBackend } from '../openai/types.ts';
import { cutAtStop, serveTurnBackend } from './turn.ts';
import {
  DEFAULT_MAX_REQUEST_TOKENS,
  checkAllowedTexts,
  checkChatCounts,
  checkCompletionCounts,
  checkPrompt,
  checkTextFits,
  servedLimit,
  checkWork,
  longestTokenBytes,
} from './limits.ts';
import { CompletionRequestSchema, RequestError, errorBody, parseRequest, readJson, type CompletionRequest } from './protocol.ts';

export interface ServeOptions {
  engine: PolicyEngine;
  /** The id /v1/models lists; requests naming another model get a 404. */
  modelName: string;
  host?: string;
  /** 0 picks a free port. */
  port?: number;
  /** Token ids must be below this (the model's vocab_size); default the tokenizer's size. */
  vocabSize?: number;
  /** Prompt plus max_tokens may not exceed this (the model's max_position_embeddings). */
  maxModelLen?: number;
  /** Chat requests without max_tokens generate at most this many tokens. */
  defaultChatMaxTokens?: number;
  maxBodyBytes?: number;
  /** The work one request may ask for: prompts × (longest prompt + max_tokens), in tokens. */
  maxRequestTokens?: number;
  /** Requests waiting for the engine beyond this are answered 503. */
  maxQueuedRequests?: number;
  /** When set, every request must carry `Authorization: Bearer <apiKey>`; required by loadWeights. */
  apiKey?: string;
  /** Host names clients may reach the server under, besides its IP addresses (and localhost on loopback). */
  allowedHosts?: string[];
  log?: (line: string) => void;
  /**
   * The model's chat template where it renders tools itself (./load.ts `toolTemplateOf`): tool
   * conversations render through it, as vLLM renders them; without one, the ChatML + Hermes default.
   */
  toolTemplate?: ChatTemplate | null;
  /**
   * Enables POST /v1/empo2/load_weights {"path": dir}: a trainer pushes its current policy (a model
   * directory under one of `roots`) so the next requests sample from it. Needs `apiKey`.
   */
  loadWeights?: WeightUpdates;
}

export interface WeightUpdates {
  /** Only directories under these (after resolving symbolic links) are loaded. */
  roots: string[];
  load: (dir: string) => Promise<ServedEngine>;
  /** Reads PEFT LoRA adapters for the served engine: enables /v1/load_lora_adapter and /v1/unload_lora_adapter (./lora.ts). */
  readAdapter?: AdapterReader;
}

export interface RunningServer {
  url: string;
  host: string;
  port: number;
  queue: EngineQueue;
  close(): Promise<void>;
}

const COMPLETION_DEFAULT_MAX_TOKENS = 16; // OpenAI's default for /v1/completions

export async function startServer(o: ServeOptions): Promise<RunningServer> {
  if (o.loadWeights && !o.apiKey) throw new Error('weight updates (load_weights) need an API key: give --api-key or set EMPO2_API_KEY');
  const weightRoots = (o.loadWeights?.roots ?? []).map((root) => {
    try {
      return realpathSync(root);
    } catch {
      throw new Error(`weight root ${root} does not exist`);
    }
  });
  if (o.loadWeights && weightRoots.length === 0)
    throw new Error('weight updates (load_weights) need at least one root directory to load from (--weights-root)');
  const maxRequestTokens = o.maxRequestTokens ?? DEFAULT_MAX_REQUEST_TOKENS;
  longestTokenBytes(o.engine.tokenizer); // a pass over the vocabulary, done before the first request
  const read = o.loadWeights?.readAdapter;
  const adapters: AdapterRegistry | null = read
    ? new AdapterRegistry({ baseName: o.modelName, roots: weightRoots, read, queue: () => queue, log: o.log })
    : null;
  const queue: EngineQueue = new EngineQueue(
    { engine: o.engine, vocabSize: o.vocabSize ?? o.engine.tokenizer.vocabSize, maxModelLen: o.maxModelLen ?? Number.POSITIVE_INFINITY },
    {
      maxBatchTokens: maxRequestTokens,
      maxPending: o.maxQueuedRequests ?? 256,
      useAdapter: adapters ? (name, served) => adapters.use(name, served) : undefined,
    },
  );
  const created = Math.floor(Date.now() / 1000);
  // A host given by name (`--host myhost.lan`) is one of the names the server answers to.
  const allowedHosts = allowedHostNames(o.host, o.allowedHosts);
  const ctx: Ctx = {
    ...o,
    queue,
    adapters,
    weightRoots,
    maxRequestTokens,
    defaultChatMaxTokens: o.defaultChatMaxTokens ?? 256,
    maxBodyBytes: o.maxBodyBytes ?? 16 << 20,
    access: { boundAddress: '', allowedHosts, apiKey: o.apiKey },
    weightLoads: 0,
    turns: serveTurnBackend({
      queue,
      modelName: o.modelName,
      adapterOf: (model) => adapterOf(ctx, model), // called per request, once ctx is there
      defaultMaxTokens: o.defaultChatMaxTokens ?? 256,
      maxRequestTokens,
      versionOf: (adapter) => (adapter === null ? ctx.weightLoads : (adapters?.loadsOf(adapter) ?? 0)),
      toolTemplate: o.toolTemplate ?? null,
    }),
    // One store for the server (its clients are not told apart): ids are 128 random bits, not guessable.
    responses: new ResponseStore({ scope: 'this server', capacity: 1024 }),
  };
  const server = createServer((req, res) => {
    void handle(ctx, created, req, res).catch((e: unknown) => {
      const err =
        e instanceof RequestError
          ? e
          : e instanceof QueueFullError
            ? new RequestError(503, e.message, null, 'server_error')
            : new RequestError(500, `internal error: ${(e as Error).message}`, null, 'server_error');
      if (err.status >= 500 && !(e instanceof QueueFullError)) o.log?.(`error: ${(e as Error).stack ?? String(e)}`);
      if (err.status === 401) res.setHeader('WWW-Authenticate', 'Bearer');
      if (err.status === 503) res.setHeader('Retry-After', '1');
      send(res, err.status, errorBody(err));
    });
  });
  // The server listens on loopback only, behind a front on another thread that owns the public socket
  // and answers while a computation blocks this one (../util/http-front.ts).
  server.keepAliveTimeout = 0; // the front's connections stay open: closing one idle could meet a request sent on it
  const inner = await listenOn(server, '127.0.0.1', 0);
  const front = await startHttpFront({
    host: o.host ?? '127.0.0.1',
    port: o.port ?? 8000,
    upstream: { host: inner.address, port: inner.port },
    health: { model: o.modelName },
    onError: (e) => o.log?.(`error: the HTTP front failed: ${e.stack ?? e.message}`),
  }).catch((e: unknown) => {
    server.close();
    throw e;
  });
  const addr = front.address;
  ctx.access.boundAddress = addr.address;
  const hostForUrl = addr.family === 'IPv6' ? `[${addr.address}]` : addr.address;
  return {
    url: `http://${hostForUrl}:${addr.port}`,
    host: addr.address,
    port: addr.port,
    queue,
    close: async () => {
      await front.close();
      await new Promise<void>((resolve, reject) => {
        server.close((e) => (e ? reject(e) : resolve()));
        server.closeAllConnections();
      });
    },
  };
}

async function loadWeights(ctx: Ctx, body: unknown): Promise<unknown> {
  const updates = ctx.loadWeights;
  if (!updates) throw new RequestError(403, 'weight updates are off: start the server with --allow-weight-updates', null);
  const path = (body as { path?: unknown } | null)?.path;
  if (typeof path !== 'string' || path.length === 0)
    throw new RequestError(400, 'path must be a non-empty string (a model directory)', 'path');
  // One answer for every failure, so that a client learns nothing about paths it cannot load
  // (whether they exist, what they hold); the server's log has the reason.
  const refuse = (why: string) => {
    ctx.log?.(`load_weights ${JSON.stringify(path)} refused: ${why}`);
    return new RequestError(
      400,
      `cannot load weights from ${JSON.stringify(path)}: give a model or run directory under one of the server's weight roots (its log says what failed)`,
      'path',
    );
  };
  let dir: string;
  try {
    dir = realpathSync(resolve(path));
  } catch (e) {
    throw refuse((e as Error).message);
  }
  if (!ctx.weightRoots.some((root) => isUnder(root, dir)))
    throw refuse(`${dir} is not under a weight root (${ctx.weightRoots.join(', ')})`);
  try {
    await ctx.queue.swapEngine(async () => {
      const next = await updates.load(dir);
      // Adapters were read for the weights being replaced.
      ctx.adapters?.clear();
      ctx.weightLoads++;
      return next;
    });
  } catch (e) {
    throw refuse((e as Error).message);
  }
  ctx.log?.(`loaded weights from ${dir}`);
  return { object: 'empo2.load_weights', path, loaded: true };
}

interface Ctx extends ServeOptions {
  queue: EngineQueue;
  /** What the protocol layer's endpoints (chat completions, responses) answer through, and the responses they keep. */
  turns: TurnBackend;
  /** Base weights loaded by load_weights since the start: the base model's policy version (./turn.ts). */
  weightLoads: number;
  responses: ResponseStore;
  adapters: AdapterRegistry | null;
  weightRoots: string[];
  maxRequestTokens: number;
  defaultChatMaxTokens: number;
  maxBodyBytes: number;
  access: AccessRules;
}

async function handle(ctx: Ctx, created: number, req: IncomingMessage, res: ServerResponse): Promise<void> {
  checkAccess(ctx.access, req);
  // Aborted when the client hangs up before its answer: its work is dropped or stopped.
  const client = new AbortController();
  res.on('close', () => {
    if (!res.writableFinished) client.abort(new Error('the client closed the connection'));
  });
  const signal = client.signal;
  const path = (req.url ?? '/').split('?')[0].replace(/\/+$/, '');
  const body = async () => {
    checkJsonContentType(req);
    return readJson(req, ctx.maxBodyBytes);
  };
  const routes: Record<string, { method: string; run: () => Promise<unknown> }> = {
    '/v1/models': {
      method: 'GET',
      run: async () => {
        const { maxModelLen } = ctx.queue.current;
        const lora = (ctx.adapters?.list() ?? []).map((a) => ({
          id: a.name,
          object: 'model',
          created,
          owned_by: 'empo2',
          root: a.path,
          parent: ctx.modelName,
        }));
        return {
          object: 'list',
          data: [
            {
              id: ctx.modelName,
              object: 'model',
              created,
              owned_by: 'empo2',
              ...(Number.isFinite(maxModelLen) ? { max_model_len: maxModelLen } : {}),
            },
            ...lora,
          ],
        };
      },
    },
    // Item counts are checked before validation, which looks at every item.
    '/v1/completions': {
      method: 'POST',
      run: async () => {
        const b = await body();
        checkCompletionCounts(b, COMPLETION_DEFAULT_MAX_TOKENS, ctx.maxRequestTokens);
        return completions(ctx, parseRequest(CompletionRequestSchema, b), signal);
      },
    },
    '/v1/chat/completions': {
      method: 'POST',
      // Written by the protocol layer itself (JSON or events), as /v1/responses below.
      run: async () => {
        const b = await body();
        checkChatCounts(b);
        await serveChatCompletion(ctx.turns, b, res);
      },
    },
    '/v1/responses': {
      method: 'POST',
      // Written by the protocol layer itself (JSON or events); send() below then has nothing to add.
      run: async () => answerResponses({ backend: ctx.turns, store: ctx.responses, body: await body(), res, signal }),
    },
    '/v1/empo2/load_weights': { method: 'POST', run: async () => loadWeights(ctx, await body()) },
  };
  const adapters = ctx.adapters;
  if (adapters) {
    routes['/v1/load_lora_adapter'] = { method: 'POST', run: async () => adapters.load(await body()) };
    routes['/v1/unload_lora_adapter'] = { method: 'POST', run: async () => adapters.unload(await body()) };
  }
  const retrieve = /^\/v1\/responses\/([^/]+)$/.exec(path);
  if (retrieve)
    routes[path] = {
      method: 'GET',
      // Written by the protocol layer itself.
      run: async () =>
        answerRetrieve({
          store: ctx.responses,
          id: retrieve[1],
          query: new URL(req.url ?? '/', 'http://serve').searchParams,
          server: ctx.turns.serverName,
          res,
        }),
    };
  const route = routes[path];
  if (!route)
    throw new RequestError(
      404,
      `no route ${req.method} ${path} (routes: GET /v1/models, POST /v1/completions, POST /v1/chat/completions, POST /v1/responses, GET /v1/responses/{id}${
        /_lora_adapter$/.test(path) ? '; runtime LoRA adapters need --allow-weight-updates' : ''
      })`,
      null,
    );
  if (req.method !== route.method) {
    res.setHeader('Allow', route.method);
    throw new RequestError(405, `${path} takes ${route.method}, not ${req.method}`, null);
  }
  const result = await route.run();
  if (result instanceof PlainText) sendText(res, result.text);
  else send(res, 200, result);
}

function sendText(res: ServerResponse, text: string): void {
  if (res.headersSent || res.destroyed) return;
  res.writeHead(200, { 'Content-Type': 'text/plain; charset=utf-8', 'Content-Length': Buffer.byteLength(text) });
  res.end(text);
}

function send(res: ServerResponse, status: number, body: unknown): void {
  if (res.headersSent || res.destroyed) return;
  const text = JSON.stringify(body);
  res.writeHead(status, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(text) });
  res.end(text);
}

/** The adapter a request names as its model (null: the base model); a 404 for a name not served. */
function adapterOf(ctx: Ctx, model: string | undefined): string | null {
  if (model === undefined || model === ctx.modelName) return null;
  if (ctx.adapters?.has(model)) return model;
  const names = [ctx.modelName, ...(ctx.adapters?.list() ?? []).map((a) => a.name)];
  throw new RequestError(
    404,
    `model "${model}" is not served here (this server serves ${names.map((n) => `"${n}"`).join(', ')})`,
    'model',
    'not_found_error',
    'model_not_found',
  );
}

interface Sampling {
  temperature: number;
  topP: number;
  stop: string[];
  seed: number | null;
}

function samplingOf(r: CompletionRequest): Sampling {
  return {
    temperature: r.temperature ?? 1,
    topP: r.top_p ?? 1,
    stop: r.stop == null ? [] : typeof r.stop === 'string' ? [r.stop] : r.stop,
    seed: r.seed ?? null,
  };
}

/** The largest of `values` (0 for none), without spreading a request-sized array into Math.max. */
function longestOf(values: readonly number[]): number {
  return values.reduce((m, v) => Math.max(m, v), 0);
}

function tokenLabel(tok: TextTokenizer, id: number, asIds: boolean): string {
  return asIds ? `token_id:${id}` : tok.decode([id]);
}

/**
 * Character offset of each token in the decoded text of `ids`, in one pass (decoding every prefix
 * took 27 s for a 4,090-token echo). A token that starts inside a character gets that character's
 * offset.
 */
function textOffsets(tok: TextTokenizer, ids: number[]): number[] {
  const stream = (tok as { streamDecoder?: () => { push(id: number): string } }).streamDecoder?.();
  const offsets: number[] = new Array(ids.length);
  let length = 0;
  ids.forEach((id, k) => {
    offsets[k] = length;
    length += stream ? stream.push(id).length : tok.decode([id]).length;
  });
  return offsets;
}

function usage(promptTokens: number, completionTokens: number) {
  return { prompt_tokens: promptTokens, completion_tokens: completionTokens, total_tokens: promptTokens + completionTokens };
}

async function completions(ctx: Ctx, r: CompletionRequest, signal: AbortSignal) {
  const adapter = adapterOf(ctx, r.model);
  const served = ctx.queue.current;
  const tok = served.engine.tokenizer;
  const maxTokens = r.max_tokens ?? COMPLETION_DEFAULT_MAX_TOKENS;
  const a = r.allowed_texts;
  // Measured before anything is tokenised; with max_tokens 0 nothing is generated and they are not used.
  if (a && maxTokens > 0) {
    if (typeof a[0] === 'string') checkAllowedTexts(served, [a as string[]], maxTokens, (_, j) => `allowed_texts[${j}]`);
    else {
      const given = (a as (string[] | null)[]).flatMap((list, i) => (list ? [{ list, i }] : []));
      checkAllowedTexts(
        served,
        given.map((g) => g.list),
        maxTokens,
        (k, j) => `allowed_texts[${given[k].i}][${j}]`,
      );
    }
  }
  const p = r.prompt;
  // Normalise the four prompt shapes to token ids, remembering how to name an element in errors.
  // Texts are measured before they are tokenised: one that cannot fit is not worth the time.
  let prompts: number[][];
  let texts: (string | null)[];
  let param: (i: number, j: number | null) => string;
  const encodeAll = (all: string[], name: (i: number) => string): number[][] => {
    const least = all.map((t, i) => checkTextFits(servedLimit(served), t, maxTokens, name(i)));
    checkWork(all.length, longestOf(least), maxTokens, ctx.maxRequestTokens, 'prompt');
    return all.map((t) => tok.encode(t));
  };
  if (typeof p === 'string') {
    texts = [p];
    prompts = encodeAll([p], () => 'prompt');
    param = () => 'prompt';
  } else if (typeof p[0] === 'string') {
    texts = p as string[];
    prompts = encodeAll(p as string[], (i) => `prompt[${i}]`);
    param = (i) => `prompt[${i}]`;
  } else if (typeof p[0] === 'number') {
    prompts = [p as number[]];
    texts = [null];
    param = (_, j) => (j === null ? 'prompt' : `prompt[${j}]`);
  } else {
    prompts = p as number[][];
    texts = prompts.map(() => null);
    param = (i, j) => (j === null ? `prompt[${i}]` : `prompt[${i}][${j}]`);
  }
  checkWork(prompts.length, longestOf(prompts.map((ids) => ids.length)), maxTokens, ctx.maxRequestTokens, 'prompt');
  // Checked now for a prompt answer, and again by the engine that runs it (a weight swap may come first).
  const check = (s: ServedEngine) => prompts.forEach((ids, i) => checkPrompt(s, ids, (j) => param(i, j), maxTokens));
  check(served);

  let allowedTexts: (string[] | null)[] | undefined;
  if (a) {
    if (typeof a[0] === 'string') allowedTexts = prompts.map(() => a as string[]);
    else if (a.length !== prompts.length)
      throw new RequestError(400, `"allowed_texts" has ${a.length} lists but there are ${prompts.length} prompts`, 'allowed_texts');
    else allowedTexts = a as (string[] | null)[];
  }

  const s = samplingOf(r);
  const gens: Generation[] =
    maxTokens === 0
      ? prompts.map(() => ({ tokens: [], logprobs: [], text: '', finish: 'length' }))
      : await ctx.queue.generate(
          prompts,
          { temperature: s.temperature, topP: s.topP, maxTokens, stop: s.stop, allowedTexts, seed: s.seed },
          { signal, check, adapter },
        );
  const wantLogprobs = r.logprobs != null;
  const echoScores =
    r.echo && wantLogprobs
      ? await ctx.queue.score(
          prompts.map((ids) => ({ prompt: ids.slice(0, 1), response: ids.slice(1) })),
          { signal, check, adapter },
        )
      : null;
  const asIds = !!r.return_tokens_as_token_ids;

  const choices = gens.map((g, i) => {
    const generated = cutAtStop(g.text, s.stop);
    const promptText = r.echo ? (texts[i] ?? tok.decode(prompts[i])) : '';
    let logprobs = null;
    if (wantLogprobs) {
      const ids = r.echo ? [...prompts[i], ...g.tokens] : g.tokens;
      const tokenLogprobs: (number | null)[] = r.echo ? [null, ...echoScores![i], ...g.logprobs] : g.logprobs;
      logprobs = {
        tokens: ids.map((id) => tokenLabel(tok, id, asIds)),
        token_logprobs: tokenLogprobs,
        top_logprobs: null,
        text_offset: textOffsets(tok, ids),
      };
    }
    return {
      index: i,
      text: promptText + generated,
      logprobs,
      finish_reason: g.finish,
      token_ids: g.tokens,
      ...(r.return_token_ids ? { prompt_token_ids: prompts[i] } : {}),
    };
  });
  const promptTokens = prompts.reduce((n, ids) => n + ids.length, 0);
  return {
    id: `cmpl-${randomUUID()}`,
    object: 'text_completion',
    created: Math.floor(Date.now() / 1000),
    model: adapter ?? ctx.modelName,
    choices,
    usage: usage(
      promptTokens,
      gens.reduce((n, g) => n + g.tokens.length, 0),
    ),
  };
}
