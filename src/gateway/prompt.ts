/**
 * An agent's chat messages as the policy sees them: rendered with the model's chat template (ChatML
 * for a model without one, as the trainer's plain prompts), the tips put at the end of the last user
 * message as one removable block of tokens, encoded the way the built-in rollout encodes its prompts
 * (../trainer/prompt.ts): the text before the tip block, the block and the text after it each encoded on
 * its own, so that cutting the block out gives exactly the tip-free prompt's ids; and, with a chat
 * template, token-in/token-out: where the new prompt's text extends the previous call's prompt and
 * answer, the previous ids are kept as sampled and only the new text is encoded.
 *
 * Calls an agent makes at once are branches of its conversation (a guardrail's prompt beside the main
 * agent's, two sub-agents): a call extends the longest of the answered calls' prompts and answers that its
 * text starts with, as they are when its prompt is encoded, so each conversation keeps its own sampled
 * tokens however its calls interleave with the others'. With one call at a time that is the previous call.
 */
import type { ChatMessage, ChatTemplate, TextTokenizer } from '../policy/types.ts';
import { renderChatML } from '../serve/chat.ts';
import { parseAction, renderTipBlock, type EncodedPrompt } from '../trainer/prompt.ts';
import { messageText, RequestError, type GatewayMessage } from './protocol.ts';

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
  /** The history the prompt extends token for token (null: encoded from its text). */
  extended: PromptHistory | null;
}

function render(r: PromptRendering, messages: readonly GatewayMessage[]): string {
  if (!r.template) return renderChatML(messages);
  const plain: ChatMessage[] = messages.map((m) => ({ role: m.role === 'developer' ? 'system' : m.role, content: messageText(m) }));
  return r.template.render(plain, { addGenerationPrompt: true });
}

/** The index of the last user message, or -1. */
export function lastUserMessage(messages: readonly GatewayMessage[]): number {
  for (let i = messages.length - 1; i >= 0; i--) if (messages[i].role === 'user') return i;
  return -1;
}

/**
 * The prompt of one call: `messages` rendered, `tips` (when any) at the end of the last user message;
 * `previous` are the answered calls' tip-free prompts and answers (the latest first), the longest one the
 * text starts with extended token for token with a template.
 */
export function encodeCall(
  tokenizer: TextTokenizer,
  r: PromptRendering,
  call: { messages: readonly GatewayMessage[]; tips: readonly string[]; previous: readonly PromptHistory[] },
): EncodedCall {
  const { messages, tips } = call;
  const u = lastUserMessage(messages);
  if (u < 0) {
    if (tips.length > 0) throw new Error('encodeCall: tips need a user message to go into');
    const text = render(r, messages);
    const previous = extended(r, text, call.previous);
    const ids = extend(tokenizer, r, text, previous);
    return { ids, tipSpan: null, tipFree: { ids, text }, extended: previous };
  }
  const slotted = messages.map((m, i) => (i === u ? { ...m, content: messageText(m) + TIP_SLOT } : m));
  const text = render(r, slotted);
  const at = text.indexOf(TIP_SLOT);
  if (at < 0 || text.indexOf(TIP_SLOT, at + 1) >= 0)
    throw new RequestError(
      500,
      "the model's chat template must render the last user message once and unchanged",
      'messages',
      'server_error',
    );
  const head = text.slice(0, at);
  const tail = text.slice(at + TIP_SLOT.length);
  const previous = extended(r, head, call.previous);
  const headIds = extend(tokenizer, r, head, previous);
  const tailIds = tokenizer.encode(tail);
  const tipFree = { ids: [...headIds, ...tailIds], text: head + tail };
  if (tips.length === 0) return { ids: tipFree.ids, tipSpan: null, tipFree, extended: previous };
  const tipIds = tokenizer.encode(renderTipBlock(tips));
  return {
    ids: [...headIds, ...tipIds, ...tailIds],
    tipSpan: [headIds.length, headIds.length + tipIds.length],
    tipFree,
    extended: previous,
  };
}

/** The history `text` extends: with a template, the longest of `previous` it starts with (the latest of equals). */
function extended(r: PromptRendering, text: string, previous: readonly PromptHistory[]): PromptHistory | null {
  if (!r.template) return null;
  let best: PromptHistory | null = null;
  for (const p of previous) if (text.startsWith(p.text) && (best === null || p.text.length > best.text.length)) best = p;
  return best;
}

/** `text` encoded, reusing `previous` ids where a template renders the new prompt as an extension of it. */
function extend(tokenizer: TextTokenizer, r: PromptRendering, text: string, previous: PromptHistory | null): number[] {
  if (r.template && previous && text.startsWith(previous.text))
    return [...previous.ids, ...tokenizer.encode(text.slice(previous.text.length))];
  return tokenizer.encode(text);
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
