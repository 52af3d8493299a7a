/**
 * The OpenAI protocol layer's own words, shared by its endpoints (./chat_completion, ./responses) and
 * by the servers that answer through it (the training gateway, `empo2 serve`): a request in either API
 * is read into one `TurnRequest`, the server's `TurnBackend` samples it, and the `TurnResult` is written
 * back in the API it came in. Laid out as vLLM lays out `entrypoints/openai/`: a folder per endpoint
 * (its protocol and its serving), tool parsers in one registry (./tool-parsers).
 */
import type { Generation, TextTokenizer } from '../policy/types.ts';

/** A JSON Schema as the request gave it (checked where it is used: ./tool-parsers, the constraint). */
export type JsonSchema = Record<string, unknown>;

/** A function tool (OpenAI's only tool type served here; built-in tool types are refused by name). */
export interface FunctionTool {
  name: string;
  description?: string;
  /** JSON Schema of the arguments object; absent means no arguments (`{"type": "object", "properties": {}}`). */
  parameters?: JsonSchema;
  strict?: boolean;
}

/** `auto`: the model may call tools; `none`: it may not; `required`: it must call one; `{name}`: it must call that one. */
export type ToolChoice = 'auto' | 'none' | 'required' | { name: string };

/** One tool call, as the model made it or as the client sends it back. */
export interface ToolCall {
  /** `call_...` ids the server gave (a client sends back the same id with the call's result). */
  id: string;
  name: string;
  /** The arguments as JSON text (OpenAI's wire form). */
  arguments: string;
}

/** One message of the conversation, whatever API it came in. */
export type TurnMessage =
  | { role: 'system' | 'developer' | 'user'; content: string }
  | { role: 'assistant'; content: string | null; toolCalls: ToolCall[] }
  | { role: 'tool'; toolCallId: string; content: string };

/** What the answer must be: free text, any JSON object, or JSON that matches a schema (structured outputs). */
export type OutputFormat =
  { type: 'text' } | { type: 'json_object' } | { type: 'json_schema'; name: string; schema: JsonSchema; strict?: boolean };

/** One call to the model, read from either API. */
export interface TurnRequest {
  messages: TurnMessage[];
  tools: FunctionTool[];
  toolChoice: ToolChoice;
  parallelToolCalls: boolean;
  /** The answer's token cap the client asked for (null: the server's). */
  maxTokens: number | null;
  stop: string[];
  format: OutputFormat;
  /** The request field the messages came in, for errors about them: "messages" (the default, chat) or "input" (responses). */
  messagesField?: string;
  /** The model the client named (absent: the server's); a server with LoRA adapters picks one by it. */
  model?: string;
  /** The client's sampling settings: `empo2 serve` samples with them; the gateway samples at the trainer's and ignores them. */
  temperature?: number;
  topP?: number;
  seed?: number;
  /** empo2's own fields (the gateway's; `empo2 serve` takes `allowedTexts` only). */
  state?: string;
  validActions?: string[];
  allowedTexts?: string[] | null;
  /**
   * The client's `prompt_cache_key`: `empo2 serve` keeps the prompt's keys/values under it, so that the
   * next call with the key prefills only the tokens after the prefix the two prompts share (the gateway
   * ignores it: it keeps its episodes' caches itself).
   */
  cacheKey?: string;
}

/** What the model answered, parsed. */
export interface TurnResult {
  /** The answer's text outside tool calls (null when it is only tool calls). */
  content: string | null;
  toolCalls: ToolCall[];
  finishReason: 'stop' | 'length' | 'tool_calls';
  generation: Generation;
  promptIds: number[];
  /** The iteration whose weights sampled the answer (0: the initial ones). */
  policyVersion: number;
}

/** A server the protocol layer answers through: it samples one turn (the gateway: one step of an episode). */
export interface TurnBackend {
  /** The name clients give as `model`. */
  modelName: string;
  /** Who answers, in error messages ("the empo2 gateway", "empo2 serve"). */
  serverName: string;
  tokenizer(): TextTokenizer;
  /** Throws the 404 for a `model` it does not serve (absent: it serves `modelName` only). */
  checkModel?(model: string | undefined): void;
  /** Samples `req`; `signal` aborts when the client hangs up. Throws RequestError for the client. */
  turn(req: TurnRequest, o: { signal: AbortSignal }): Promise<TurnResult>;
}
