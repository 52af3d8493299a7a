/**
 * The Chat Completions request (`POST /v1/chat/completions`) as the official clients send it, checked with
 * zod and read into a `TurnRequest` (../types.ts), so that a bad request is answered with a 400 naming the
 * field: `tools` (function tools with JSON Schema parameters; other tool types are refused by name),
 * `tool_choice` (auto, none, required, a named function), `parallel_tool_calls`, assistant messages with
 * `tool_calls` and `tool` messages with the `tool_call_id` of a call made earlier in the conversation,
 * `response_format` (text, json_object, json_schema). Schemas that decoding will be constrained to (a
 * forced call's tools, a json_schema) are checked here against what the constraint takes, naming the field.
 *
 * Fields that do not change what is sampled (`store`, `metadata`, `user`, `service_tier`,
 * `prompt_cache_key`, `safety_identifier`) are accepted and ignored (`prompt_cache_key` a string is passed
 * on as the turn's `cacheKey`, which `empo2 serve` keeps the prompt's KV cache under); `temperature`, `top_p` and `seed` are
 * passed to the server, which samples with them (`empo2 serve`) or at its own (the training gateway samples at
 * the rollout's). The empo2 fields:
 * `empo2_state` (the state the memory keys on), `empo2_valid_actions` (the state's valid actions, for the
 * records and the memory's query), `allowed_texts` (constrained decoding: the only texts the answer may
 * be), `return_token_ids` (also return the prompt's ids, as vLLM names it), `return_tokens_as_token_ids`
 * (vLLM's: log-prob tokens written "token_id:N").
 */
import { z } from 'zod';
import { checkConstrainable } from '../constrainable.ts';
import { parseRequest, RequestError } from '../errors.ts';
import type { FunctionTool, JsonSchema, OutputFormat, ToolCall, ToolChoice, TurnMessage, TurnRequest } from '../types.ts';

const stop = z
  .union([z.string(), z.array(z.string()).max(16)], { error: 'must be a string or an array of strings' })
  .nullable()
  .optional();
/** OpenAI's sampling fields (as ../../serve/protocol.ts takes them for empo2 serve's own routes). */
const samplingFields = {
  model: z.string().optional(),
  temperature: z.number().min(0).max(2).nullable().optional(),
  top_p: z.number().gt(0).max(1).nullable().optional(),
  seed: z.number().int().nullable().optional(),
  stop,
};
const zeroPenalty = z.literal(0, { error: 'penalties are not supported (only 0)' }).nullable().optional();
const textPart = z.strictObject({ type: z.literal('text', { error: 'only text content parts are supported' }), text: z.string() });
const content = z.union([z.string(), z.array(textPart)], { error: 'must be a string or an array of {type: "text", text} parts' });

const toolCall = z.strictObject({
  id: z.string().min(1, { error: 'a tool call needs its id' }),
  type: z.literal('function', { error: 'only "function" tool calls are supported' }),
  function: z.strictObject({ name: z.string().min(1), arguments: z.string() }),
});

const message = z.discriminatedUnion(
  'role',
  [
    z.strictObject({ role: z.enum(['system', 'developer', 'user']), content, name: z.string().optional() }),
    z.strictObject({
      role: z.literal('assistant'),
      content: content.nullable().optional(),
      name: z.string().optional(),
      refusal: z.string().nullable().optional(),
      tool_calls: z.array(toolCall).nullable().optional(),
    }),
    z.strictObject({
      role: z.literal('tool'),
      content,
      tool_call_id: z.string({ error: 'a tool message needs the tool_call_id of its call' }),
      // The tool's name: LangChain.js's ToolMessage (LangGraph's ReAct agent) sends it; vLLM takes it; it is not rendered.
      name: z.string().optional(),
    }),
  ],
  { error: 'must be "system", "developer", "user", "assistant" or "tool"' },
);
type WireMessage = z.infer<typeof message>;

const toolChoice = z.union(
  [
    z.enum(['auto', 'none', 'required']),
    z.strictObject({ type: z.literal('function'), function: z.strictObject({ name: z.string().min(1) }) }),
  ],
  { error: 'must be "auto", "none", "required" or {"type": "function", "function": {"name": ...}}' },
);

const ignored = z.unknown().optional();

export const ChatCompletionRequestSchema = z.strictObject({
  ...samplingFields,
  messages: z.array(message).min(1, { error: 'give at least one message' }).max(4096),
  n: z.literal(1, { error: 'only n = 1 is supported: send the request again for another sample' }).nullable().optional(),
  stream: z.boolean().nullable().optional(),
  stream_options: z.strictObject({ include_usage: z.boolean().optional() }).nullable().optional(),
  frequency_penalty: zeroPenalty,
  presence_penalty: zeroPenalty,
  logit_bias: z
    .record(z.string(), z.number())
    .refine((o) => Object.keys(o).length === 0, { error: 'logit_bias is not supported (only {})' })
    .nullable()
    .optional(),
  max_tokens: z.number().int().min(1).nullable().optional(),
  max_completion_tokens: z.number().int().min(1).nullable().optional(),
  logprobs: z.boolean().nullable().optional(),
  top_logprobs: z.literal(0, { error: 'only top_logprobs: 0 is supported; top alternatives are not computed' }).nullable().optional(),
  response_format: z
    .discriminatedUnion(
      'type',
      [
        z.strictObject({ type: z.literal('text') }),
        z.strictObject({ type: z.literal('json_object') }),
        z.strictObject({
          type: z.literal('json_schema'),
          json_schema: z.strictObject({
            name: z.string().regex(/^[A-Za-z0-9_-]{1,64}$/, { error: 'must be 1-64 letters, digits, "_" or "-"' }),
            description: z.string().optional(),
            schema: z.record(z.string(), z.unknown()).optional(),
            strict: z.boolean().nullable().optional(),
          }),
        }),
      ],
      { error: 'must be {type: "text"}, {type: "json_object"} or {type: "json_schema", json_schema: {name, schema}}' },
    )
    .nullable()
    .optional(),
  // Checked one by one below, so that a built-in tool type is refused by name and a bad schema by its path.
  tools: z.array(z.unknown()).max(1024).nullable().optional(),
  tool_choice: toolChoice.nullable().optional(),
  parallel_tool_calls: z.boolean().nullable().optional(),
  functions: z.array(z.unknown()).max(0, { error: 'the legacy "functions" field is not supported: send "tools"' }).nullable().optional(),
  function_call: z
    .enum(['auto', 'none'], { error: 'the legacy "function_call" field is not supported: send "tool_choice"' })
    .nullable()
    .optional(),
  // Accepted and ignored: they do not change what is sampled.
  store: ignored,
  metadata: ignored,
  user: ignored,
  service_tier: ignored,
  prompt_cache_key: ignored,
  safety_identifier: ignored,
  // empo2's fields.
  return_token_ids: z.boolean().nullable().optional(),
  return_tokens_as_token_ids: z.boolean().nullable().optional(),
  empo2_state: z.string().optional(),
  empo2_valid_actions: z.array(z.string()).max(100_000).nullable().optional(),
  allowed_texts: z.array(z.string().min(1)).min(1).nullable().optional(),
});
export type ChatCompletionRequest = z.infer<typeof ChatCompletionRequestSchema>;

/** How the answer is to be written (not part of what is sampled). */
export interface ChatAnswerOptions {
  model: string | undefined;
  stream: boolean;
  includeUsage: boolean;
  logprobs: boolean;
  returnTokenIds: boolean;
  /** Log-prob tokens written "token_id:N" (vLLM's `return_tokens_as_token_ids`). */
  tokensAsIds: boolean;
}

/** Reads a Chat Completions body into a turn; a bad one is a 400 naming the field and `serverName`. */
export function readChatRequest(body: unknown, serverName: string): { request: TurnRequest; answer: ChatAnswerOptions } {
  const r = parseRequest(ChatCompletionRequestSchema, body, { server: serverName });
  const tools = readTools(r.tools ?? [], serverName);
  const toolChoice = readToolChoice(r.tool_choice ?? 'auto', tools);
  const messages = readMessages(r.messages);
  const format = readFormat(r.response_format);
  checkConstrainable(tools, toolChoice, format, {
    toolParameters: (i) => `tools[${i}].function.parameters`,
    formatSchema: 'response_format.json_schema.schema',
  });
  const stop = r.stop == null ? [] : typeof r.stop === 'string' ? [r.stop] : r.stop;
  return {
    request: {
      messages,
      tools,
      toolChoice,
      parallelToolCalls: r.parallel_tool_calls ?? true,
      maxTokens: r.max_completion_tokens ?? r.max_tokens ?? null,
      stop,
      format,
      ...(r.model !== undefined ? { model: r.model } : {}),
      ...(r.temperature != null ? { temperature: r.temperature } : {}),
      ...(r.top_p != null ? { topP: r.top_p } : {}),
      ...(r.seed != null ? { seed: r.seed } : {}),
      ...(r.empo2_state !== undefined ? { state: r.empo2_state } : {}),
      ...(r.empo2_valid_actions != null ? { validActions: r.empo2_valid_actions } : {}),
      allowedTexts: r.allowed_texts ?? null,
      ...(typeof r.prompt_cache_key === 'string' && r.prompt_cache_key ? { cacheKey: r.prompt_cache_key } : {}),
    },
    answer: {
      model: r.model,
      stream: !!r.stream,
      includeUsage: !!r.stream_options?.include_usage,
      logprobs: !!r.logprobs,
      returnTokenIds: !!r.return_token_ids,
      tokensAsIds: !!r.return_tokens_as_token_ids,
    },
  };
}

function text(c: string | { text: string }[]): string {
  return typeof c === 'string' ? c : c.map((p) => p.text).join('');
}

function readMessages(wire: readonly WireMessage[]): TurnMessage[] {
  const called = new Set<string>();
  return wire.map((m, i): TurnMessage => {
    if (m.role === 'assistant') {
      const calls = (m.tool_calls ?? []).map((c, j): ToolCall => {
        const where = `messages[${i}].tool_calls[${j}].function.arguments`;
        let args: unknown;
        try {
          args = JSON.parse(c.function.arguments);
        } catch (e) {
          throw new RequestError(400, `"${where}" is not JSON: ${(e as Error).message}`, where);
        }
        if (typeof args !== 'object' || args === null || Array.isArray(args))
          throw new RequestError(400, `"${where}" must be a JSON object`, where);
        called.add(c.id);
        return { id: c.id, name: c.function.name, arguments: c.function.arguments };
      });
      return { role: 'assistant', content: m.content == null ? null : text(m.content), toolCalls: calls };
    }
    if (m.role === 'tool') {
      if (!called.has(m.tool_call_id))
        throw new RequestError(
          400,
          `"messages[${i}].tool_call_id": no tool call with id "${m.tool_call_id}" in an earlier assistant message`,
          `messages[${i}].tool_call_id`,
        );
      return { role: 'tool', toolCallId: m.tool_call_id, content: text(m.content) };
    }
    return { role: m.role, content: text(m.content) };
  });
}

const TOOL_NAME = /^[A-Za-z0-9_-]{1,64}$/;
const JSON_TYPES = new Set(['object', 'array', 'string', 'number', 'integer', 'boolean', 'null']);

function readTools(raw: readonly unknown[], serverName: string): FunctionTool[] {
  const names = new Set<string>();
  return raw.map((t, i) => {
    const at = `tools[${i}]`;
    const bad = (field: string, why: string): never => {
      throw new RequestError(400, `"${at}${field}": ${why}`, `${at}${field}`);
    };
    if (typeof t !== 'object' || t === null || Array.isArray(t)) bad('', 'must be an object {type: "function", function: {...}}');
    const o = t as Record<string, unknown>;
    if (o.type !== 'function')
      bad(
        '.type',
        `${typeof o.type === 'string' ? `"${o.type}" tools are` : 'a tool without type "function" is'} not supported by ${serverName}: only "function" tools`,
      );
    for (const k of Object.keys(o)) if (k !== 'type' && k !== 'function') bad(`.${k}`, 'unknown field');
    const f = o.function;
    if (typeof f !== 'object' || f === null || Array.isArray(f))
      return bad('.function', 'must be an object {name, description?, parameters?}');
    const fn = f as Record<string, unknown>;
    for (const k of Object.keys(fn))
      if (!['name', 'description', 'parameters', 'strict'].includes(k)) bad(`.function.${k}`, 'unknown field');
    if (typeof fn.name !== 'string' || !TOOL_NAME.test(fn.name)) bad('.function.name', 'must be 1-64 letters, digits, "_" or "-"');
    const name = fn.name as string;
    if (names.has(name)) bad('.function.name', `"${name}" is given twice`);
    names.add(name);
    if (fn.description !== undefined && fn.description !== null && typeof fn.description !== 'string')
      bad('.function.description', 'must be a string');
    if (fn.strict !== undefined && fn.strict !== null && typeof fn.strict !== 'boolean') bad('.function.strict', 'must be a boolean');
    if (fn.parameters !== undefined && fn.parameters !== null) {
      checkSchema(fn.parameters, `${at}.function.parameters`);
      const type = (fn.parameters as JsonSchema).type;
      if (type !== undefined && type !== 'object')
        bad('.function.parameters.type', 'the arguments must be an object: "type" must be "object"');
    }
    return {
      name,
      ...(typeof fn.description === 'string' ? { description: fn.description } : {}),
      ...(fn.parameters != null ? { parameters: fn.parameters as JsonSchema } : {}),
      ...(typeof fn.strict === 'boolean' ? { strict: fn.strict } : {}),
    };
  });
}

/** The parts of a JSON Schema the rendering and constraints read, checked for their shape; throws naming the path. */
function checkSchema(s: unknown, at: string): void {
  const bad = (field: string, why: string): never => {
    throw new RequestError(400, `"${at}${field}": ${why}`, `${at}${field}`);
  };
  if (typeof s === 'boolean') return;
  if (typeof s !== 'object' || s === null || Array.isArray(s)) return bad('', 'must be a JSON Schema object');
  const o = s as Record<string, unknown>;
  if (o.type !== undefined) {
    const types = Array.isArray(o.type) ? o.type : [o.type];
    if (types.length === 0 || !types.every((t) => typeof t === 'string' && JSON_TYPES.has(t)))
      bad('.type', `must be one of ${[...JSON_TYPES].join(', ')} (or an array of them)`);
  }
  if (o.properties !== undefined) {
    if (typeof o.properties !== 'object' || o.properties === null || Array.isArray(o.properties))
      bad('.properties', 'must be an object of JSON Schemas');
    for (const [k, v] of Object.entries(o.properties as object)) checkSchema(v, `${at}.properties.${k}`);
  }
  if (o.required !== undefined && (!Array.isArray(o.required) || !o.required.every((r) => typeof r === 'string')))
    bad('.required', 'must be an array of property names');
  if (o.enum !== undefined && (!Array.isArray(o.enum) || o.enum.length === 0)) bad('.enum', 'must be a non-empty array');
  if (o.items !== undefined) checkSchema(o.items, `${at}.items`);
  for (const k of ['anyOf', 'oneOf', 'allOf'] as const)
    if (o[k] !== undefined) {
      if (!Array.isArray(o[k]) || (o[k] as unknown[]).length === 0) bad(`.${k}`, 'must be a non-empty array of JSON Schemas');
      (o[k] as unknown[]).forEach((v, j) => checkSchema(v, `${at}.${k}[${j}]`));
    }
  if (o.additionalProperties !== undefined && typeof o.additionalProperties !== 'boolean')
    checkSchema(o.additionalProperties, `${at}.additionalProperties`);
}

function readToolChoice(c: NonNullable<ChatCompletionRequest['tool_choice']>, tools: readonly FunctionTool[]): ToolChoice {
  if (typeof c === 'string') {
    if (c === 'required' && tools.length === 0)
      throw new RequestError(400, '"tool_choice": "required" needs at least one tool in "tools"', 'tool_choice');
    return c;
  }
  if (!tools.some((t) => t.name === c.function.name))
    throw new RequestError(
      400,
      `"tool_choice.function.name": no tool "${c.function.name}" in "tools"${tools.length ? ` (${tools.map((t) => t.name).join(', ')})` : ''}`,
      'tool_choice.function.name',
    );
  return { name: c.function.name };
}

function readFormat(f: ChatCompletionRequest['response_format']): OutputFormat {
  if (!f || f.type === 'text') return { type: 'text' };
  if (f.type === 'json_object') return { type: 'json_object' };
  const { name, schema, strict } = f.json_schema;
  return { type: 'json_schema', name, schema: schema ?? {}, ...(strict != null ? { strict } : {}) };
}
