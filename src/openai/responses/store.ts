/**
 * An episode's earlier responses, for `previous_response_id`, `item_reference` and retrieval
 * (`GET /v1/responses/{id}`): the Response object, the conversation each
 * one ended (its input, without `instructions`, and its output) and its output items by id. Kept per
 * episode so that an id from another episode is refused, not answered with another agent's history;
 * bounded (the oldest response and its items go first), as vLLM's in-memory response store is not.
 */
import type { TurnMessage } from '../types.ts';

/** An output item a client may name by `item_reference`, in its input item form. */
export type StoredItem =
  | { type: 'message'; id: string; role: 'assistant'; content: string }
  | { type: 'function_call'; id: string; call_id: string; name: string; arguments: string };

export interface StoredResponse {
  id: string;
  /** The Response object as it was answered: what `GET /v1/responses/{id}` returns. */
  response: ResponseObject;
  /** The conversation after this response: what a call with `previous_response_id` continues. */
  conversation: TurnMessage[];
  items: StoredItem[];
}

export class ResponseStore {
  /** Who the responses belong to, in errors ("episode 3"). */
  readonly scope: string;
  /** The most responses kept. */
  readonly capacity: number;
  private readonly responses = new Map<string, StoredResponse>();
  private readonly items = new Map<string, StoredItem>();

  constructor(o: { scope: string; capacity?: number }) {
    this.scope = o.scope;
    this.capacity = o.capacity ?? 64;
  }

  put(r: StoredResponse): void {
    this.responses.set(r.id, r);
    for (const item of r.items) this.items.set(item.id, item);
    for (const [id, old] of this.responses) {
      if (this.responses.size <= this.capacity) break;
      this.responses.delete(id);
      for (const item of old.items) this.items.delete(item.id);
    }
  }

  response(id: string): StoredResponse | undefined {
    return this.responses.get(id);
  }

  item(id: string): StoredItem | undefined {
    return this.items.get(id);
  }
}

/** A text token's log-prob, as `ResponseOutputText.logprobs` has it (no top alternatives are computed). */
export interface TextLogprob {
  token: string;
  bytes: number[];
  logprob: number;
  top_logprobs: [];
}

export type OutputItem =
  | {
      type: 'message';
      id: string;
      status: 'completed' | 'incomplete';
      role: 'assistant';
      content: { type: 'output_text'; text: string; annotations: []; logprobs: TextLogprob[] }[];
    }
  | { type: 'function_call'; id: string; call_id: string; name: string; arguments: string; status: 'completed' };

/** OpenAI's Response object (the fields its clients read, and the request's settings echoed). */
export interface ResponseObject {
  id: string;
  object: 'response';
  created_at: number;
  status: 'completed' | 'incomplete';
  error: null;
  incomplete_details: { reason: 'max_output_tokens' } | null;
  model: string;
  output: OutputItem[];
  /** The request's, with `empo2_policy_version`. */
  metadata: Record<string, string>;
  usage: {
    input_tokens: number;
    input_tokens_details: { cached_tokens: number };
    output_tokens: number;
    output_tokens_details: { reasoning_tokens: number };
    total_tokens: number;
  };
  [echoed: string]: unknown;
}
