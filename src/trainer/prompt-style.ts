/**
 * Which prompt style a run uses, resolved from the config and the model: the instruct style needs
 * the model's chat template, which a real model's directory carries and the tiny model's does not.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Config } from '../config/schema.ts';
import { ChatTemplate, ggufCacheDir, isGgufPath } from '../policy/index.ts';
import { INSTRUCT_SYSTEM_PROMPT, type PromptSettings } from './prompt.ts';

const templates = new Map<string, ChatTemplate | null>();

/** The chat template a model directory ships, or null when it has none (the tiny model's). */
export function chatTemplateIn(dir: string): ChatTemplate | null {
  if (!templates.has(dir)) {
    const config = join(dir, 'tokenizer_config.json');
    const has =
      existsSync(join(dir, 'chat_template.jinja')) ||
      existsSync(join(dir, 'chat_template.json')) ||
      (existsSync(config) &&
        typeof (JSON.parse(readFileSync(config, 'utf8')) as { chat_template?: unknown }).chat_template !== 'undefined');
    templates.set(dir, has ? ChatTemplate.fromDir(dir) : null);
  }
  return templates.get(dir)!;
}

/** The directory of `model.path`: a .gguf file's import (made when the engine was created). */
function modelDir(path: string): string {
  if (!isGgufPath(path)) return path;
  const dir = ggufCacheDir(path);
  if (!existsSync(join(dir, 'config.json')))
    throw new Error(`model.path ${path}: not imported yet (expected ${dir}); create the engine first, or run empo2 import-gguf`);
  return dir;
}

/** The prompt settings of a run: the style's defaults for what the config leaves to it. */
export function promptSettings(cfg: Config): PromptSettings {
  const p = cfg.prompt;
  const template = p.style !== 'plain' && cfg.model.path ? chatTemplateIn(modelDir(cfg.model.path)) : null;
  if (p.style === 'instruct' && !template) {
    throw new Error(
      `prompt.style: instruct needs the model's chat template, and ${cfg.model.path ? `model.path ${cfg.model.path} has none (no chat_template.jinja, chat_template.json or chat_template in tokenizer_config.json)` : 'the default tiny model has none (set model.path)'}`,
    );
  }
  const instruct = template !== null;
  return {
    history: p.history === 'auto' ? (instruct ? null : 2) : p.history,
    showValidActions: p.show_valid_actions ?? instruct,
    system: p.system ?? (instruct ? INSTRUCT_SYSTEM_PROMPT : ''),
    template: template ?? undefined,
    maxListedActions: p.max_listed_actions,
  };
}
