/**
 * A turn's messages as the model reads them: the model's chat template, with its own tool support where it
 * has one (Qwen2.5's `<tools>` / `<tool_call>` / `<tool_response>`: the messages in the shapes
 * `transformers` passes, tool calls' arguments as objects), else a ChatML + Hermes default (the tools listed
 * in the system turn in `<tools></tools>` with the Hermes instruction, calls as `<tool_call>` blocks in the
 * assistant's text, results as `<tool_response>` blocks in a user turn, as Qwen2.5's template writes them)
 * rendered through the model's template (SmolLM2's) or plain ChatML (the tiny model, which has none).
 *
 * A request without tools, tool calls or tool messages renders exactly as before tools were served.
 */
import { canonicalJson, IM_END, IM_START, type ChatMessage } from '../policy/index.ts';
import type { ChatTemplate } from '../policy/types.ts';
import type { FunctionTool, TurnMessage } from './types.ts';

export interface RenderOptions {
  template?: ChatTemplate;
  tools: readonly FunctionTool[];
}

/** Whether a template renders tools itself: its source reads `tools` and writes tool calls. */
export function templateRendersTools(t: ChatTemplate): boolean {
  return [...t.templates.values()].some((src) => /\btools\b/.test(src) && /tool_call/.test(src));
}

/** Whether the conversation involves tools at all (then a template without tool support gets the Hermes default). */
export function usesTools(messages: readonly TurnMessage[], tools: readonly FunctionTool[]): boolean {
  return tools.length > 0 || messages.some((m) => m.role === 'tool' || (m.role === 'assistant' && m.toolCalls.length > 0));
}

/** The prompt text of `messages`, ending with an open assistant turn. */
export function renderMessages(messages: readonly TurnMessage[], o: RenderOptions): string {
  const { template, tools } = o;
  if (!usesTools(messages, tools)) return plain(messages.map(plainMessage), template);
  if (template && templateRendersTools(template))
    return template.render(messages.map(hfMessage), {
      addGenerationPrompt: true,
      ...(tools.length > 0 ? { tools: tools.map(hfTool) } : {}),
    });
  return plain(hermesInText(messages, tools), template);
}

function plainMessage(m: TurnMessage): { role: string; content: string } {
  if (m.role === 'tool') return { role: 'tool', content: m.content };
  if (m.role === 'assistant') return { role: 'assistant', content: m.content ?? '' };
  // "developer" is OpenAI's newer name for the system role; chat templates know only "system".
  return { role: m.role === 'developer' ? 'system' : m.role, content: m.content };
}

function plain(messages: readonly { role: string; content: string }[], template: ChatTemplate | undefined): string {
  if (template) return template.render(messages as ChatMessage[], { addGenerationPrompt: true });
  let text = '';
  for (const m of messages) text += `${IM_START}${m.role}\n${m.content}${IM_END}\n`;
  return `${text}${IM_START}assistant\n`;
}

/** A message as `transformers` hands it to a template. */
function hfMessage(m: TurnMessage): ChatMessage {
  if (m.role === 'tool') return { role: 'tool', content: m.content, tool_call_id: m.toolCallId };
  if (m.role === 'assistant') {
    if (m.toolCalls.length === 0) return { role: 'assistant', content: m.content ?? '' };
    return {
      role: 'assistant',
      content: m.content,
      tool_calls: m.toolCalls.map((c) => ({
        id: c.id,
        type: 'function',
        function: { name: c.name, arguments: JSON.parse(c.arguments) as unknown },
      })),
    };
  }
  return plainMessage(m);
}

function hfTool(t: FunctionTool): unknown {
  return {
    type: 'function',
    function: {
      name: t.name,
      ...(t.description !== undefined ? { description: t.description } : {}),
      parameters: t.parameters ?? { type: 'object', properties: {} },
    },
  };
}

/** The Hermes instruction and the tools' signatures, as Qwen2.5's template words them. */
export function hermesToolsPrompt(tools: readonly FunctionTool[]): string {
  return (
    '# Tools\n\nYou may call one or more functions to assist with the user query.\n\n' +
    'You are provided with function signatures within <tools></tools> XML tags:\n<tools>' +
    tools.map((t) => `\n${canonicalJson(hfTool(t))}`).join('') +
    '\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n' +
    '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
  );
}

/** One call as the Hermes format writes it (JSON spaced as Qwen2.5's template's `tojson` and a constrained call write it). */
export function hermesCallText(name: string, args: string): string {
  return `<tool_call>\n{"name": ${JSON.stringify(name)}, "arguments": ${canonicalJson(JSON.parse(args))}}\n</tool_call>`;
}

/** The conversation with tools written into the text, for a template (or ChatML) that knows no tools. */
function hermesInText(messages: readonly TurnMessage[], tools: readonly FunctionTool[]): { role: string; content: string }[] {
  const out: { role: string; content: string }[] = [];
  let i = 0;
  if (tools.length > 0) {
    const first = messages[0];
    if (first && (first.role === 'system' || first.role === 'developer')) {
      out.push({ role: 'system', content: `${first.content}\n\n${hermesToolsPrompt(tools)}` });
      i = 1;
    } else out.push({ role: 'system', content: hermesToolsPrompt(tools) });
  }
  for (; i < messages.length; i++) {
    const m = messages[i];
    if (m.role === 'assistant' && m.toolCalls.length > 0) {
      const parts = m.content ? [m.content] : [];
      out.push({ role: 'assistant', content: [...parts, ...m.toolCalls.map((c) => hermesCallText(c.name, c.arguments))].join('\n') });
    } else if (m.role === 'tool') {
      const results: string[] = [];
      for (; i < messages.length && messages[i].role === 'tool'; i++)
        results.push(`<tool_response>\n${messages[i].content}\n</tool_response>`);
      i--;
      out.push({ role: 'user', content: results.join('\n') });
    } else out.push(plainMessage(m));
  }
  return out;
}
