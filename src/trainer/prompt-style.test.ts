import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ConfigSchema } from '../config/schema.ts';
import { INSTRUCT_SYSTEM_PROMPT } from './prompt.ts';
import { promptSettings } from './prompt-style.ts';

function modelDir(files: Record<string, string>): string {
  const dir = mkdtempSync(join(tmpdir(), 'empo2-style-'));
  for (const [name, text] of Object.entries(files)) writeFileSync(join(dir, name), text);
  return dir;
}

const withTemplate = modelDir({ 'chat_template.jinja': "{% for m in messages %}{{ m['content'] }}{% endfor %}" });
const withConfigTemplate = modelDir({ 'tokenizer_config.json': JSON.stringify({ chat_template: '{{ messages[0].content }}' }) });
const tinyModel = modelDir({ 'tokenizer_config.json': JSON.stringify({ model_max_length: 512 }) });

describe('prompt style', () => {
  it('auto: the tiny model (no model.path, or a directory without a chat template) keeps the plain prompt', () => {
    for (const path of [null, tinyModel]) {
      const s = promptSettings(ConfigSchema.parse({ model: { path } }));
      expect(s).toMatchObject({ history: 2, showValidActions: false, system: '' });
      expect(s.template).toBeUndefined();
    }
  });

  it('auto: a model with a chat template gets the instruct prompt: its template, a system prompt, the valid actions, the full history', () => {
    for (const path of [withTemplate, withConfigTemplate]) {
      const s = promptSettings(ConfigSchema.parse({ model: { path } }));
      expect(s).toMatchObject({ history: null, showValidActions: true, system: INSTRUCT_SYSTEM_PROMPT, maxListedActions: 64 });
      expect(s.template).toBeDefined();
    }
  });

  it('what the config sets wins over the style defaults', () => {
    const s = promptSettings(
      ConfigSchema.parse({ model: { path: withTemplate }, prompt: { history: 3, show_valid_actions: false, system: '' } }),
    );
    expect(s).toMatchObject({ history: 3, showValidActions: false, system: '' });
    expect(promptSettings(ConfigSchema.parse({ model: { path: withTemplate }, prompt: { style: 'plain' } })).template).toBeUndefined();
  });

  it('instruct without a chat template is refused, naming the model', () => {
    expect(() => promptSettings(ConfigSchema.parse({ prompt: { style: 'instruct' } }))).toThrow(
      /prompt.style: instruct needs the model's chat template, and the default tiny model has none/,
    );
    expect(() => promptSettings(ConfigSchema.parse({ model: { path: tinyModel }, prompt: { style: 'instruct' } }))).toThrow(
      new RegExp(`model.path ${tinyModel} has none`),
    );
  });
});
