/** What the tool parsers share: the parsed answer's shape, and a call read from JSON text. */
import type { FunctionTool } from '../types.ts';

/** A call as parsed out of the text: the server gives it its id. */
export interface ParsedToolCall {
  name: string;
  /** The arguments object as compact JSON text (OpenAI's wire form). */
  arguments: string;
}

export interface ParsedAnswer {
  /** The answer's text outside the calls (null when there is none). */
  content: string | null;
  calls: ParsedToolCall[];
  /** Why the text's tool call(s) did not parse (then `calls` is empty and `content` the whole text); null otherwise. */
  malformed: string | null;
}

/** Parses one complete answer; `tools` are the request's (a parser may read them; the built-in ones do not). */
export type ToolParser = (text: string, o: { tools: readonly FunctionTool[] }) => ParsedAnswer;

/** The `arguments` value a call's JSON gives, as compact JSON text of an object; throws saying what is wrong. */
export function argumentsText(value: unknown, where: string): string {
  if (value === undefined) return '{}';
  // Some models write the arguments as a JSON string of the object: read it once more, as the client will.
  const v = typeof value === 'string' ? safeParse(value) : value;
  if (typeof v !== 'object' || v === null || Array.isArray(v)) throw new Error(`${where}: "arguments" must be a JSON object`);
  return JSON.stringify(v);
}

function safeParse(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

/** A call object `{name, arguments}` read from JSON text; throws saying what is wrong. */
export function callFromJson(text: string, where: string, argumentKeys: readonly string[] = ['arguments']): ParsedToolCall {
  let obj: unknown;
  try {
    obj = JSON.parse(text);
  } catch (e) {
    throw new Error(`${where}: not JSON (${(e as Error).message})`);
  }
  if (typeof obj !== 'object' || obj === null || Array.isArray(obj)) throw new Error(`${where}: not a JSON object`);
  const o = obj as Record<string, unknown>;
  if (typeof o.name !== 'string' || o.name.length === 0) throw new Error(`${where}: no "name" string`);
  const key = argumentKeys.find((k) => k in o);
  return { name: o.name, arguments: argumentsText(key === undefined ? undefined : o[key], where) };
}
