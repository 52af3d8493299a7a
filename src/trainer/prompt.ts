/**
 * The agent's prompt, in one of two styles:
 *  - plain (the tiny model's): a fixed ChatML conversation where each user turn is an observation and
 *    each assistant turn the action taken, the last `history` turns kept, re-rendered from text at
 *    every step; the task description opens the first kept user turn so it is never cut away;
 *  - instruct (real instruction-tuned models): the model's own chat template, a system prompt with the
 *    rules and the answer format, the valid actions in every user turn, the full history by default,
 *    built token-in/token-out: each step's prompt is the previous prompt, the sampled response tokens
 *    as they were sampled (never re-tokenised) and the newly rendered text, so consecutive prompts of an
 *    episode extend each other (what prefix reuse and packed training rely on).
 * Both put retrieved tips in the current user turn as one removable block of tokens, and Reflexion's
 * plans from earlier trials (when an episode has any) before the task, where the task stays in view.
 */
import type { PastReflection } from '../memory/reflexion.ts';
import { IM_END, IM_START } from '../policy/index.ts';
import type { ChatMessage, ChatTemplate, TextTokenizer } from '../policy/types.ts';

export interface Turn {
  observation: string;
  /** The action the agent took after this observation (absent for the current turn). */
  action?: string;
}

export interface PromptSettings {
  /** Past turns kept; null keeps the whole episode (the paper's "full chat history"). */
  history: number | null;
  showValidActions: boolean;
  system: string;
  /** instruct: the model's chat template (absent: the plain style). */
  template?: ChatTemplate;
  /** instruct: list the valid actions only when there are at most this many (ScienceWorld has thousands). */
  maxListedActions?: number;
}

/** What a plain prompt shows: the task, the turns kept, the current valid actions, Reflexion's plans. */
export interface PromptState {
  task: string;
  turns: readonly Turn[];
  validActions: readonly string[];
  /** Reflexion: plans from earlier failed trials (none: no plan block). */
  reflections?: readonly PastReflection[];
}

export function renderPrompt(state: PromptState, s: PromptSettings): string {
  const { head, tail } = renderPromptParts(state, s);
  return head + tail;
}

/**
 * The prompt cut where tips go: `head` ends with the current user turn's text, `tail` closes that
 * turn and opens the assistant's. Tips are inserted between the two.
 */
export function renderPromptParts(state: PromptState, s: PromptSettings): { head: string; tail: string } {
  const { task, turns, validActions, reflections = [] } = state;
  if (turns.length === 0) throw new Error('renderPrompt: no observation yet');
  const kept = s.history === null ? turns : turns.slice(Math.max(0, turns.length - 1 - s.history));
  let text = s.system ? `${IM_START}system\n${s.system}${IM_END}\n` : '';
  kept.forEach((turn, i) => {
    let user = i === 0 ? `${renderReflections(reflections)}Task: ${task}\n${turn.observation}` : turn.observation;
    const isCurrent = i === kept.length - 1;
    if (isCurrent && s.showValidActions) user += `\nValid actions: ${validActions.join(', ')}`;
    text += `${IM_START}user\n${user}`;
    if (!isCurrent) text += `${IM_END}\n${IM_START}assistant\n${turn.action ?? ''}${IM_END}\n`;
  });
  return { head: text, tail: `${IM_END}\n${IM_START}assistant\n` };
}

/** The line that introduces retrieved tips, and the marker pair around each (docs/EMPO2.md §3). */
export const TIPS_HEADER = 'Memories from your earlier exploration of this task:';
export const TIP_OPEN = '<tip>';
export const TIP_CLOSE = '</tip>';

export function renderTipBlock(tips: readonly string[]): string {
  return `\n\n${TIPS_HEADER}\n` + tips.map((t) => `${TIP_OPEN} ${t} ${TIP_CLOSE}\n\n`).join('');
}

/** The line that introduces Reflexion's plans, and the one that hands over to the task (as Reflexion's `_get_base_query`). */
export const REFLECTIONS_HEADER = 'Your memory for the task below:';
export const REFLECTIONS_END = 'Here is the task:';

/** Reflexion's memory block, or nothing when the episode has no plans yet. */
export function renderReflections(reflections: readonly PastReflection[]): string {
  if (reflections.length === 0) return '';
  return `${REFLECTIONS_HEADER}\n` + reflections.map((r) => `Trial ${r.trial}:\n${r.plan.trim()}\n`).join('') + `${REFLECTIONS_END}\n`;
}

export interface EncodedPrompt {
  ids: number[];
  /** [start, end) of the tip block's tokens in `ids`, or null when no tips were shown. */
  tipSpan: [number, number] | null;
}

/**
 * Token ids of the prompt, encoded piecewise (head, tip block, tail) so that the tip block is a
 * contiguous run of tokens: cutting `tipSpan` out gives exactly the ids of the same prompt encoded
 * without tips, whatever the tips contain (marker-like text included). That is what lets the
 * off-policy update score an action on the tip-free prompt.
 */
export function encodePrompt(
  tokenizer: { encode(text: string): number[] },
  state: PromptState,
  s: PromptSettings,
  tips: readonly string[] = [],
): EncodedPrompt {
  const { head, tail } = renderPromptParts(state, s);
  const headIds = tokenizer.encode(head);
  const tailIds = tokenizer.encode(tail);
  if (tips.length === 0) return { ids: [...headIds, ...tailIds], tipSpan: null };
  const tipIds = tokenizer.encode(renderTipBlock(tips));
  return { ids: [...headIds, ...tipIds, ...tailIds], tipSpan: [headIds.length, headIds.length + tipIds.length] };
}

/** The prompt without its tip block. */
export function removeTips(ids: readonly number[], tipSpan: readonly [number, number] | null): number[] {
  if (!tipSpan) return [...ids];
  const [start, end] = tipSpan;
  if (!(0 <= start && start <= end && end <= ids.length))
    throw new Error(`removeTips: span [${start}, ${end}) outside a prompt of ${ids.length} tokens`);
  return [...ids.slice(0, start), ...ids.slice(end)];
}

// ---------------------------------------------------------------------------------------------
// Dialogues: one episode's prompts, step by step
// ---------------------------------------------------------------------------------------------

/** What a rollout needs from a prompt style: the prompt of the current turn, and moving to the next. */
export interface Dialogue {
  /** The current turn's prompt with `tips` as a removable block (`tipSpan`). */
  prompt(tips?: readonly string[]): EncodedPrompt;
  /**
   * Records the current turn's response (`tokens` as sampled, `text` its decoding without the end
   * token), the action taken and the observation it led to, which opens the next turn.
   */
  advance(
    response: { tokens: readonly number[]; text: string },
    action: string,
    observation: string,
    validActions: readonly string[],
  ): void;
}

export interface DialogueStart {
  task: string;
  observation: string;
  validActions: readonly string[];
  /** Reflexion: plans from this task's earlier failed trials, shown before the task. */
  reflections?: readonly PastReflection[];
}

export function startDialogue(tokenizer: TextTokenizer, s: PromptSettings, start: DialogueStart): Dialogue {
  return s.template ? new InstructDialogue(tokenizer, s, s.template, start) : new PlainDialogue(tokenizer, s, start);
}

class PlainDialogue implements Dialogue {
  private readonly turns: Turn[];
  private valid: readonly string[];

  constructor(
    private readonly tokenizer: TextTokenizer,
    private readonly s: PromptSettings,
    private readonly start: DialogueStart,
  ) {
    this.turns = [{ observation: start.observation }];
    this.valid = start.validActions;
  }

  prompt(tips: readonly string[] = []): EncodedPrompt {
    const state = { task: this.start.task, turns: this.turns, validActions: this.valid, reflections: this.start.reflections };
    return encodePrompt(this.tokenizer, state, this.s, tips);
  }

  advance(
    _response: { tokens: readonly number[]; text: string },
    action: string,
    observation: string,
    validActions: readonly string[],
  ): void {
    this.turns[this.turns.length - 1].action = action;
    this.turns.push({ observation });
    this.valid = validActions;
  }
}

/** Stands where the tip block goes while the template is rendered; never in real text. */
const TIP_SLOT = '\u0000tip-slot\u0000';

/** One turn of the instruct style: what the agent saw, and the model's answer once it answered. */
export interface InstructTurn {
  observation: string;
  validActions: readonly string[];
  /** The response as the model wrote it (the assistant message), once answered. */
  response?: string;
}

/**
 * The instruct style's chat messages, without tips: the system prompt, the task (after Reflexion's plans)
 * opening the first kept user message, the valid actions in every user message that lists them, the
 * model's answers as the assistant messages. What InstructDialogue renders with the model's template, and
 * what an agent of a served model sends as its chat messages (the server renders the same template).
 */
export function instructMessages(
  s: PromptSettings,
  start: { task: string; reflections?: readonly PastReflection[] },
  turns: readonly InstructTurn[],
): ChatMessage[] {
  const kept = s.history === null ? turns : turns.slice(Math.max(0, turns.length - 1 - s.history));
  const messages: ChatMessage[] = s.system ? [{ role: 'system', content: s.system }] : [];
  kept.forEach((turn, i) => {
    let user = i === 0 ? `${renderReflections(start.reflections ?? [])}Task: ${start.task}\n\n${turn.observation}` : turn.observation;
    const listed = s.showValidActions && turn.validActions.length > 0 && turn.validActions.length <= (s.maxListedActions ?? Infinity);
    if (listed) user += `\n\nValid actions: ${turn.validActions.join(', ')}`;
    messages.push({ role: 'user', content: user });
    if (i < kept.length - 1) messages.push({ role: 'assistant', content: turn.response ?? '' });
  });
  return messages;
}

class InstructDialogue implements Dialogue {
  private readonly turns: InstructTurn[];
  /** The current turn's tip-free prompt (ids and text), once `prompt` has run. */
  private current: { ids: number[]; text: string } | null = null;
  /** The previous turn's tip-free prompt plus its response, which the next prompt extends. */
  private previous: { ids: number[]; text: string } | null = null;

  constructor(
    private readonly tokenizer: TextTokenizer,
    private readonly s: PromptSettings,
    private readonly template: ChatTemplate,
    private readonly start: DialogueStart,
  ) {
    this.turns = [{ observation: start.observation, validActions: start.validActions }];
  }

  prompt(tips: readonly string[] = []): EncodedPrompt {
    const text = this.template.render(this.messages(), { addGenerationPrompt: true });
    const at = text.indexOf(TIP_SLOT);
    if (at < 0 || text.indexOf(TIP_SLOT, at + 1) >= 0)
      throw new Error(`${this.template.source}: the chat template must render the user message once and unchanged`);
    const head = text.slice(0, at);
    const tail = text.slice(at + TIP_SLOT.length);
    // Token-in/token-out: extend the previous prompt + response where the new text does.
    const p = this.previous;
    const headIds =
      p && head.startsWith(p.text) ? [...p.ids, ...this.tokenizer.encode(head.slice(p.text.length))] : this.tokenizer.encode(head);
    const tailIds = this.tokenizer.encode(tail);
    this.current = { ids: [...headIds, ...tailIds], text: head + tail };
    if (tips.length === 0) return { ids: this.current.ids, tipSpan: null };
    const tipIds = this.tokenizer.encode(renderTipBlock(tips));
    return { ids: [...headIds, ...tipIds, ...tailIds], tipSpan: [headIds.length, headIds.length + tipIds.length] };
  }

  advance(
    response: { tokens: readonly number[]; text: string },
    _action: string,
    observation: string,
    validActions: readonly string[],
  ): void {
    if (!this.current) this.prompt();
    const c = this.current!;
    this.previous = { ids: [...c.ids, ...response.tokens], text: c.text + this.tokenizer.decode([...response.tokens]) };
    this.current = null;
    this.turns[this.turns.length - 1].response = response.text;
    this.turns.push({ observation, validActions });
  }

  private messages(): ChatMessage[] {
    const messages = instructMessages(this.s, this.start, this.turns);
    const current = messages.at(-1)!;
    return [...messages.slice(0, -1), { ...current, content: `${current.content as string}${TIP_SLOT}` }];
  }
}

/** The system prompt of the instruct style when the config gives none. */
export const INSTRUCT_SYSTEM_PROMPT =
  'You are an agent acting in a text-based environment to complete a task. ' +
  'Each turn you see what happened and the actions you can take. ' +
  'Answer with exactly one action, written as it appears in the list, and nothing else.';

/**
 * The action in a free-text answer: its first non-empty line, without an "Action:" label, quotes
 * or a final full stop (instruct models often dress the action up).
 */
export function parseAction(answer: string, validActions: readonly string[] = []): string {
  const action = firstActionLine(answer);
  return fillSlot(action, validActions);
}

/**
 * Where the only way forward is one action with a free slot (WebShop's search page offers just
 * `search[<your query>]`), an answer that is not of the form `verb[...]` becomes that slot's content:
 * a small model answers the query in prose, which the environment would reject forever otherwise.
 */
export function fillSlot(action: string, validActions: readonly string[]): string {
  const slots = validActions.map((v) => /^(\w+)\[<[^>]*>\]$/.exec(v)).filter((m): m is RegExpExecArray => m !== null);
  if (slots.length !== 1 || validActions.includes(action) || /^\w+\[.*\]$/s.test(action) || action.length === 0) return action;
  return `${slots[0][1]}[${action.replace(/[[\]]/g, ' ').trim()}]`;
}

function firstActionLine(answer: string): string {
  const line =
    answer
      .split('\n')
      .map((l) => l.trim())
      .find((l) => l.length > 0) ?? '';
  return line
    .replace(/^(?:>\s*)?(?:\*\*)?(?:next\s+)?action\s*:\s*(?:\*\*)?\s*/i, '')
    .replace(/^[`"'“‘]+|[`"'”’]+$/g, '')
    .replace(/\.$/, '')
    .trim();
}
