/**
 * Chat messages as the policy saw them in training: ChatML, the same markers the trainer's prompts use
 * (src/trainer/prompt.ts), ending with an open assistant turn for the model to fill. It is what a chat
 * without tools renders to through the protocol layer (../openai/render.ts, as ./turn.ts calls it); tests
 * and callers that build a served prompt themselves render it here.
 */
import { renderMessages } from '../openai/render.ts';

/** A chat message without tool calls, its content a string or text parts (OpenAI's forms). */
export interface ChatMessage {
  role: 'system' | 'developer' | 'user' | 'assistant';
  content: string | readonly { type: 'text'; text: string }[];
}

export function messageText(m: ChatMessage): string {
  return typeof m.content === 'string' ? m.content : m.content.map((p) => p.text).join('');
}

export function renderChatML(messages: readonly ChatMessage[]): string {
  return renderMessages(
    messages.map((m) =>
      m.role === 'assistant' ? { role: 'assistant', content: messageText(m), toolCalls: [] } : { role: m.role, content: messageText(m) },
    ),
    { tools: [] },
  );
}
