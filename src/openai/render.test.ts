/**
 * Rendering a tool conversation: through a template with its own tool support (Qwen2.5's) in the shapes
 * `transformers` passes; the ChatML + Hermes default for a model without one gives the same text as
 * Qwen2.5's template for the same conversation (a system message given); through a template without tool
 * support (SmolLM2's) the same turns in its own markers; a conversation without tools renders as before.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ChatTemplate } from '../policy/index.ts';
import { QWEN25_TEMPLATE } from '../../test/support/qwen25-template.ts';
import { hermesToolsPrompt, renderMessages, templateRendersTools } from './render.ts';
import type { FunctionTool, TurnMessage } from './types.ts';

const qwen = ChatTemplate.fromTokenizerConfig({ chat_template: QWEN25_TEMPLATE, eos_token: '<|im_end|>' }, 'qwen2.5');
const smol = ChatTemplate.fromTokenizerConfig(
  JSON.parse(readFileSync(join(import.meta.dirname, '../../models/smollm2-135m-instruct/tokenizer_config.json'), 'utf8')),
  'smollm2',
);

const TOOLS: FunctionTool[] = [
  {
    name: 'move',
    description: 'Go to a room.',
    parameters: { type: 'object', properties: { room: { type: 'string', enum: ['hall', 'kitchen'] } }, required: ['room'] },
  },
  { name: 'look', parameters: { type: 'object', properties: {} } },
];

const EPISODE: TurnMessage[] = [
  { role: 'system', content: 'You find things.' },
  { role: 'user', content: 'Find the hat.' },
  { role: 'assistant', content: 'Let me go.', toolCalls: [{ id: 'call_1', name: 'move', arguments: '{"room":"kitchen"}' }] },
  { role: 'tool', toolCallId: 'call_1', content: 'You are in the kitchen.' },
  {
    role: 'assistant',
    content: null,
    toolCalls: [
      { id: 'call_2', name: 'look', arguments: '{}' },
      { id: 'call_3', name: 'move', arguments: '{"room": "hall"}' },
    ],
  },
  { role: 'tool', toolCallId: 'call_2', content: 'A hat.' },
  { role: 'tool', toolCallId: 'call_3', content: 'You are in the hall.' },
];

describe('rendering tool conversations', () => {
  it("through Qwen2.5's template: its own tools block, tool calls and tool responses", () => {
    expect(templateRendersTools(qwen)).toBe(true);
    const text = renderMessages(EPISODE, { template: qwen, tools: TOOLS });
    expect(text).toContain('<tools>\n{"type": "function", "function": {"name": "move", "description": "Go to a room."');
    expect(text).toContain(
      '<|im_start|>assistant\nLet me go.\n<tool_call>\n{"name": "move", "arguments": {"room": "kitchen"}}\n</tool_call><|im_end|>\n',
    );
    expect(text).toContain(
      '<|im_start|>user\n<tool_response>\nA hat.\n</tool_response>\n<tool_response>\nYou are in the hall.\n</tool_response><|im_end|>\n',
    );
    expect(text.endsWith('<|im_start|>assistant\n')).toBe(true);
  });

  it("the ChatML + Hermes default writes what Qwen2.5's template writes", () => {
    const byDefault = renderMessages(EPISODE, { tools: TOOLS });
    expect(byDefault).toBe(renderMessages(EPISODE, { template: qwen, tools: TOOLS }));
    expect(byDefault.startsWith(`<|im_start|>system\nYou find things.\n\n${hermesToolsPrompt(TOOLS)}<|im_end|>\n`)).toBe(true);
  });

  it("through SmolLM2's template (no tool support): the Hermes turns in its ChatML", () => {
    expect(templateRendersTools(smol)).toBe(false);
    expect(renderMessages(EPISODE, { template: smol, tools: TOOLS })).toBe(renderMessages(EPISODE, { tools: TOOLS }));
    // Without a system message the template adds its own, and the tools go in a system turn of their own.
    const [, ...noSystem] = EPISODE;
    const text = renderMessages(noSystem, { template: smol, tools: TOOLS });
    expect(text.startsWith(`<|im_start|>system\n${hermesToolsPrompt(TOOLS)}<|im_end|>\n<|im_start|>user\nFind the hat.`)).toBe(true);
  });

  it('a conversation without tools renders as plain ChatML or the template, as before', () => {
    const plain: TurnMessage[] = [
      { role: 'developer', content: 'Be brief.' },
      { role: 'user', content: 'Hi' },
      { role: 'assistant', content: 'Hello', toolCalls: [] },
      { role: 'user', content: 'Bye' },
    ];
    expect(renderMessages(plain, { tools: [] })).toBe(
      '<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n',
    );
    expect(renderMessages(plain, { template: qwen, tools: [] })).toBe(renderMessages(plain, { tools: [] }));
  });
});
