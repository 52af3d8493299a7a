/**
 * A tiny model directory with a chat template (ChatML, as jinja), so that a run with
 * `model.path=<dir>` uses the instruct prompt style (../../src/trainer/prompt.ts) in seconds.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { loadConfig } from '../../src/config/load.ts';
import { sampleCorpus } from '../../src/envs/builtin/index.ts';
import { initBackend } from '../../src/policy/tfjs/backend.ts';
import { saveModelDir } from '../../src/policy/tfjs/checkpoint.ts';
import { buildTinyPolicy } from '../../src/policy/tfjs/tiny.ts';
import { Qwen2Model } from '../../src/policy/tfjs/qwen2.ts';
import { trainByteLevelBPE, Tokenizer } from '../../src/policy/tokenizer.ts';
import { CHAT_SPECIAL_TOKENS, IM_END } from '../../src/policy/chat-tokens.ts';
import { TINY_MODEL } from './tiny.ts';

export const CHATML_TEMPLATE =
  "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

/** Saves the tiny model (its tokenizer learnt from the built-in environment's text) to `dir` with a ChatML template. */
export async function saveTinyInstructModel(dir: string): Promise<void> {
  await initBackend();
  const cfg = loadConfig(null, TINY_MODEL);
  const { model, tokenizer } = buildTinyPolicy(sampleCorpus(60), cfg.model, 1);
  await saveModelDir(dir, model, tokenizer);
  model.dispose();
  writeFileSync(join(dir, 'chat_template.jinja'), CHATML_TEMPLATE);
}

/**
 * A random two-layer Qwen2 saved to `dir` with a byte-level BPE learnt from `corpus` and the chat
 * special tokens, its end of turn `<|im_end|>`: the PyTorch worker's equivalence tests load it.
 */
export async function saveRandomChatModel(
  dir: string,
  options: { corpus: readonly string[]; vocabSize: number; seed: number; label: string },
): Promise<Tokenizer> {
  await initBackend();
  const tokenizer = Tokenizer.fromJSON(
    trainByteLevelBPE([...options.corpus], { vocabSize: options.vocabSize, specialTokens: CHAT_SPECIAL_TOKENS }),
    options.label,
  );
  const model = Qwen2Model.random(
    {
      model_type: 'qwen2',
      vocab_size: tokenizer.vocabSize,
      hidden_size: 32,
      intermediate_size: 64,
      num_hidden_layers: 2,
      num_attention_heads: 4,
      num_key_value_heads: 2,
      max_position_embeddings: 1024,
      rms_norm_eps: 1e-6,
      rope_theta: 10000,
      tie_word_embeddings: true,
      initializer_range: 0.3,
      eos_token_id: tokenizer.requireTokenId(IM_END),
    },
    options.seed,
  );
  await saveModelDir(dir, model, tokenizer);
  model.dispose();
  return tokenizer;
}
