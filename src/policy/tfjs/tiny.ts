/**
 * The default policy: a small Qwen2-architecture model trained from scratch, with a byte-level
 * BPE tokenizer learnt from the environment's own text (so a few hundred tokens cover it).
 */
import { trainByteLevelBPE, Tokenizer } from '../tokenizer.ts';
import { Qwen2Model, type ModelConfig } from './qwen2.ts';
import { CHAT_SPECIAL_TOKENS } from '../chat-tokens.ts';

export interface TinyModelSettings {
  hidden_size: number;
  intermediate_size: number;
  num_hidden_layers: number;
  num_attention_heads: number;
  num_key_value_heads: number;
  vocab_size: number;
  tie_word_embeddings: boolean;
}

export function buildTinyPolicy(corpus: string[], s: TinyModelSettings, seed: number): { model: Qwen2Model; tokenizer: Tokenizer } {
  const tokenizer = Tokenizer.fromJSON(
    trainByteLevelBPE(corpus, { vocabSize: s.vocab_size, specialTokens: CHAT_SPECIAL_TOKENS }),
    'default tokenizer',
  );
  const config: ModelConfig = {
    model_type: 'qwen2',
    architectures: ['Qwen2ForCausalLM'],
    // A small corpus (an HTTP environment's few sampled episodes) can run out of merges before
    // vocab_size: the model then gets exactly the tokenizer's ids, so it never samples an id that
    // decodes to nothing. Corpora that reach vocab_size (the built-in one's) are unchanged.
    vocab_size: tokenizer.vocabSize,
    hidden_size: s.hidden_size,
    intermediate_size: s.intermediate_size,
    num_hidden_layers: s.num_hidden_layers,
    num_attention_heads: s.num_attention_heads,
    num_key_value_heads: s.num_key_value_heads,
    max_position_embeddings: 4096,
    rms_norm_eps: 1e-6,
    rope_theta: 10000,
    tie_word_embeddings: s.tie_word_embeddings,
    initializer_range: 0.02,
    bos_token_id: null,
    eos_token_id: tokenizer.requireTokenId('<|im_end|>'),
  };
  return { model: Qwen2Model.random(config, seed), tokenizer };
}
