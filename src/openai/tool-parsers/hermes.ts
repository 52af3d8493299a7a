/**
 * The Hermes format (NousResearch Hermes 2 Pro, Qwen2.5, the ChatML default here): each call is a JSON
 * object `{"name": ..., "arguments": {...}}` between `<tool_call>` and `</tool_call>`; the text before the
 * first call is the answer's content. Semantics of vLLM's `hermes` parser: an unclosed last call is read to
 * the end of the text, and if any call fails to parse the whole text is returned as content, no calls.
 */
import { callFromJson, type ParsedAnswer, type ToolParser } from './json-call.ts';

const OPEN = '<tool_call>';
const CLOSE = '</tool_call>';

export const hermesToolParser: ToolParser = (text) => {
  const first = text.indexOf(OPEN);
  if (first < 0) return { content: text, calls: [], malformed: null };
  const bodies: string[] = [];
  let at = first;
  while (at >= 0) {
    const start = at + OPEN.length;
    const end = text.indexOf(CLOSE, start);
    if (end < 0) {
      bodies.push(text.slice(start));
      break;
    }
    bodies.push(text.slice(start, end));
    at = text.indexOf(OPEN, end + CLOSE.length);
  }
  try {
    const calls = bodies.map((b, i) => callFromJson(b.trim(), `tool call ${i + 1}`));
    const content = text.slice(0, first);
    return { content: content === '' ? null : content, calls, malformed: null } satisfies ParsedAnswer;
  } catch (e) {
    return { content: text, calls: [], malformed: (e as Error).message };
  }
};
