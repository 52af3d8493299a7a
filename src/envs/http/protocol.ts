/**
 * AgentGym's environment-server protocol, as its servers speak it at WooooDyy/AgentGym commit
 * 3ef9235d23e68e7c2920c5422ad957dc8ced5c6c, and what this client sends:
 *
 *   POST {base}/create  body: create_body (default {})            → {"id": N}, or a bare N (WebShop)
 *   POST {base}/reset   body: {<id>: N, <index>: data index, ...reset_body}
 *                                                                  → {"observation": ..., ...}, or [observation, info] (WebShop)
 *   POST {base}/step    body: {<id>: N, "action": text}            → {"observation" | "state": ..., "reward": r, "done": d, "score"?: s, "available_actions"?: [...]}
 *   GET  {base}/available_actions?<id>=N                           → [...] (ALFWorld) or {"has_search_bar", "clickables"} (WebShop)
 *   GET  {base}/observation?<id>=N                                 → "..." or {"observation": ...}; read only when a reset answer has no observation
 *   POST {base}/close   body: {<id>: N}                            → anything 2xx
 *
 * <id> is "id" ("env_idx" for WebShop) and <index> "data_idx" ("session_id" for WebShop, "game"
 * for ALFWorld). AgentGym's servers answer failures with HTTP 200 and {"error": "..."}; those
 * become EnvServerError of kind 'server'. Every other deviation from these shapes is 'garbage',
 * named with the call, the payload and an excerpt of the answer.
 */
import type { HttpEnvConfig, Protocol } from './options.ts';
import { callJson, describePayload, EnvServerError, excerpt, type CallSettings, type JsonCall } from './transport.ts';

export type InstanceId = number | string;

/** One reset or step answer, in the shape the env needs. */
export interface Answer {
  observation: string;
  /** The server's own task description (SciWorld's task_description), when it gives one. */
  taskDescription: string | null;
  reward: number | null;
  score: number | null;
  done: boolean | null;
  /** Valid actions carried in the answer (ALFWorld's available_actions), when present. */
  actions: string[] | null;
}

/** WebShop's search box as an action with a slot to fill, the form the rollout's constrained decoding leaves free. */
export const SEARCH_ACTION = 'search[<your query>]';

export class ServerProtocol {
  readonly protocol: Protocol;

  constructor(
    private readonly cfg: HttpEnvConfig,
    private readonly onRetry?: (message: string) => void,
  ) {
    this.protocol = cfg.protocol;
  }

  /** Creating is not repeated after a time-out: the server may have made an instance nobody would know of. */
  async create(): Promise<InstanceId> {
    const call: JsonCall = { method: 'POST', url: this.url('create'), body: this.protocol.createBody };
    const answer = await this.send(call, this.cfg.createTimeoutMs, false);
    // WebShop answers a bare number; the others {"id": N}.
    if (typeof answer === 'number' && Number.isSafeInteger(answer)) return answer;
    if (isRecord(answer)) {
      for (const key of new Set(['id', this.protocol.idField])) if (isInstanceId(answer[key])) return answer[key] as InstanceId;
    }
    throw garbage(call, answer, `an instance id (an integer, or an object with "id")`);
  }

  async reset(id: InstanceId, task: string, index: number): Promise<Answer> {
    const p = this.protocol;
    const body: Record<string, unknown> = { ...p.resetBody, [p.idField]: id, [p.indexField]: index };
    if (p.taskField) body[p.taskField] = task;
    const call: JsonCall = { method: 'POST', url: this.url('reset'), body };
    // A reset is safe to repeat: it puts the instance in the same starting state again.
    const answer = await this.send(call, this.cfg.createTimeoutMs, true);
    const parsed = parseAnswer(call, answer, false);
    if (parsed.observation === null) parsed.observation = await this.observation(id);
    return parsed as Answer;
  }

  async step(id: InstanceId, action: string): Promise<Answer> {
    const call: JsonCall = { method: 'POST', url: this.url('step'), body: { [this.protocol.idField]: id, action } };
    return parseAnswer(call, await this.send(call, this.cfg.timeoutMs, false), true) as Answer;
  }

  async observation(id: InstanceId): Promise<string> {
    const call: JsonCall = { method: 'GET', url: this.url('observation', id) };
    const answer = await this.send(call, this.cfg.timeoutMs, true);
    if (typeof answer === 'string') return answer;
    if (isRecord(answer) && typeof answer.observation === 'string') return answer.observation;
    throw garbage(call, answer, 'an observation (a string, or an object with a string "observation")');
  }

  async availableActions(id: InstanceId): Promise<string[]> {
    const call: JsonCall = { method: 'GET', url: this.url('available_actions', id) };
    const answer = await this.send(call, this.cfg.timeoutMs, true);
    if (isStringArray(answer)) return answer;
    if (isRecord(answer) && typeof answer.has_search_bar === 'boolean' && isStringArray(answer.clickables)) {
      const clicks = answer.clickables.filter((c) => !(answer.has_search_bar && c === 'search')).map((c) => `click[${c}]`);
      return answer.has_search_bar ? [SEARCH_ACTION, ...clicks] : clicks;
    }
    throw garbage(call, answer, 'a list of action strings, or {"has_search_bar": bool, "clickables": [...]}');
  }

  /**
   * AgentGym's servers answer true, or false for an id they do not know (already gone): both mean
   * the instance is no longer open. Anything else, {"error"} included, means it may still be open.
   * Closing is safe to repeat, so every failure but a 4xx is tried again within `retries`.
   */
  async close(id: InstanceId, timeoutMs: number, retries: number): Promise<void> {
    const call: JsonCall = { method: 'POST', url: this.url('close'), body: { [this.protocol.idField]: id } };
    const s: CallSettings = {
      baseUrl: this.cfg.baseUrl,
      timeoutMs,
      retries: 0,
      backoffMs: this.cfg.retryBackoffMs,
      idempotent: true,
      maxResponseBytes: this.cfg.maxResponseBytes,
    };
    for (let attempt = 0; ; attempt++) {
      try {
        const answer = await callJson(call, s);
        if (typeof answer === 'boolean') return;
        const name = `${call.method} ${call.url}`;
        if (isRecord(answer) && 'error' in answer)
          throw new EnvServerError(
            name,
            'server',
            `${name}: the server reported an error: ${excerpt(JSON.stringify(answer.error), 500)} (${describePayload(call.body)})`,
          );
        throw garbage(call, answer, 'true (closed) or false (no such instance)');
      } catch (error) {
        const clientError =
          error instanceof EnvServerError && error.kind === 'status' && error.status !== null && error.status < 500 && error.status !== 429;
        if (!(error instanceof EnvServerError) || clientError || attempt >= retries) throw error;
        this.onRetry?.(error.message);
        await new Promise((r) => setTimeout(r, Math.min(10_000, this.cfg.retryBackoffMs * 2 ** attempt)));
      }
    }
  }

  /** The valid actions of the state an answer describes, from wherever this server family puts them. */
  async actionsOf(id: InstanceId, answer: Answer): Promise<string[]> {
    switch (this.protocol.actionsFrom) {
      case 'response':
        return answer.actions ?? [];
      case 'endpoint':
        return this.availableActions(id);
      case 'observation':
        return actionsInObservation(answer.observation);
      case 'none':
        return [];
    }
  }

  url(path: string, id?: InstanceId): string {
    const base = `${this.cfg.baseUrl}/${path}`;
    return id === undefined ? base : `${base}?${new URLSearchParams({ [this.protocol.idField]: String(id) })}`;
  }

  private async send(call: JsonCall, timeoutMs: number, idempotent: boolean): Promise<unknown> {
    const s: CallSettings = {
      baseUrl: this.cfg.baseUrl,
      timeoutMs,
      retries: this.cfg.retries,
      backoffMs: this.cfg.retryBackoffMs,
      idempotent,
      maxResponseBytes: this.cfg.maxResponseBytes,
    };
    const answer = await callJson(call, s, this.onRetry);
    if (isRecord(answer) && 'error' in answer && answer.error !== null && answer.error !== undefined) {
      const name = `${call.method} ${call.url}`;
      const what = typeof answer.error === 'string' ? answer.error : JSON.stringify(answer.error);
      throw new EnvServerError(
        name,
        'server',
        `${name}: the server reported an error: ${excerpt(what, 500)} (${describePayload(call.body)})`,
      );
    }
    return answer;
  }
}

/**
 * BabyAI's server prints the valid actions after the observation: `Available actions: ["turn
 * left", "go to red ball 1", ...]`. An observation without that list has none to offer.
 */
export function actionsInObservation(observation: string): string[] {
  const m = /Available actions:\s*(\[[^\n]*\])\s*$/.exec(observation);
  if (!m) return [];
  try {
    const list: unknown = JSON.parse(m[1]);
    return isStringArray(list) ? list : [];
  } catch {
    return [];
  }
}

function parseAnswer(call: JsonCall, answer: unknown, isStep: boolean): Omit<Answer, 'observation'> & { observation: string | null } {
  if (typeof answer === 'string' && !isStep)
    return { observation: answer, taskDescription: null, reward: null, score: null, done: null, actions: null };
  if (Array.isArray(answer) && !isStep) {
    // WebShop's reset answers (observation, info).
    if (typeof answer[0] !== 'string') throw garbage(call, answer, 'a list whose first element is the observation text');
    return { observation: answer[0], taskDescription: null, reward: null, score: null, done: null, actions: null };
  }
  if (!isRecord(answer))
    throw garbage(call, answer, isStep ? 'an object with "observation", "reward" and "done"' : 'an object with "observation"');
  const observation = typeof answer.observation === 'string' ? answer.observation : typeof answer.state === 'string' ? answer.state : null;
  if (observation === null && (isStep || ('observation' in answer && answer.observation !== null))) {
    throw garbage(call, answer, 'a string "observation" (or "state")');
  }
  const reward = optionalNumber(call, answer, 'reward', isStep);
  const score = optionalNumber(call, answer, 'score', false);
  const done = answer.done;
  if (isStep ? typeof done !== 'boolean' : done !== undefined && done !== null && typeof done !== 'boolean')
    throw garbage(call, answer, 'a boolean "done"');
  const actions = answer.available_actions;
  if (actions !== undefined && actions !== null && !isStringArray(actions))
    throw garbage(call, answer, '"available_actions" as a list of strings');
  const description = answer.task_description;
  return {
    observation,
    taskDescription: typeof description === 'string' ? description : null,
    reward,
    score,
    done: typeof done === 'boolean' ? done : null,
    actions: actions ?? null,
  };
}

function optionalNumber(call: JsonCall, answer: Record<string, unknown>, key: string, required: boolean): number | null {
  const v = answer[key];
  if (v === undefined || v === null) {
    if (required) throw garbage(call, answer, `a number "${key}"`);
    return null;
  }
  if (typeof v !== 'number' || !Number.isFinite(v)) throw garbage(call, answer, `a finite number "${key}"`);
  return v;
}

function garbage(call: JsonCall, answer: unknown, expected: string): EnvServerError {
  const name = `${call.method} ${call.url}`;
  return new EnvServerError(
    name,
    'garbage',
    `${name} answered ${excerpt(JSON.stringify(answer) ?? String(answer))}, expected ${expected} (${describePayload(call.body)})`,
  );
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function isInstanceId(v: unknown): v is InstanceId {
  return (typeof v === 'number' && Number.isSafeInteger(v)) || (typeof v === 'string' && v.length > 0 && v.length <= 200);
}

function isStringArray(v: unknown): v is string[] {
  return Array.isArray(v) && v.every((x) => typeof x === 'string');
}
