/**
 * An agent's chat messages as the policy sees them: rendered with the model's chat template (ChatML
 * for a model without one, as the trainer's plain prompts), the tips put at the end of the last user
 * message as one removable block of tokens, encoded the way the built-in rollout encodes its prompts
 * (../trainer/prompt.ts): the text before the tip block, the block and the text after it each encoded on
 * its own, so that cutting the block out gives exactly the tip-free prompt's ids; and, with a chat
 * template, token-in/token-out: where the new prompt's text extends the previous call's prompt and
 * answer, the previous ids are kept as sampled and only the new text is encoded.
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
 * `previous` is the last call's tip-free prompt and answer, extended token for token with a template.
 */
export function encodeCall(
  tokenizer: TextTokenizer,
  r: PromptRendering,
  call: { messages: readonly GatewayMessage[]; tips: readonly string[]; previous: PromptHistory | null },
): EncodedCall {
  const { messages, tips, previous } = call;
  const u = lastUserMessage(messages);
  if (u < 0) {
    if (tips.length > 0) throw new Error('encodeCall: tips need a user message to go into');
    const text = render(r, messages);
    const ids = extend(tokenizer, r, text, previous);
    return { ids, tipSpan: null, tipFree: { ids, text } };
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
  const headIds = extend(tokenizer, r, head, previous);
  const tailIds = tokenizer.encode(tail);
  const tipFree = { ids: [...headIds, ...tailIds], text: head + tail };
  if (tips.length === 0) return { ids: tipFree.ids, tipSpan: null, tipFree };
  const tipIds = tokenizer.encode(renderTipBlock(tips));
  return { ids: [...headIds, ...tipIds, ...tailIds], tipSpan: [headIds.length, headIds.length + tipIds.length], tipFree };
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
