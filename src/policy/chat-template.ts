/**
 * Hugging Face chat templates: the Jinja template a model ships (in `tokenizer_config.json`'s
 * `chat_template`, or in `chat_template.jinja` / `chat_template.json` as newer `transformers`
 * save it) rendered with @huggingface/jinja, given the same variables `transformers`'
 * `apply_chat_template` passes: `messages`, `add_generation_prompt`, the special tokens
 * (`bos_token`, `eos_token`, ...), optional `tools` and `documents`, and any extra keyword values.
 */
import { existsSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { Template } from '@huggingface/jinja';

export interface ChatMessage {
  role: string;
  content: string | null | unknown[];
  [key: string]: unknown;
}

export interface ChatTemplateOptions {
  /** End with the header of an assistant turn, so generation continues as the assistant. */
  addGenerationPrompt?: boolean;
  tools?: unknown[];
  documents?: unknown[];
  /** Which template when the model ships several by name (default: "default", or "tool_use" with tools). */
  templateName?: string;
  /** Further variables the template reads (e.g. `enable_thinking`). */
  extra?: Record<string, unknown>;
}

/** The subset of tokenizer_config.json the renderer uses. */
export interface TokenizerConfigLike {
  chat_template?: string | { name: string; template: string }[] | null;
  [key: string]: unknown;
}

const SPECIAL_TOKEN_KEYS = ['bos_token', 'eos_token', 'unk_token', 'pad_token', 'sep_token', 'cls_token', 'mask_token'] as const;

/** A special token as tokenizer_config.json stores it: a string, or an AddedToken object with "content". */
function tokenText(value: unknown): string | undefined {
  if (typeof value === 'string') return value;
  if (typeof value === 'object' && value !== null && typeof (value as { content?: unknown }).content === 'string')
    return (value as { content: string }).content;
  return undefined;
}

export class ChatTemplate {
  private readonly compiled = new Map<string, Template>();

  constructor(
    /** By name; a single unnamed template is "default". */
    readonly templates: ReadonlyMap<string, string>,
    /** bos_token, eos_token, ... as plain strings. */
    readonly specialTokens: Readonly<Record<string, string>>,
    /** Where the template came from, for error messages. */
    readonly source: string,
  ) {
    if (templates.size === 0) throw new Error(`${source}: no chat template`);
  }

  static fromTokenizerConfig(config: TokenizerConfigLike, source = 'tokenizer_config.json'): ChatTemplate {
    if (typeof config !== 'object' || config === null) throw new Error(`${source}: expected a JSON object`);
    const templates = parseTemplates(config.chat_template, source);
    if (!templates) throw new Error(`${source}: has no "chat_template"`);
    const specials: Record<string, string> = {};
    for (const key of SPECIAL_TOKEN_KEYS) {
      const text = tokenText(config[key]);
      if (text !== undefined) specials[key] = text;
    }
    return new ChatTemplate(templates, specials, source);
  }

  /**
   * From a model directory: special tokens from tokenizer_config.json; the template from
   * chat_template.jinja, else chat_template.json, else tokenizer_config.json (the order
   * `transformers` uses).
   */
  static fromDir(dir: string): ChatTemplate {
    const configPath = join(dir, 'tokenizer_config.json');
    let config: TokenizerConfigLike = {};
    if (existsSync(configPath)) config = readJson(configPath) as TokenizerConfigLike;
    const jinjaPath = join(dir, 'chat_template.jinja');
    const jsonPath = join(dir, 'chat_template.json');
    if (existsSync(jinjaPath))
      return ChatTemplate.fromTokenizerConfig({ ...config, chat_template: readFileSync(jinjaPath, 'utf8') }, jinjaPath);
    if (existsSync(jsonPath)) {
      const t = (readJson(jsonPath) as { chat_template?: unknown }).chat_template;
      if (typeof t !== 'string') throw new Error(`${jsonPath}: "chat_template" must be a string`);
      return ChatTemplate.fromTokenizerConfig({ ...config, chat_template: t }, jsonPath);
    }
    if (!existsSync(configPath))
      throw new Error(`${dir}: no chat template (looked for chat_template.jinja, chat_template.json and tokenizer_config.json)`);
    return ChatTemplate.fromTokenizerConfig(config, configPath);
  }

  render(messages: readonly ChatMessage[], opts: ChatTemplateOptions = {}): string {
    checkMessages(messages, this.source);
    const name = opts.templateName ?? (opts.tools && this.templates.has('tool_use') ? 'tool_use' : 'default');
    const text =
      this.templates.get(name) ??
      (opts.templateName === undefined && this.templates.size === 1 ? [...this.templates.values()][0] : undefined);
    if (text === undefined)
      throw new Error(`${this.source}: no chat template named ${JSON.stringify(name)} (has ${[...this.templates.keys()].join(', ')})`);
    let template = this.compiled.get(name);
    if (!template) {
      try {
        template = new Template(text);
      } catch (e) {
        throw new Error(`${this.source}: chat template ${JSON.stringify(name)} does not parse: ${(e as Error).message}`);
      }
      this.compiled.set(name, template);
    }
    const variables: Record<string, unknown> = {
      ...this.specialTokens,
      ...(opts.extra ?? {}),
      messages,
      add_generation_prompt: opts.addGenerationPrompt ?? false,
    };
    if (opts.tools !== undefined) variables.tools = opts.tools;
    if (opts.documents !== undefined) variables.documents = opts.documents;
    try {
      return template.render(variables);
    } catch (e) {
      throw new Error(`${this.source}: rendering the chat template failed: ${(e as Error).message}`);
    }
  }
}

function parseTemplates(value: unknown, source: string): Map<string, string> | null {
  if (value === undefined || value === null) return null;
  if (typeof value === 'string') return new Map([['default', value]]);
  if (Array.isArray(value)) {
    const out = new Map<string, string>();
    value.forEach((entry, i) => {
      if (typeof entry !== 'object' || entry === null || typeof entry.name !== 'string' || typeof entry.template !== 'string') {
        throw new Error(`${source}: chat_template[${i}] must be { "name": string, "template": string }`);
      }
      out.set(entry.name, entry.template);
    });
    return out;
  }
  throw new Error(`${source}: "chat_template" must be a string or a list of { name, template }`);
}

function checkMessages(messages: readonly ChatMessage[], source: string): void {
  if (!Array.isArray(messages)) throw new Error(`${source}: messages must be an array of { role, content }`);
  messages.forEach((m, i) => {
    if (typeof m !== 'object' || m === null || typeof m.role !== 'string') throw new Error(`chat message ${i}: needs a string "role"`);
  });
}

function readJson(path: string): unknown {
  try {
    return JSON.parse(readFileSync(path, 'utf8'));
  } catch (e) {
    throw new Error(`${path}: invalid JSON: ${(e as Error).message}`);
  }
}

/**
 * Renders a model's chat template. `source` is a model directory, a parsed tokenizer_config.json
 * (or anything with `chat_template` and the special tokens), or an already loaded ChatTemplate.
 */
export function renderChatTemplate(
  source: string | TokenizerConfigLike | ChatTemplate,
  messages: readonly ChatMessage[],
  opts: ChatTemplateOptions = {},
): string {
  let template: ChatTemplate;
  if (source instanceof ChatTemplate) template = source;
  else if (typeof source === 'string') {
    if (!existsSync(source) || !statSync(source).isDirectory()) throw new Error(`chat template: ${source} is not a model directory`);
    template = ChatTemplate.fromDir(source);
  } else template = ChatTemplate.fromTokenizerConfig(source);
  return template.render(messages, opts);
}
