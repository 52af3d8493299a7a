/**
 * `memory.reflector: openai`: the tips are written by an OpenAI-compatible model (docs/EXTERNAL.md),
 * asked the same reflection prompt the policy reflector is asked, with the trajectory as the
 * policy saw it. The tip is prompt text for the policy, not sampled by it: it is kept as text, capped
 * at memory.reflection_max_tokens of the policy's own tokenizer, and encoded with that tokenizer
 * wherever it is shown, so the update and the off-policy cut treat it as they treat any tip.
 */
import type { ExternalModel } from '../external/client.ts';
import type { ExternalUsage } from '../external/usage.ts';
import type { TextTokenizer } from '../policy/types.ts';
import { MAX_TIP_WORDS, limitWords, reflectionPrompt, type Reflector, type Trajectory } from './reflector.ts';

export interface ExternalReflectorSettings {
  /** memory.reflection_max_tokens: the cap, in the policy's tokens (and the writer's max_tokens). */
  maxTokens: number;
  /** Steps of the trajectory the prompt shows (the policy reflector's). */
  historySteps: number;
  seed: number;
}

export class ExternalReflector implements Reflector {
  readonly name: string;

  constructor(
    private readonly model: ExternalModel,
    private readonly tokenizer: TextTokenizer,
    private readonly s: ExternalReflectorSettings,
  ) {
    this.name = `openai (${model.settings.model})`;
  }

  async reflect(trajectories: readonly Trajectory[]): Promise<(string | null)[]> {
    return Promise.all(
      trajectories.map(async (t) => {
        const answer = await this.model.chat({
          messages: [{ role: 'user', content: reflectionPrompt(t, this.s.historySteps) }],
          maxTokens: this.s.maxTokens,
          seed: this.s.seed,
        });
        if (!answer.ok) return null;
        // An empty answer is no tip: the episode is skipped as for a failed call, rather than stored as an action and score alone.
        return capTokens(limitWords(oneLineTip(answer.text), MAX_TIP_WORDS), this.tokenizer, this.s.maxTokens) || null;
      }),
    );
  }

  takeUsage(): ExternalUsage {
    return this.model.takeUsage();
  }

  close(): void {
    this.model.close();
  }
}

/** An answer as one line of prompt text: whitespace folded, control characters (which no tip needs) dropped. */
export function oneLineTip(text: string): string {
  return text
    .replace(/[\u0000-\u0008\u000E-\u001F\u007F]/g, '')
    .replace(/\s+/g, ' ')
    .trim();
}

/** `text` cut to at most `maxTokens` tokens of `tokenizer` (kept as written when it fits). */
export function capTokens(text: string, tokenizer: TextTokenizer, maxTokens: number): string {
  const ids = tokenizer.encode(text);
  if (ids.length <= maxTokens) return text;
  // Cutting tokens can split a character: drop what did not decode, then make sure the cut text still fits.
  let cut = tokenizer
    .decode(ids.slice(0, maxTokens))
    .replace(/\uFFFD+$/, '')
    .trimEnd();
  while (cut && tokenizer.encode(cut).length > maxTokens) cut = cut.slice(0, -1).trimEnd();
  return cut;
}
