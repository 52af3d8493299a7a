/**
 * Llama 3.x's JSON tool calls (vLLM's `llama3_json`): the answer is one JSON object `{"name": ...,
 * "arguments"|"parameters": {...}}`, or several separated by `;`, optionally after `<|python_tag|>`. As in
 * vLLM, the first run of such objects in the text is taken (nested one level deep), the text around them is
 * dropped (content null), and a run that does not parse gives the whole text back as content.
 */
import { callFromJson, type ToolParser } from './json-call.ts';

const PYTHON_TAG = '<|python_tag|>';
/** One JSON object with objects nested one level, then more after semicolons (vLLM's pattern). */
const OBJECT = String.raw`\{[^{}]*(?:\{[^{}]*\}[^{}]*)*\}`;
const RUN = new RegExp(`${OBJECT}(?:\\s*;\\s*${OBJECT})*`, 's');

export const llama3JsonToolParser: ToolParser = (text) => {
  if (!text.includes(PYTHON_TAG) && !text.includes('{')) return { content: text, calls: [], malformed: null };
  const m = RUN.exec(text);
  if (!m) return { content: text, calls: [], malformed: text.includes(PYTHON_TAG) ? `no complete JSON object after ${PYTHON_TAG}` : null };
  try {
    const parts = m[0]
      .split(';')
      .map((p) => p.trim())
      .filter((p) => p !== '');
    const calls = parts.map((p, i) => callFromJson(p, `tool call ${i + 1}`, ['arguments', 'parameters']));
    return { content: null, calls, malformed: null };
  } catch (e) {
    return { content: text, calls: [], malformed: (e as Error).message };
  }
};
