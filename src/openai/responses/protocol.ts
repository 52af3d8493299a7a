/**
 * `POST /v1/responses` as the official clients send it (`openai`, `@openai/agents`' default model, the AI
 * SDK's `openai(model)`), checked with zod and read into one `TurnRequest` (../types.ts), as vLLM's
 * `entrypoints/openai/responses/protocol.py` reads it into its chat messages.
 *
 * `input` is a string (one user message) or items: `message` (role user, system, developer or
 * assistant; content a string or `input_text` / `output_text` parts), `function_call` (a call the model
 * made, sent back), `function_call_output` (its result, which must follow its call), and
 * `item_reference` (an output item of an earlier response of the same episode, by id: the AI SDK sends
 * its assistant text so when `store` is on). `instructions` is the system message; it is not carried
 * over by `previous_response_id`, as OpenAI's API does not carry it.
 *
 * `include: ["message.output_text.logprobs"]` gives each text token's log-prob as it was sampled
 * (`top_logprobs` stays empty: top alternatives are not computed); OpenAI's other `include` values are
 * accepted and change nothing (they name what built-in tools, images and reasoning add), and a value that
 * is not one of OpenAI's is refused naming it (`include[1]`).
 *
 * Accepted and ignored, because they do not change what is sampled: `store` (responses are kept for
 * `previous_response_id` whatever it says; false only keeps one out of the store), `metadata` (echoed),
 * `user`, `safety_identifier`, `service_tier`, `reasoning`, `truncation`, `prompt_cache_key`,
 * `prompt_cache_retention`, `prompt_cache_options`, `context_management`, `max_tool_calls` (it caps
 * built-in tool calls, and there are none here), `text.verbosity`, `stream_options`, and `temperature`
 * / `top_p` (the server samples at its own settings: during training the update scores every action at
 * `rollout.temperature`). Refused by name: built-in tool types (web_search, file_search, computer, ...),
 * `conversation`, `prompt`, `background: true`, `top_logprobs` above 0, input item types other than the
 * four above, content parts other than text, and any field not listed.
 */
import { z } from 'zod';
import { checkConstrainable } from '../constrainable.ts';
import { parseAt, parseRequest, RequestError } from '../errors.ts';
import type { FunctionTool, OutputFormat, ToolCall, ToolChoice, TurnMessage, TurnRequest } from '../types.ts';
import type { ResponseStore, StoredItem } from './store.ts';

const nullish = <T extends z.ZodType>(t: T) => t.nullable().optional();
const ignored = z.unknown().optional();

const textPart = z.strictObject({
  type: z.enum(['input_text', 'output_text'], {
    error: 'only text content parts ("input_text", "output_text") are supported',
  }),
  text: z.string(),
  annotations: z.array(z.unknown()).optional(),
  logprobs: z.array(z.unknown()).nullish(),
});
const content = z.union([z.string(), z.array(textPart)], { error: 'must be a string or an array of input_text / output_text parts' });

const messageItem = z.strictObject({
  type: z.literal('message').optional(),
  role: z.enum(['user', 'system', 'developer', 'assistant'], { error: 'must be "user", "system", "developer" or "assistant"' }),
  content,
  id: nullish(z.string()),
  status: nullish(z.enum(['in_progress', 'completed', 'incomplete'])),
  phase: nullish(z.enum(['commentary', 'final_answer'])),
});
const functionCallItem = z.strictObject({
  type: z.literal('function_call'),
  call_id: z.string().min(1),
  name: z.string().min(1),
  arguments: z.string(),
  id: nullish(z.string()),
  status: nullish(z.enum(['in_progress', 'completed', 'incomplete'])),
});
const functionCallOutputItem = z.strictObject({
  type: z.literal('function_call_output'),
  call_id: z.string().min(1),
  output: z.union([z.string(), z.array(textPart)], { error: 'must be a string or an array of input_text parts' }),
  id: nullish(z.string()),
  status: nullish(z.enum(['in_progress', 'completed', 'incomplete'])),
});
const itemReference = z.strictObject({ type: z.literal('item_reference'), id: z.string().min(1) });
const ITEM_SCHEMAS = {
  message: messageItem,
  function_call: functionCallItem,
  function_call_output: functionCallOutputItem,
  item_reference: itemReference,
};

const functionTool = z.strictObject({
  type: z.literal('function'),
  name: z.string().regex(/^[a-zA-Z0-9_-]{1,64}$/, { error: 'must be 1-64 letters, digits, "_" or "-"' }),
  description: nullish(z.string()),
  parameters: nullish(z.record(z.string(), z.unknown())),
  strict: nullish(z.boolean()),
  defer_loading: nullish(z.boolean()),
});

const toolChoice = z.union(
  [z.enum(['auto', 'none', 'required']), z.strictObject({ type: z.literal('function'), name: z.string().min(1) })],
  { error: 'must be "auto", "none", "required" or {type: "function", name}' },
);

const format = z.discriminatedUnion(
  'type',
  [
    z.strictObject({ type: z.literal('text') }),
    z.strictObject({ type: z.literal('json_object') }),
    z.strictObject({
      type: z.literal('json_schema'),
      name: z.string().min(1),
      schema: z.record(z.string(), z.unknown()),
      strict: nullish(z.boolean()),
      description: nullish(z.string()),
    }),
  ],
  { error: 'must be {type: "text"}, {type: "json_object"} or {type: "json_schema", name, schema}' },
);

/**
 * OpenAI's `include` values. `message.output_text.logprobs` adds each text token's log-prob; the others name
 * what built-in tools, input images or reasoning add, none of which an answer here has, so they change nothing.
 */
export const INCLUDABLE = [
  'message.output_text.logprobs',
  'file_search_call.results',
  'web_search_call.results',
  'web_search_call.action.sources',
  'message.input_image.image_url',
  'computer_call_output.output.image_url',
  'code_interpreter_call.outputs',
  'reasoning.encrypted_content',
] as const;
export const includable = z.enum(INCLUDABLE, { error: `must be one of OpenAI's include values: ${INCLUDABLE.join(', ')}` });

export const ResponsesRequestSchema = z.strictObject({
  model: z.string().optional(),
  input: z.union([z.string(), z.array(z.unknown()).max(100_000)], { error: 'must be a string or an array of input items' }).optional(),
  instructions: nullish(z.string()),
  tools: nullish(z.array(z.unknown()).max(1024)),
  tool_choice: nullish(z.unknown()),
  parallel_tool_calls: nullish(z.boolean()),
  previous_response_id: nullish(z.string()),
  max_output_tokens: nullish(z.number().int().min(1)),
  stream: nullish(z.boolean()),
  stream_options: nullish(z.strictObject({ include_obfuscation: z.boolean().optional() })),
  text: nullish(z.strictObject({ format: format.optional(), verbosity: nullish(z.enum(['low', 'medium', 'high'])) })),
  temperature: nullish(z.number().min(0).max(2)),
  top_p: nullish(z.number().gt(0).max(1)),
  top_logprobs: nullish(z.literal(0, { error: 'only top_logprobs: 0 is supported; top alternatives are not computed' })),
  background: nullish(z.literal(false, { error: 'background responses are not supported' })),
  conversation: nullish(z.null({ error: 'conversations are not supported: chain responses with previous_response_id' })),
  prompt: nullish(z.null({ error: 'prompt templates are not supported: send instructions and input' })),
  store: nullish(z.boolean()),
  metadata: nullish(z.record(z.string(), z.string())),
  user: nullish(z.string()),
  safety_identifier: nullish(z.string()),
  service_tier: nullish(z.string()),
  include: nullish(z.array(includable)),
  reasoning: ignored,
  truncation: nullish(z.enum(['auto', 'disabled'])),
  prompt_cache_key: nullish(z.string()),
  prompt_cache_retention: ignored,
  prompt_cache_options: ignored,
  context_management: ignored,
  max_tool_calls: nullish(z.number().int().min(1)),
  /** empo2's own fields, as the gateway's chat route takes them (../../gateway/protocol.ts). */
  empo2_state: z.string().optional(),
  empo2_valid_actions: nullish(z.array(z.string()).max(100_000)),
  allowed_texts: nullish(z.array(z.string().min(1)).min(1)),
});
export type ResponsesRequest = z.infer<typeof ResponsesRequestSchema>;

/** A request read: the turn to sample, and what the Response object echoes of it. */
export interface ResponsesCall {
  turn: TurnRequest;
  model: string | undefined;
  stream: boolean;
  /** The conversation the answer continues, without `instructions` (what `previous_response_id` carries on). */
  conversation: TurnMessage[];
  /** False: the answer is not kept for `previous_response_id` (the request's `store: false`). */
  store: boolean;
  /** `include` has `message.output_text.logprobs`: each text token's log-prob, as sampled. */
  logprobs: boolean;
  request: ResponsesRequest;
}

/**
 * Reads `body` into the turn it asks for; `o.store` holds the episode's earlier responses
 * (`previous_response_id`, `item_reference`), `o.server` names who answers in errors.
 */
export function readResponsesRequest(body: unknown, o: { store: ResponseStore; server: string }): ResponsesCall {
  const r = parseRequest(ResponsesRequestSchema, body, { server: o.server });
  const tools = (r.tools ?? []).map((t, i) => readTool(t, i, o.server));
  const choice = readToolChoice(r.tool_choice, tools, o.server);
  const format = readFormat(r);
  checkConstrainable(tools, choice, format, { toolParameters: (i) => `tools[${i}].parameters`, formatSchema: 'text.format.schema' });
  let previous: TurnMessage[] = [];
  if (r.previous_response_id != null) {
    const stored = o.store.response(r.previous_response_id);
    if (!stored)
      throw new RequestError(
        400,
        `previous_response_id "${r.previous_response_id}" is not a response of ${o.store.scope} (${o.server} keeps the last ${o.store.capacity} responses of ${o.store.scope}, for it alone)`,
        'previous_response_id',
      );
    previous = stored.conversation;
  }
  const input = typeof r.input === 'string' ? [{ role: 'user' as const, content: r.input }] : (r.input ?? []);
  const conversation = readInput(input, { previous, store: o.store, server: o.server });
  if (conversation.length === previous.length)
    throw new RequestError(400, r.input === undefined ? '"input" is required' : '"input" has no items', 'input');
  const messages: TurnMessage[] = r.instructions ? [{ role: 'system', content: r.instructions }, ...conversation] : conversation;
  return {
    turn: {
      messages,
      tools,
      toolChoice: choice,
      parallelToolCalls: r.parallel_tool_calls ?? true,
      maxTokens: r.max_output_tokens ?? null,
      stop: [],
      format,
      messagesField: 'input',
      ...(r.model !== undefined ? { model: r.model } : {}),
      ...(r.temperature != null ? { temperature: r.temperature } : {}),
      ...(r.top_p != null ? { topP: r.top_p } : {}),
      ...(r.empo2_state !== undefined ? { state: r.empo2_state } : {}),
      ...(r.empo2_valid_actions != null ? { validActions: r.empo2_valid_actions } : {}),
      ...(r.allowed_texts != null ? { allowedTexts: r.allowed_texts } : {}),
    },
    model: r.model,
    stream: r.stream ?? false,
    conversation,
    store: r.store ?? true,
    logprobs: r.include?.includes('message.output_text.logprobs') ?? false,
    request: r,
  };
}

function readTool(t: unknown, i: number, server: string): FunctionTool {
  const type = typeof t === 'object' && t !== null ? (t as { type?: unknown }).type : undefined;
  if (type !== 'function')
    throw new RequestError(
      400,
      typeof type === 'string'
        ? `built-in tool "${type}" is not supported by ${server}: only function tools ({type: "function", name, parameters}) are`
        : `"tools[${i}]" must be a function tool ({type: "function", name, parameters})`,
      `tools[${i}].type`,
    );
  const f = parseAt(functionTool, t, { at: ['tools', i], server });
  return {
    name: f.name,
    ...(f.description != null ? { description: f.description } : {}),
    ...(f.parameters != null ? { parameters: f.parameters } : {}),
    ...(f.strict != null ? { strict: f.strict } : {}),
  };
}

function readToolChoice(raw: unknown, tools: readonly FunctionTool[], server: string): ToolChoice {
  if (raw == null) return 'auto';
  const type = typeof raw === 'object' ? (raw as { type?: unknown }).type : undefined;
  if (typeof type === 'string' && type !== 'function')
    throw new RequestError(
      400,
      `tool_choice type "${type}" is not supported by ${server}: give "auto", "none", "required" or {type: "function", name}`,
      'tool_choice.type',
    );
  const c = parseAt(toolChoice, raw, { at: ['tool_choice'], server });
  if (typeof c === 'string') {
    if (c === 'required' && tools.length === 0)
      throw new RequestError(400, 'tool_choice "required" needs at least one tool in "tools"', 'tool_choice');
    return c;
  }
  if (!tools.some((t) => t.name === c.name))
    throw new RequestError(400, `tool_choice names function "${c.name}", which is not in "tools"`, 'tool_choice.name');
  return { name: c.name };
}

function readFormat(r: ResponsesRequest): OutputFormat {
  const f = r.text?.format;
  if (!f || f.type === 'text') return { type: 'text' };
  if (f.type === 'json_object') return { type: 'json_object' };
  return { type: 'json_schema', name: f.name, schema: f.schema, ...(f.strict != null ? { strict: f.strict } : {}) };
}

const partsText = (c: string | { text: string }[]) => (typeof c === 'string' ? c : c.map((p) => p.text).join(''));

/**
 * The input items as messages after `o.previous`: function calls join the assistant turn before them (an
 * assistant message and the calls the model made with it are one turn), and a function call's output
 * must follow its call, here or in the previous responses.
 */
function readInput(items: readonly unknown[], o: { previous: TurnMessage[]; store: ResponseStore; server: string }): TurnMessage[] {
  const out = [...o.previous];
  const calls = new Set(o.previous.flatMap((m) => (m.role === 'assistant' ? m.toolCalls.map((c) => c.id) : [])));
  const addCall = (call: ToolCall) => {
    const last = out.at(-1);
    // A copy: the last message may be a stored response's, which later calls read too.
    if (last?.role === 'assistant') out[out.length - 1] = { ...last, toolCalls: [...last.toolCalls, call] };
    else out.push({ role: 'assistant', content: null, toolCalls: [call] });
    calls.add(call.id);
  };
  items.forEach((raw, i) => {
    const item = readItem(raw, i, o);
    if (item.type === 'function_call') addCall({ id: item.call_id, name: item.name, arguments: item.arguments });
    else if (item.type === 'function_call_output') {
      if (!calls.has(item.call_id))
        throw new RequestError(
          400,
          `function_call_output for call_id "${item.call_id}" has no function_call before it (in "input" or the previous response)`,
          `input[${i}].call_id`,
        );
      out.push({ role: 'tool', toolCallId: item.call_id, content: partsText(item.output) });
    } else if (item.role === 'assistant') out.push({ role: 'assistant', content: partsText(item.content), toolCalls: [] });
    else out.push({ role: item.role, content: partsText(item.content) });
  });
  return out;
}

type InputItem =
  (z.infer<typeof messageItem> & { type?: 'message' }) | z.infer<typeof functionCallItem> | z.infer<typeof functionCallOutputItem>;

/** One item checked by its type; an `item_reference` is replaced by the item it names. */
function readItem(raw: unknown, i: number, o: { store: ResponseStore; server: string }): InputItem {
  const type = typeof raw === 'object' && raw !== null && !Array.isArray(raw) ? (raw as { type?: unknown }).type : null;
  if (type === null) throw new RequestError(400, `"input[${i}]" must be an object (an input item)`, `input[${i}]`);
  const key = type === undefined ? 'message' : type;
  if (typeof key !== 'string' || !(key in ITEM_SCHEMAS))
    throw new RequestError(
      400,
      `input item type ${JSON.stringify(key)} is not supported by ${o.server} (supported: message, function_call, function_call_output, item_reference)`,
      `input[${i}].type`,
    );
  const item = parseAt(ITEM_SCHEMAS[key as keyof typeof ITEM_SCHEMAS], raw, { at: ['input', i], server: o.server });
  if (item.type !== 'item_reference') return item as InputItem;
  const found: StoredItem | undefined = o.store.item(item.id);
  if (!found)
    throw new RequestError(400, `item_reference "${item.id}" is not an output item of a response of ${o.store.scope}`, `input[${i}].id`);
  return found;
}
