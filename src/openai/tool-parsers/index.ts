/**
 * Tool parsers in one registry, as vLLM keeps them (`--tool-call-parser`): each turns the model's answer
 * text into the text outside tool calls and the calls it made. A run picks one per model with the config
 * key `model.tool_parser` (default `hermes`, the format Qwen2.5's template and the ChatML + Hermes
 * default render: ../render.ts); a program registers its own with `registerToolParser`.
 *
 * A call the model wrote but that does not parse comes back as plain text (vLLM's behaviour: the client
 * sees what the model said), and `malformed` says why, so that the step records it and a run may score it
 * (`rollout.malformed_tool_call_reward`).
 */
import type { ToolParser } from './json-call.ts';
import { hermesToolParser } from './hermes.ts';
import { llama3JsonToolParser } from './llama3-json.ts';

export type { ParsedAnswer, ParsedToolCall, ToolParser } from './json-call.ts';

const parsers = new Map<string, ToolParser>([
  ['hermes', hermesToolParser],
  ['llama3_json', llama3JsonToolParser],
]);

/** Makes `parser` available under `name` (the value of `model.tool_parser`); a built-in name cannot be replaced. */
export function registerToolParser(name: string, parser: ToolParser): void {
  if (typeof name !== 'string' || name.length === 0) throw new Error('registerToolParser: give a non-empty name');
  if (typeof parser !== 'function')
    throw new Error(`registerToolParser("${name}"): the parser must be a function (text, {tools}) => {content, calls, malformed}`);
  if (name === 'hermes' || name === 'llama3_json') throw new Error(`registerToolParser: "${name}" is a built-in tool parser`);
  parsers.set(name, parser);
}

/** The parser registered as `name`. */
export function toolParser(name: string): ToolParser {
  const p = parsers.get(name);
  if (!p) throw new Error(`model.tool_parser: no tool parser "${name}" (registered: ${[...parsers.keys()].join(', ')})`);
  return p;
}

export function toolParserNames(): string[] {
  return [...parsers.keys()];
}
