/**
 * An agent's chat messages as the policy sees them: rendered with the model's chat template (ChatML
 * for a model without one, as the trainer's plain prompts; tools, tool calls and tool results as
 * ../openai/render.ts writes them), the tips put at the end of the last observation (the last user or
 * tool message) as one removable block of tokens, encoded the way the built-in rollout encodes its prompts
 * (../trainer/prompt.ts): the text before the tip block, the block and the text after it each encoded on
 * its own, so that cutting the block out gives exactly the tip-free prompt's ids; and, with a chat
 * template (or in a conversation with tools), token-in/token-out: where the new prompt's text extends the
 * previous call's prompt and answer, the previous ids are kept as sampled and only the new text is encoded.
 * An assistant turn the agent sends back is first matched to the turn sampled for it (by its tool calls'
 * ids and arguments, or by its content) and rendered as the text that was sampled, so that however the
 * agent's client re-serialises it the prompt extends the sampled ids (`spliceSampled`).
 */
import type { ChatTemplate, TextTokenizer } from '../policy/types.ts';
import { renderMessages, usesTools } from '../openai/render.ts';
import type { FunctionTool, ToolCall, TurnMessage } from '../openai/types.ts';
import { parseAction, renderTipBlock, type EncodedPrompt } from '../trainer/prompt.ts';
import { RequestError } from './protocol.ts';

/** Stands where the tip block goes while the messages are rendered; never in real text. */
const TIP_SLOT = '\u0000tip-slot\u0000';

/** How prompts are rendered: the model's template (and token-in/token-out), or ChatML re-encoded at every call. */
export interface PromptRendering {
  template?: ChatTemplate;
}

/** The previous call's tip-free prompt plus its answer, which the next prompt may extend. */
export interface PromptHistory {
  ids: number[];
  text: string;
}

export interface EncodedCall extends EncodedPrompt {
  /** The prompt without tips (what the next call's prompt may extend). */
  tipFree: PromptHistory;
  /** Whether the prompt extends the previous call's ids (kept as sampled) rather than being encoded whole. */
  extended: boolean;
}

/** The text of a message (an assistant's tool calls aside). */
export function turnText(m: TurnMessage): string {
  return m.content ?? '';
}

/** The index of the last observation (the last user or tool message), or -1. */
export function lastObservation(messages: readonly TurnMessage[]): number {
  for (let i = messages.length - 1; i >= 0; i--) if (messages[i].role === 'user' || messages[i].role === 'tool') return i;
  return -1;
}

/** An answer the policy sampled in this episode: its text as sampled, and as the agent was given it. */
export interface SampledTurn {
  text: string;
  content: string | null;
  toolCalls: ToolCall[];
}

/**
 * `messages` with each assistant turn that matches a sampled one (the same tool call ids, names and
 * arguments as JSON values, whatever their key order or spacing; or, without calls, the same content)
 * written as the text that was sampled; `exact`: every assistant turn matched one.
 */
export function spliceSampled(
  turns: readonly SampledTurn[],
  messages: readonly TurnMessage[],
): { messages: TurnMessage[]; exact: boolean } {
  let exact = true;
  const out = messages.map((m): TurnMessage => {
    if (m.role !== 'assistant') return m;
    const t = turns.find((t) => sameTurn(t, m));
    if (!t) {
      exact = false;
      return m;
    }
    return { role: 'assistant', content: t.text, toolCalls: [] };
  });
  return { messages: out, exact };
}

function sameTurn(t: SampledTurn, m: Extract<TurnMessage, { role: 'assistant' }>): boolean {
  const given = (m.content ?? '').trim();
  if (m.toolCalls.length === 0) return t.toolCalls.length === 0 && given === (t.content ?? '').trim();
  // A client may drop the text before its calls (LangChain sends ""), but not change it.
  if (given !== '' && given !== (t.content ?? '').trim()) return false;
  return (
    t.toolCalls.length === m.toolCalls.length &&
    m.toolCalls.every((c, i) => {
      const s = t.toolCalls[i];
      return c.id === s.id && c.name === s.name && sameJson(JSON.parse(c.arguments), JSON.parse(s.arguments));
    })
  );
}

function sameJson(a: unknown, b: unknown): boolean {
  if (typeof a !== 'object' || a === null || typeof b !== 'object' || b === null) return a === b;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  const ka = Object.keys(a);
  const kb = Object.keys(b);
  return (
    ka.length === kb.length && ka.every((k) => k in b && sameJson((a as Record<string, unknown>)[k], (b as Record<string, unknown>)[k]))
  );
}

/**
 * The prompt of one call: `messages` rendered with `tools`, `tips` (when any) at the end of the last
 * observation; `previous` is the last call's tip-free prompt and answer, extended token for token with a
 * template or in a conversation with tools (the tiny model's plain prompts are encoded whole, as the
 * built-in rollout encodes them).
 */
export function encodeCall(
  tokenizer: TextTokenizer,
  r: PromptRendering,
  call: { messages: readonly TurnMessage[]; tools?: readonly FunctionTool[]; tips: readonly string[]; previous: PromptHistory | null },
): EncodedCall {
  const { messages, tips } = call;
  const tools = call.tools ?? [];
  const render = (ms: readonly TurnMessage[]) => renderMessages(ms, { template: r.template, tools });
  const previous = r.template || usesTools(messages, tools) ? call.previous : null;
  const u = lastObservation(messages);
  if (u < 0) {
    if (tips.length > 0) throw new Error('encodeCall: tips need a user or tool message to go into');
    const text = render(messages);
    const { ids, extended } = extend(tokenizer, text, previous);
    return { ids, tipSpan: null, tipFree: { ids, text }, extended };
  }
  const slotted = messages.map((m, i) => (i === u ? ({ ...m, content: turnText(m) + TIP_SLOT } as TurnMessage) : m));
  const text = render(slotted);
  const at = text.indexOf(TIP_SLOT);
  if (at < 0 || text.indexOf(TIP_SLOT, at + 1) >= 0)
    throw new RequestError(
      500,
      "the model's chat template must render the last user or tool message once and unchanged",
      'messages',
      'server_error',
    );
  const head = text.slice(0, at);
  const tail = text.slice(at + TIP_SLOT.length);
  const { ids: headIds, extended } = extend(tokenizer, head, previous);
  const tailIds = tokenizer.encode(tail);
  const tipFree = { ids: [...headIds, ...tailIds], text: head + tail };
  if (tips.length === 0) return { ids: tipFree.ids, tipSpan: null, tipFree, extended };
  const tipIds = tokenizer.encode(renderTipBlock(tips));
  return { ids: [...headIds, ...tipIds, ...tailIds], tipSpan: [headIds.length, headIds.length + tipIds.length], tipFree, extended };
}

/** `text` encoded, reusing `previous` ids where the new prompt's text extends it. */
function extend(tokenizer: TextTokenizer, text: string, previous: PromptHistory | null): { ids: number[]; extended: boolean } {
  if (previous && text.startsWith(previous.text))
    return { ids: [...previous.ids, ...tokenizer.encode(text.slice(previous.text.length))], extended: true };
  return { ids: tokenizer.encode(text), extended: false };
}

/** What the next call may extend: this call's tip-free prompt and the answer's tokens as sampled. */
export function historyAfter(tokenizer: TextTokenizer, call: EncodedCall, response: readonly number[]): PromptHistory {
  return { ids: [...call.tipFree.ids, ...response], text: call.tipFree.text + tokenizer.decode([...response]) };
}

/**
 * The action a chat call's answer is recorded as, as the built-in rollout records it for the same
 * prompt style: with a chat template, the action parsed out of the free-text answer (its first line,
 * without an "Action:" label; a slot of the valid actions filled where one is the only way on), else
 * (the tiny model's plain prompts) the whole answer, trimmed.
 */
export function recordedAction(r: PromptRendering, answer: string, validActions: readonly string[]): string {
  return r.template ? parseAction(answer, validActions) : answer.trim();
}
