/**
 * `empo2 serve`: an OpenAI-compatible HTTP API over a PolicyEngine (node:http, no framework: three
 * JSON routes do not need one).
 *
 * Routes: GET /v1/models, POST /v1/completions, POST /v1/chat/completions. Beyond OpenAI's
 * fields, every choice carries `token_ids` (the sampled ids, the end-of-turn token included when
 * the model emitted it) and, with `return_token_ids: true`, `prompt_token_ids`, as vLLM names
 * them; `return_tokens_as_token_ids: true` writes logprob tokens as "token_id:N" (vLLM's option);
 * `allowed_texts` constrains the response to one of the given texts. Log-probs of generated tokens
 * are those the engine sampled from: softmax(logits / temperature), before top-p and before the
 * allowed-text constraint. Echoed prompt log-probs are at temperature 1.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { randomUUID } from 'node:crypto';
import type { Generation, PolicyEngine } from '../policy/types.ts';
import { EngineQueue } from './queue.ts';
import { renderChatML } from './chat.ts';
import { ChatRequestSchema, CompletionRequestSchema, RequestError, errorBody, parseRequest, type ChatRequest, type CompletionRequest } from './protocol.ts';

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
  log?: (line: string) => void;
  /**
   * Enables POST /v1/empo2/load_weights {"path": dir}: a trainer pushes its current policy (a model
   * directory) so the next requests sample from it. Off unless given: it reads any path the server can.
   */
  loadWeights?: (dir: string) => Promise<PolicyEngine>;
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
  const queue = new EngineQueue(o.engine);
  const created = Math.floor(Date.now() / 1000);
  const ctx: Ctx = {
    ...o,
    queue,
    vocabSize: o.vocabSize ?? o.engine.tokenizer.vocabSize,
    maxModelLen: o.maxModelLen ?? Number.POSITIVE_INFINITY,
    defaultChatMaxTokens: o.defaultChatMaxTokens ?? 256,
  };
  const server = createServer((req, res) => {
    void handle(ctx, created, req, res).catch((e: unknown) => {
      const err = e instanceof RequestError ? e : new RequestError(500, `internal error: ${(e as Error).message}`, null, 'server_error');
      if (err.status >= 500) o.log?.(`error: ${(e as Error).stack ?? String(e)}`);
      send(res, err.status, errorBody(err));
    });
  });
  // Keep-alive sockets would hold close() open for their idle timeout.
  server.keepAliveTimeout = 5_000;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(o.port ?? 8000, o.host ?? '127.0.0.1', () => {
      server.off('error', reject);
      resolve();
    });
  });
  const addr = server.address() as AddressInfo;
  const hostForUrl = addr.family === 'IPv6' ? `[${addr.address}]` : addr.address;
  return {
    url: `http://${hostForUrl}:${addr.port}`,
    host: addr.address,
    port: addr.port,
    queue,
    close: () =>
      new Promise<void>((resolve, reject) => {
        server.close((e) => (e ? reject(e) : resolve()));
        server.closeAllConnections();
      }),
  };
}

async function loadWeights(ctx: Ctx, body: unknown): Promise<unknown> {
  if (!ctx.loadWeights) throw new RequestError(403, 'weight updates are off: start the server with --allow-weight-updates', null);
  const path = (body as { path?: unknown } | null)?.path;
  if (typeof path !== 'string' || path.length === 0) throw new RequestError(400, 'path must be a non-empty string (a model directory)', 'path');
  const load = ctx.loadWeights;
  try {
    await ctx.queue.swapEngine(() => load(path));
  } catch (e) {
    throw new RequestError(400, `cannot load ${path}: ${(e as Error).message}`, 'path');
  }
  ctx.engine = ctx.queue.current;
  ctx.log?.(`loaded weights from ${path}`);
  return { object: 'empo2.load_weights', path, loaded: true };
}

interface Ctx extends ServeOptions {
  queue: EngineQueue;
  vocabSize: number;
  maxModelLen: number;
  defaultChatMaxTokens: number;
}

async function handle(ctx: Ctx, created: number, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const path = (req.url ?? '/').split('?')[0].replace(/\/+$/, '');
  const routes: Record<string, { method: string; run: () => Promise<unknown> }> = {
    '/v1/models': { method: 'GET', run: async () => ({ object: 'list', data: [{ id: ctx.modelName, object: 'model', created, owned_by: 'empo2', ...(Number.isFinite(ctx.maxModelLen) ? { max_model_len: ctx.maxModelLen } : {}) }] }) },
    '/v1/completions': { method: 'POST', run: async () => completions(ctx, parseRequest(CompletionRequestSchema, await readJson(req, ctx.maxBodyBytes ?? 16 << 20))) },
    '/v1/chat/completions': { method: 'POST', run: async () => chat(ctx, parseRequest(ChatRequestSchema, await readJson(req, ctx.maxBodyBytes ?? 16 << 20))) },
    '/v1/empo2/load_weights': { method: 'POST', run: async () => loadWeights(ctx, await readJson(req, ctx.maxBodyBytes ?? 16 << 20)) },
  };
  const route = routes[path];
  if (!route) throw new RequestError(404, `no route ${req.method} ${path} (routes: GET /v1/models, POST /v1/completions, POST /v1/chat/completions)`, null);
  if (req.method !== route.method) {
    res.setHeader('Allow', route.method);
    throw new RequestError(405, `${path} takes ${route.method}, not ${req.method}`, null);
  }
  send(res, 200, await route.run());
}

async function readJson(req: IncomingMessage, limit: number): Promise<unknown> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > limit) throw new RequestError(413, `request body over ${limit} bytes`, null);
    chunks.push(chunk as Buffer);
  }
  const text = Buffer.concat(chunks).toString('utf8');
  try {
    return JSON.parse(text);
  } catch (e) {
    throw new RequestError(400, `the request body is not valid JSON: ${(e as Error).message}`, null);
  }
}

function send(res: ServerResponse, status: number, body: unknown): void {
  if (res.headersSent) return;
  const text = JSON.stringify(body);
  res.writeHead(status, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(text) });
  res.end(text);
}

function checkModel(ctx: Ctx, model: string | undefined): void {
  if (model !== undefined && model !== ctx.modelName) {
    throw new RequestError(404, `model "${model}" is not served here (this server serves "${ctx.modelName}")`, 'model', 'not_found_error', 'model_not_found');
  }
}

interface Sampling {
  temperature: number;
  topP: number;
  stop: string[];
  seed: number | null;
}

function samplingOf(r: CompletionRequest | ChatRequest): Sampling {
  return {
    temperature: r.temperature ?? 1,
    topP: r.top_p ?? 1,
    stop: r.stop == null ? [] : typeof r.stop === 'string' ? [r.stop] : r.stop,
    seed: r.seed ?? null,
  };
}

function checkPrompt(ctx: Ctx, ids: number[], param: (j: number | null) => string, maxTokens: number): void {
  if (ids.length === 0) throw new RequestError(400, `"${param(null)}" encodes to no tokens`, param(null));
  const bad = ids.findIndex((id) => id >= ctx.vocabSize);
  if (bad >= 0) throw new RequestError(400, `"${param(bad)}": token id ${ids[bad]} is outside the vocabulary (size ${ctx.vocabSize})`, param(bad));
  if (ids.length + maxTokens > ctx.maxModelLen) {
    throw new RequestError(400, `prompt (${ids.length} tokens) plus max_tokens (${maxTokens}) exceeds the model's context of ${ctx.maxModelLen} tokens`, 'max_tokens');
  }
}

/** Response text as OpenAI returns it: cut before the first stop string. */
function cutAtStop(text: string, stop: string[]): string {
  let end = text.length;
  for (const s of stop) {
    const at = text.indexOf(s);
    if (at >= 0 && at < end) end = at;
  }
  return text.slice(0, end);
}

function tokenLabel(ctx: Ctx, id: number, asIds: boolean): string {
  return asIds ? `token_id:${id}` : ctx.engine.tokenizer.decode([id]);
}

function usage(promptTokens: number, completionTokens: number) {
  return { prompt_tokens: promptTokens, completion_tokens: completionTokens, total_tokens: promptTokens + completionTokens };
}

async function completions(ctx: Ctx, r: CompletionRequest) {
  checkModel(ctx, r.model);
  const tok = ctx.engine.tokenizer;
  const maxTokens = r.max_tokens ?? COMPLETION_DEFAULT_MAX_TOKENS;
  const p = r.prompt;
  // Normalise the four prompt shapes to token ids, remembering how to name an element in errors.
  let prompts: number[][];
  let texts: (string | null)[];
  let param: (i: number, j: number | null) => string;
  if (typeof p === 'string') {
    prompts = [tok.encode(p)];
    texts = [p];
    param = () => 'prompt';
  } else if (typeof p[0] === 'string') {
    texts = p as string[];
    prompts = texts.map((t) => tok.encode(t!));
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
  prompts.forEach((ids, i) => checkPrompt(ctx, ids, (j) => param(i, j), maxTokens));

  let allowedTexts: (string[] | null)[] | undefined;
  const a = r.allowed_texts;
  if (a) {
    if (typeof a[0] === 'string') allowedTexts = prompts.map(() => a as string[]);
    else if (a.length !== prompts.length) throw new RequestError(400, `"allowed_texts" has ${a.length} lists but there are ${prompts.length} prompts`, 'allowed_texts');
    else allowedTexts = a as (string[] | null)[];
  }

  const s = samplingOf(r);
  const gens: Generation[] =
    maxTokens === 0
      ? prompts.map(() => ({ tokens: [], logprobs: [], text: '', finish: 'length' }))
      : await ctx.queue.generate(prompts, { temperature: s.temperature, topP: s.topP, maxTokens, stop: s.stop, allowedTexts, seed: s.seed });
  const wantLogprobs = r.logprobs != null;
  const echoScores = r.echo && wantLogprobs ? await ctx.queue.score(prompts.map((ids) => ({ prompt: ids.slice(0, 1), response: ids.slice(1) }))) : null;
  const asIds = !!r.return_tokens_as_token_ids;

  const choices = gens.map((g, i) => {
    const generated = cutAtStop(g.text, s.stop);
    const promptText = r.echo ? (texts[i] ?? tok.decode(prompts[i])) : '';
    let logprobs = null;
    if (wantLogprobs) {
      const ids = r.echo ? [...prompts[i], ...g.tokens] : g.tokens;
      const tokenLogprobs: (number | null)[] = r.echo ? [null, ...echoScores![i], ...g.logprobs] : g.logprobs;
      // Character offset of each token in the returned text (prompt included when echoed).
      const offsets = ids.map((_, k) => tok.decode(ids.slice(0, k)).length);
      logprobs = { tokens: ids.map((id) => tokenLabel(ctx, id, asIds)), token_logprobs: tokenLogprobs, top_logprobs: null, text_offset: offsets };
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
    model: ctx.modelName,
    choices,
    usage: usage(promptTokens, gens.reduce((n, g) => n + g.tokens.length, 0)),
  };
}

async function chat(ctx: Ctx, r: ChatRequest) {
  checkModel(ctx, r.model);
  const tok = ctx.engine.tokenizer;
  const prompt = tok.encode(renderChatML(r.messages));
  const maxTokens = r.max_completion_tokens ?? r.max_tokens ?? Math.max(1, Math.min(ctx.defaultChatMaxTokens, ctx.maxModelLen - prompt.length));
  checkPrompt(ctx, prompt, () => 'messages', maxTokens);
  const s = samplingOf(r);
  const [g] = await ctx.queue.generate([prompt], {
    temperature: s.temperature,
    topP: s.topP,
    maxTokens,
    stop: s.stop,
    allowedTexts: r.allowed_texts ? [r.allowed_texts] : undefined,
    seed: s.seed,
  });
  const asIds = !!r.return_tokens_as_token_ids;
  const tokenizer = tok as { tokenBytes?: (id: number) => Uint8Array };
  const logprobs = r.logprobs
    ? {
        content: g.tokens.map((id, k) => {
          const label = tokenLabel(ctx, id, asIds);
          const bytes = tokenizer.tokenBytes ? tokenizer.tokenBytes(id) : new TextEncoder().encode(tok.decode([id]));
          return { token: label, logprob: g.logprobs[k], bytes: [...bytes], top_logprobs: [] };
        }),
      }
    : null;
  return {
    id: `chatcmpl-${randomUUID()}`,
    object: 'chat.completion',
    created: Math.floor(Date.now() / 1000),
    model: ctx.modelName,
    choices: [
      {
        index: 0,
        message: { role: 'assistant', content: cutAtStop(g.text, s.stop) },
        logprobs,
        finish_reason: g.finish,
        token_ids: g.tokens,
        ...(r.return_token_ids ? { prompt_token_ids: prompt } : {}),
      },
    ],
    usage: usage(prompt.length, g.tokens.length),
  };
}
