/**
 * Chat-template handling without Python (rendering parity with transformers is in
 * src/policy/hf/hf.test.ts): where the template and special tokens come from, named templates,
 * and errors that say which file or message is at fault.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ChatTemplate, renderChatTemplate } from './chat-template.ts';

const SIMPLE =
  '{{ bos_token }}{% for m in messages %}[{{ m.role }}]{{ m.content }}{{ eos_token }}{% endfor %}{% if add_generation_prompt %}[assistant]{% endif %}';
const dirs: string[] = [];
afterAll(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));
const tempDir = () => {
  const d = mkdtempSync(join(tmpdir(), 'empo2-chat-'));
  dirs.push(d);
  return d;
};

describe('chat templates', () => {
  it('passes special tokens stored as strings or AddedToken objects, and add_generation_prompt', () => {
    const config = { chat_template: SIMPLE, bos_token: { content: '<s>', __type: 'AddedToken' }, eos_token: '</s>' };
    const messages = [{ role: 'user', content: 'hi' }];
    expect(renderChatTemplate(config, messages)).toBe('<s>[user]hi</s>');
    expect(renderChatTemplate(config, messages, { addGenerationPrompt: true })).toBe('<s>[user]hi</s>[assistant]');
  });

  it('picks named templates: "default", "tool_use" when tools are given, or one asked for by name', () => {
    const t = ChatTemplate.fromTokenizerConfig({
      chat_template: [
        { name: 'default', template: 'D{{ messages | length }}' },
        { name: 'tool_use', template: 'T{{ tools | length }}' },
        { name: 'rag', template: 'R{{ documents[0].title }}' },
      ],
    });
    const m = [{ role: 'user', content: 'x' }];
    expect(t.render(m)).toBe('D1');
    expect(t.render(m, { tools: [{}, {}] })).toBe('T2');
    expect(t.render(m, { templateName: 'rag', documents: [{ title: 'doc' }] })).toBe('Rdoc');
    expect(() => t.render(m, { templateName: 'nope' })).toThrow('no chat template named "nope" (has default, tool_use, rag)');
  });

  it('reads chat_template.jinja before tokenizer_config.json, as transformers does', () => {
    const d = tempDir();
    writeFileSync(join(d, 'tokenizer_config.json'), JSON.stringify({ chat_template: 'old', eos_token: '<e>' }));
    expect(renderChatTemplate(d, [])).toBe('old');
    writeFileSync(join(d, 'chat_template.jinja'), 'new{{ eos_token }}');
    expect(renderChatTemplate(d, [])).toBe('new<e>');
  });

  it('errors name the file or the message', () => {
    const d = tempDir();
    expect(() => ChatTemplate.fromDir(d)).toThrow(`${d}: no chat template`);
    writeFileSync(join(d, 'tokenizer_config.json'), JSON.stringify({ eos_token: '<e>' }));
    expect(() => ChatTemplate.fromDir(d)).toThrow(`${join(d, 'tokenizer_config.json')}: has no "chat_template"`);
    writeFileSync(join(d, 'tokenizer_config.json'), '{ "chat_template": ');
    expect(() => ChatTemplate.fromDir(d)).toThrow(`${join(d, 'tokenizer_config.json')}: invalid JSON`);
    writeFileSync(join(d, 'tokenizer_config.json'), JSON.stringify({ chat_template: '{% for m in messages %}' }));
    expect(() => renderChatTemplate(d, [])).toThrow(`${join(d, 'tokenizer_config.json')}: chat template "default" does not parse`);
    const strict = {
      chat_template: "{% if messages[0].role != 'user' %}{{ raise_exception('first message must be from the user') }}{% endif %}ok",
    };
    expect(renderChatTemplate(strict, [{ role: 'user', content: '' }])).toBe('ok');
    expect(() => renderChatTemplate(strict, [{ role: 'system', content: '' }])).toThrow(
      'rendering the chat template failed: first message must be from the user',
    );
    expect(() => renderChatTemplate(strict, [{ content: 'x' } as never])).toThrow('chat message 0: needs a string "role"');
    expect(() => renderChatTemplate(join(d, 'missing'), [])).toThrow('is not a model directory');
  });
});
