/**
 * A Hugging Face `tokenizer.json` and `tokenizer_config.json` rebuilt from a GGUF file's
 * `tokenizer.*` metadata: the vocabulary, merges and token types, the special tokens, BOS/EOS and
 * whether they are added, the chat template(s), and the pre-tokenizer that
 * `tokenizer.ggml.pre` names (the split the merges were learned with, as llama.cpp applies it).
 *
 * Only byte-level BPE vocabularies (`tokenizer.ggml.model` "gpt2": Llama 3, Qwen2, SmolLM,
 * StarCoder...) are rebuilt, since those are what src/policy/tokenizer.ts encodes;
 * SentencePiece ("llama") vocabularies are refused by name.
 */
import { BYTE_TO_SYMBOL, type AddedTokenJSON } from '../tokenizer.ts';
import type { GgufMetadata } from './file.ts';

const BYTE_LEVEL = { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true };
const BYTE_LEVEL_AFTER_SPLIT = { ...BYTE_LEVEL, use_regex: false };
const split = (regex: string) => ({ type: 'Split', pattern: { Regex: regex }, behavior: 'Isolated', invert: false });

/** Qwen2's pattern (its tokenizer.json; llama.cpp's LLAMA_VOCAB_PRE_TYPE_QWEN2). */
const QWEN2_SPLIT = String.raw`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`;
/** Llama 3's pattern (its tokenizer.json; llama.cpp's LLAMA_VOCAB_PRE_TYPE_LLAMA3). */
const LLAMA3_SPLIT = String.raw`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`;

interface PreTokenization {
  preTokenizer: object;
  /** Llama 3 looks a whole pre-token up in the vocabulary before merging (tokenizers' ignore_merges). */
  ignoreMerges: boolean;
}

/** By `tokenizer.ggml.pre`: the pre-tokenizer of the model's own tokenizer.json. */
const PRE_TOKENIZERS: Record<string, PreTokenization> = {
  'gpt-2': { preTokenizer: BYTE_LEVEL, ignoreMerges: false },
  // StarCoder's tokenizer, which SmolLM keeps: every digit alone, then GPT-2's split.
  smollm: {
    preTokenizer: { type: 'Sequence', pretokenizers: [{ type: 'Digits', individual_digits: true }, BYTE_LEVEL] },
    ignoreMerges: false,
  },
  starcoder: {
    preTokenizer: { type: 'Sequence', pretokenizers: [{ type: 'Digits', individual_digits: true }, BYTE_LEVEL] },
    ignoreMerges: false,
  },
  qwen2: { preTokenizer: { type: 'Sequence', pretokenizers: [split(QWEN2_SPLIT), BYTE_LEVEL_AFTER_SPLIT] }, ignoreMerges: false },
  'deepseek-r1-qwen': {
    preTokenizer: { type: 'Sequence', pretokenizers: [split(QWEN2_SPLIT), BYTE_LEVEL_AFTER_SPLIT] },
    ignoreMerges: false,
  },
  'llama-bpe': { preTokenizer: { type: 'Sequence', pretokenizers: [split(LLAMA3_SPLIT), BYTE_LEVEL_AFTER_SPLIT] }, ignoreMerges: true },
  llama3: { preTokenizer: { type: 'Sequence', pretokenizers: [split(LLAMA3_SPLIT), BYTE_LEVEL_AFTER_SPLIT] }, ignoreMerges: true },
};

/** llama.cpp's token types (llama_token_type). */
const CONTROL = 3;
const USER_DEFINED = 4;

const SYMBOLS = new Set(BYTE_TO_SYMBOL);
/** A vocabulary entry in the byte-level alphabet ("Ġworld"); a token stored as plain text is respelled from its UTF-8. */
function byteLevelSpelling(token: string): string {
  for (const ch of token) if (!SYMBOLS.has(ch)) return [...new TextEncoder().encode(token)].map((b) => BYTE_TO_SYMBOL[b]).join('');
  return token;
}

export interface ImportedTokenizer {
  tokenizer: Record<string, unknown>;
  tokenizerConfig: Record<string, unknown>;
}

export function tokenizerFromGguf(m: GgufMetadata, vocabSize: number, contextLength: number): ImportedTokenizer {
  const where = m.source;
  const model = m.string('tokenizer.ggml.model');
  if (model !== 'gpt2') {
    throw new Error(
      `${where}: metadata "tokenizer.ggml.model" is "${model}"; only byte-level BPE vocabularies ("gpt2": Llama 3, Qwen2, SmolLM) are supported${model === 'llama' ? ' (this is a SentencePiece vocabulary)' : ''}`,
    );
  }
  const pre = m.optionalString('tokenizer.ggml.pre') ?? 'default';
  const preTokenization = PRE_TOKENIZERS[pre];
  if (!preTokenization)
    throw new Error(
      `${where}: metadata "tokenizer.ggml.pre" is "${pre}"; supported pre-tokenizers: ${Object.keys(PRE_TOKENIZERS).join(', ')}`,
    );

  const tokens = m.stringArray('tokenizer.ggml.tokens');
  if (tokens.length === 0 || tokens.length > vocabSize)
    throw new Error(`${where}: metadata "tokenizer.ggml.tokens" has ${tokens.length} tokens; the embedding has ${vocabSize} rows`);
  const types = m.has('tokenizer.ggml.token_type') ? m.integerArray('tokenizer.ggml.token_type') : tokens.map(() => 1);
  if (types.length !== tokens.length)
    throw new Error(`${where}: metadata "tokenizer.ggml.token_type" has ${types.length} entries for ${tokens.length} tokens`);
  const mergeStrings = m.stringArray('tokenizer.ggml.merges');

  const vocab: Record<string, number> = {};
  const added: AddedTokenJSON[] = [];
  tokens.forEach((token, id) => {
    const spelled = byteLevelSpelling(token);
    if (Object.hasOwn(vocab, spelled))
      throw new Error(`${where}: metadata "tokenizer.ggml.tokens"[${id}] ${JSON.stringify(token)} repeats token ${vocab[spelled]}`);
    vocab[spelled] = id;
    // Control and user-defined tokens are matched whole in the raw text, as llama.cpp does; the
    // file stores them as that text.
    if (types[id] === CONTROL || types[id] === USER_DEFINED) {
      added.push({
        id,
        content: token,
        single_word: false,
        lstrip: false,
        rstrip: false,
        normalized: false,
        special: types[id] === CONTROL,
      });
    }
  });
  const merges = mergeStrings.map((merge, i) => {
    const parts = merge.split(' ');
    if (parts.length !== 2 || !Object.hasOwn(vocab, parts[0]) || !Object.hasOwn(vocab, parts[1])) {
      throw new Error(
        `${where}: metadata "tokenizer.ggml.merges"[${i}] ${JSON.stringify(merge)} is not two vocabulary tokens separated by a space`,
      );
    }
    return parts as [string, string];
  });

  const special = (key: string): { id: number; text: string } | null => {
    const id = m.optionalCount(`tokenizer.ggml.${key}`);
    if (id === undefined) return null;
    if (id >= tokens.length) throw new Error(`${where}: metadata "tokenizer.ggml.${key}" is ${id}, outside the ${tokens.length} tokens`);
    return { id, text: tokens[id] };
  };
  const bos = special('bos_token_id');
  const eos = special('eos_token_id');
  const unk = special('unknown_token_id');
  const pad = special('padding_token_id');
  const addBos = m.optionalBool('tokenizer.ggml.add_bos_token') ?? false;
  const addEos = m.optionalBool('tokenizer.ggml.add_eos_token') ?? false;
  if (addBos && !bos)
    throw new Error(`${where}: metadata "tokenizer.ggml.add_bos_token" is true but "tokenizer.ggml.bos_token_id" is missing`);
  if (addEos && !eos)
    throw new Error(`${where}: metadata "tokenizer.ggml.add_eos_token" is true but "tokenizer.ggml.eos_token_id" is missing`);

  const tokenizer = {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: added,
    normalizer: null,
    pre_tokenizer: preTokenization.preTokenizer,
    post_processor: addBos || addEos ? templateProcessing(addBos ? bos : null, addEos ? eos : null) : null,
    decoder: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true },
    model: {
      type: 'BPE',
      dropout: null,
      unk_token: null,
      continuing_subword_prefix: null,
      end_of_word_suffix: null,
      fuse_unk: false,
      byte_fallback: false,
      ignore_merges: preTokenization.ignoreMerges,
      vocab,
      merges,
    },
  };

  const tokenizerConfig: Record<string, unknown> = {
    tokenizer_class: 'PreTrainedTokenizerFast',
    add_bos_token: addBos,
    add_eos_token: addEos,
    bos_token: bos?.text ?? null,
    eos_token: eos?.text ?? null,
    unk_token: unk?.text ?? null,
    pad_token: pad?.text ?? null,
    clean_up_tokenization_spaces: false,
    model_max_length: contextLength,
    added_tokens_decoder: Object.fromEntries(added.map(({ id, ...rest }) => [String(id), rest])),
  };
  const chatTemplate = chatTemplates(m);
  if (chatTemplate !== null) tokenizerConfig.chat_template = chatTemplate;
  return { tokenizer, tokenizerConfig };
}

/** `tokenizer.chat_template`, plus named ones (`tokenizer.chat_template.<name>`, listed in `tokenizer.chat_templates`). */
function chatTemplates(m: GgufMetadata): string | { name: string; template: string }[] | null {
  const main = m.optionalString('tokenizer.chat_template');
  const names = m.has('tokenizer.chat_templates') ? m.stringArray('tokenizer.chat_templates') : [];
  if (names.length === 0) return main ?? null;
  const named = names.map((name) => ({ name, template: m.string(`tokenizer.chat_template.${name}`) }));
  return main === undefined ? named : [{ name: 'default', template: main }, ...named];
}

function templateProcessing(bos: { id: number; text: string } | null, eos: { id: number; text: string } | null): object {
  const piece = (t: { text: string }) => ({ SpecialToken: { id: t.text, type_id: 0 } });
  const sequence = (id: 'A' | 'B') => ({ Sequence: { id, type_id: id === 'A' ? 0 : 1 } });
  const wrap = (id: 'A' | 'B') => [...(bos ? [piece(bos)] : []), sequence(id), ...(eos ? [piece(eos)] : [])];
  const specialTokens: Record<string, object> = {};
  for (const t of [bos, eos]) if (t) specialTokens[t.text] = { id: t.text, ids: [t.id], tokens: [t.text] };
  return { type: 'TemplateProcessing', single: wrap('A'), pair: [...wrap('A'), ...wrap('B')], special_tokens: specialTokens };
}
