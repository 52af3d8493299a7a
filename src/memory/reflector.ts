/**
 * Tip writing (docs/EMPO2.md §2): after a training episode, a reflector turns the trajectory into one short
 * tip. Two kinds:
 *  - the policy reflector asks the policy itself (the paper's method; needs a model that writes
 *    useful text, i.e. a real instruction-tuned LLM);
 *  - the trajectory-summary reflector builds the tip deterministically from the trajectory (places
 *    seen, actions that failed, best score, how far from done), for small models that cannot write.
 */
import type { ExternalUsage } from '../external/usage.ts';
import type { PolicyEngine } from '../policy/types.ts';

export interface ReflectionStep {
  observation: string;
  action: string;
  score: number;
}

export interface Trajectory {
  /** Task description, as the agent saw it. */
  task: string;
  steps: ReflectionStep[];
  /** Observation after the last action. */
  finalObservation: string;
  score: number;
  success: boolean;
}

export interface Reflector {
  readonly name: string;
  /** One tip per trajectory; null where none could be written (an external writer that failed): that episode adds no entries. */
  reflect(trajectories: readonly Trajectory[]): Promise<(string | null)[]>;
  /** What the writer's calls to an external model cost since the last take (null: it calls none). */
  takeUsage?(): ExternalUsage | null;
  /** Stops what the writer has in flight (requests to an external model). */
  close?(): void;
}

/** Places named in observations: the built-in worlds ("You are in the kitchen") and ScienceWorld ("This room is called the kitchen"). */
const PLACE_PATTERNS = [/\bYou are in the ([a-z][a-z ]*?)[.,]/gi, /\bThis room is called the ([a-z][a-z ]*?)[.,]/gi];
/** Observations that report an action had no effect; a heuristic that covers the bundled environments' wording. */
const FAILURE =
  /\b(can't|cannot|don't|does not|doesn't|nothing happens|is locked|already|no door|no known action|invalid|not available|unknown)\b/i;

const MAX_LISTED = 5;
/** The spec's limit on a tip's length. */
export const MAX_TIP_WORDS = 100;

export class TrajectorySummaryReflector implements Reflector {
  readonly name = 'summary';

  async reflect(trajectories: readonly Trajectory[]): Promise<string[]> {
    return trajectories.map((t) => summarise(t));
  }
}

export function summarise(t: Trajectory): string {
  const places: string[] = [];
  const seenPlace = (text: string) => {
    for (const pattern of PLACE_PATTERNS) {
      for (const m of text.matchAll(pattern)) if (!places.includes(m[1].toLowerCase())) places.push(m[1].toLowerCase());
    }
  };
  const failed: string[] = [];
  let best = 0;
  t.steps.forEach((step, i) => {
    seenPlace(step.observation);
    const after = i + 1 < t.steps.length ? t.steps[i + 1].observation : t.finalObservation;
    if (FAILURE.test(after) && !failed.includes(step.action)) failed.push(step.action);
    best = Math.max(best, step.score);
  });
  seenPlace(t.finalObservation);
  // Terse on purpose: several tips go into every prompt, and small models pay for every token.
  const parts: string[] = [];
  if (t.success) parts.push(`Done in ${t.steps.length} steps.`);
  else
    parts.push(
      `Final ${formatScore(t.score)}/100 (best ${formatScore(best)}), ${formatScore(100 - t.score)} short of done after ${t.steps.length} steps.`,
    );
  if (places.length) parts.push(`Seen: ${places.slice(0, MAX_LISTED).join(', ')}${places.length > MAX_LISTED ? ', ...' : ''}.`);
  if (failed.length) parts.push(`Failed: ${failed.slice(0, MAX_LISTED).join('; ')}${failed.length > MAX_LISTED ? '; ...' : ''}.`);
  return limitWords(parts.join(' '), MAX_TIP_WORDS);
}

/** The paper's reflector: the policy reads its own trajectory and writes one sentence. */
export class PolicyReflector implements Reflector {
  readonly name = 'policy';

  constructor(
    private readonly engine: PolicyEngine,
    private readonly render: (messages: { role: 'system' | 'user' | 'assistant'; content: string }[]) => string,
    private readonly opts: { maxTokens: number; temperature: number; seed: number; historySteps: number },
  ) {}

  async reflect(trajectories: readonly Trajectory[]): Promise<string[]> {
    if (trajectories.length === 0) return [];
    const prompts = trajectories.map((t) =>
      this.engine.tokenizer.encode(this.render([{ role: 'user', content: reflectionPrompt(t, this.opts.historySteps) }])),
    );
    const gens = await this.engine.generate(prompts, {
      maxTokens: this.opts.maxTokens,
      temperature: this.opts.temperature,
      topP: 1,
      seed: this.opts.seed,
    });
    return gens.map((g, i) => {
      const text = limitWords(g.text.replace(/\s+/g, ' ').trim(), MAX_TIP_WORDS);
      // An empty reflection still leaves a usable entry: the per-step suffix carries action and score.
      return text || summarise(trajectories[i]);
    });
  }
}

export function reflectionPrompt(t: Trajectory, historySteps: number): string {
  const shown = t.steps.slice(-historySteps);
  const lines = shown.map(
    (s, i) => `Step ${t.steps.length - shown.length + i + 1}: you saw "${oneLine(s.observation)}" and did "${s.action}".`,
  );
  return [
    `Task: ${t.task}`,
    `Your trajectory${shown.length < t.steps.length ? ` (last ${shown.length} of ${t.steps.length} steps)` : ''}:`,
    ...lines,
    `Final observation: "${oneLine(t.finalObservation)}". Final score: ${formatScore(t.score)}/100${t.success ? ' (task completed)' : ' (not completed)'}.`,
    'Reflect on this attempt: what happened, what you learned, and how far you are from completing the task. ' +
      `Answer with one sentence of at most ${MAX_TIP_WORDS} words that will help you next time.`,
  ].join('\n');
}

/**
 * How a per-step entry credits its action: the episode's final score (reference), the points
 * scored from that step to the end (`to_go`), so that actions which led nowhere in a good episode
 * rank low, or only the points that step itself scored (`gain`), so that only scoring actions rank high.
 */
export type StepCredit = 'final' | 'to_go' | 'gain';

/** The per-step entry of the reference: the tip, the action taken at that step and its score (`credit` says which). An empty tip leaves only the action and its score. */
export function stepTipText(tip: string, action: string, score: number, credit: StepCredit = 'final'): string {
  const taken = `${tip ? `${tip} ` : ''}The action you took was ${action};`;
  switch (credit) {
    case 'final':
      return `${taken} you finally scored ${formatScore(score)}/100.`;
    case 'to_go':
      return `${taken} from that step on you scored ${formatScore(score)}/100.`;
    case 'gain':
      if (score === 0) return `${taken} it did not change your score.`;
      return `${taken} it ${score > 0 ? 'raised' : 'lowered'} your score by ${formatScore(Math.abs(score))} points.`;
  }
}

export function limitWords(text: string, n: number): string {
  const words = text.split(/\s+/).filter(Boolean);
  return words.length <= n ? words.join(' ') : words.slice(0, n).join(' ') + ' ...';
}

function oneLine(s: string): string {
  return s.replace(/\s+/g, ' ').trim();
}

/** A score as the prompts show it: whole points without a decimal, else one decimal. */
export function formatScore(x: number): string {
  return Number.isInteger(x) ? String(x) : x.toFixed(1);
}
