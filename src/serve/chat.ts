/**
 * Chat messages as the policy saw them in training: ChatML, the same markers the trainer's
 * prompts use (src/trainer/prompt.ts), ending with an open assistant turn for the model to fill.
 */
import { IM_END, IM_START } from '../policy/chat-tokens.ts';
import type { ChatMessage } from './protocol.ts';

export function messageText(m: ChatMessage): string {
  return typeof m.content === 'string' ? m.content : m.content.map((p) => p.text).join('');
}

export function renderChatML(messages: readonly ChatMessage[]): string {
  let text = '';
  // "developer" is OpenAI's newer name for the system role; ChatML models know only "system".
  for (const m of messages) text += `${IM_START}${m.role === 'developer' ? 'system' : m.role}\n${messageText(m)}${IM_END}\n`;
  return `${text}${IM_START}assistant\n`;
}
