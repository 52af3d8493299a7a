/**
 * Reflexion's verbal memory (Shinn et al., 2023, "Reflexion: Language Agents with Verbal Reinforcement
 * Learning"): after a failed trial of a task, the agent itself writes a plan for its next attempt, and
 * the last few plans of that task go into its next prompt. No retrieval, no scores: the plans of one
 * task (here one variation) in the order they were written.
 *
 * Semantics follow noahshinn/reflexion, alfworld_runs/ at commit 218cf0ef1df84b05ce379dd4a8e47f17766733a0
 * (the folder last changed in 65001352): generate_reflections.py (`_generate_reflection_query`,
 * `update_memory`: the query shows the failed trial and the last 3 plans, and ends with "New plan:").
 * Adapted: the trial is written in this project's environment text (the task, then each action after
 * "> " and the observation it led to, then the final score); ALFWorld's two few-shot reflections are
 * left out, since they teach ALFWorld's rooms and would mislead in other environments.
 */
import type { PolicyEngine } from '../policy/types.ts';
import { formatScore, type Trajectory } from './reflector.ts';

/** One plan in a variation's memory, with the trial after which it was written (1 = the first). */
export interface PastReflection {
  trial: number;
  plan: string;
}

/** Plans shown in a prompt and in the next reflection query: Reflexion's `memory[-3:]`. */
export const REFLEXION_WINDOW = 3;

/** Reflexion's reflection instruction, worded as in `_generate_reflection_query` less its reference to the two examples. */
const INSTRUCTION =
  'You will be given the history of a past experience in which you were placed in an environment and given a task to complete. ' +
  'You were unsuccessful in completing the task. Do not summarize your environment, but rather think about the strategy and path you took to attempt to complete the task. ' +
  'Devise a concise, new plan of action that accounts for your mistake with reference to specific actions that you should have taken. ' +
  'For example, if you tried A and B but forgot C, then devise a plan to achieve C with environment-specific actions. ' +
  'You will need this later when you are solving the same task. Give your plan after "Plan".';

/** The reflection query for one failed trial: the instruction, the whole trial, the plans written so far, "New plan:". */
export function reflexionQuery(t: Trajectory, past: readonly PastReflection[]): string {
  const history = t.steps.map((s, i) => `> ${s.action}\n${i + 1 < t.steps.length ? t.steps[i + 1].observation : t.finalObservation}`);
  const opening = t.steps.length ? t.steps[0].observation : t.finalObservation;
  let query = `${INSTRUCTION}\n\nTask: ${t.task}\n${[opening, ...history].join('\n')}\n\nSTATUS: FAIL (score ${formatScore(t.score)}/100)`;
  if (past.length) query += '\n\nPlans from past attempts:\n' + past.map((p) => `Trial #${p.trial}: ${p.plan}\n`).join('');
  return query + '\n\nNew plan:';
}

/** The plans of each variation, the last `window` kept (only those are ever shown, so older ones are dropped). */
export class ReflexionMemory {
  private readonly plans = new Map<number, PastReflection[]>();

  constructor(readonly window: number = REFLEXION_WINDOW) {
    if (!Number.isInteger(window) || window < 1) throw new Error(`Reflexion memory: the window must be a positive integer, got ${window}`);
  }

  add(variation: number, reflection: PastReflection): void {
    const kept = [...(this.plans.get(variation) ?? []), reflection];
    this.plans.set(variation, kept.slice(-this.window));
  }

  /** The last `window` plans of a variation, oldest first. */
  recent(variation: number): readonly PastReflection[] {
    return this.plans.get(variation) ?? [];
  }

  /** Plans held, over every variation. */
  size(): number {
    let n = 0;
    for (const p of this.plans.values()) n += p.length;
    return n;
  }
}

/** The policy writes the plans, one generation pass for every failed trial of a round. */
export class ReflexionReflector {
  constructor(
    private readonly engine: PolicyEngine,
    /** A user message as the prompt the policy answers (its chat template, or the plain ChatML). */
    private readonly render: (messages: { role: 'user'; content: string }[]) => string,
    private readonly opts: { maxTokens: number; temperature: number },
  ) {}

  async reflect(failed: readonly { trajectory: Trajectory; past: readonly PastReflection[] }[], seed: number): Promise<string[]> {
    if (failed.length === 0) return [];
    const prompts = failed.map((f) =>
      this.engine.tokenizer.encode(this.render([{ role: 'user', content: reflexionQuery(f.trajectory, f.past) }])),
    );
    const gens = await this.engine.generate(prompts, { maxTokens: this.opts.maxTokens, temperature: this.opts.temperature, topP: 1, seed });
    return gens.map((g) => g.text.trim());
  }
}
