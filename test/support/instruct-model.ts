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
