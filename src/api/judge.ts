/**
 * `judge({ base_url, model, rubric })`: a reward for `trainAgent` (its `reward` option) given by an
 * OpenAI-compatible model that scores each group's episodes against each other (docs/EXTERNAL.md,
 * "Judge"). The settings are those of `env.judge` in a config, checked here, where they are written.
 */
import type { z } from 'zod';
import { ConfigError } from '../config/load.ts';
import { JudgeSchema, type JudgeSettings } from '../config/schema.ts';

export interface JudgeReward {
  kind: 'judge';
  settings: JudgeSettings;
}

/** The judge's settings: base_url and model at least; rubric, mode (replace, add) and the client's options as in env.judge. */
export function judge(settings: z.input<typeof JudgeSchema>): JudgeReward {
  const parsed = JudgeSchema.safeParse(settings);
  if (!parsed.success) {
    const issues = parsed.error.issues.map((i) => `${i.path.join('.') || '(settings)'}: ${i.message}`).join('; ');
    throw new ConfigError(`judge(): ${issues}`);
  }
  return { kind: 'judge', settings: parsed.data };
}
