/**
 * The agent's prompt: a ChatML conversation (the format of Qwen2.5-Instruct, the paper's model)
 * where each user turn is an observation and each assistant turn the action taken. Only the last
 * `history` turns are kept; the task description opens the first kept user turn so it is never
 * cut away.
 */
export const IM_START = '<|im_start|>';
export const IM_END = '<|im_end|>';
export const END_OF_TEXT = '<|endoftext|>';
export const CHAT_SPECIAL_TOKENS = [END_OF_TEXT, IM_START, IM_END];

/** Ids of the tokens that end an action (end of turn, end of text) that the tokenizer has, in that order. */
export function endTokenIds(tokenizer: { tokenToId(t: string): number | undefined }): number[] {
  return [IM_END, END_OF_TEXT].map((t) => tokenizer.tokenToId(t)).filter((x): x is number => x !== undefined);
}

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
}

export function renderPrompt(task: string, turns: readonly Turn[], validActions: readonly string[], s: PromptSettings): string {
  const { head, tail } = renderPromptParts(task, turns, validActions, s);
  return head + tail;
}

/**
 * The prompt cut where tips go: `head` ends with the current user turn's text, `tail` closes that
 * turn and opens the assistant's. Tips are inserted between the two.
 */
export function renderPromptParts(task: string, turns: readonly Turn[], validActions: readonly string[], s: PromptSettings): { head: string; tail: string } {
  if (turns.length === 0) throw new Error('renderPrompt: no observation yet');
  const kept = s.history === null ? turns : turns.slice(Math.max(0, turns.length - 1 - s.history));
  let text = s.system ? `${IM_START}system\n${s.system}${IM_END}\n` : '';
  kept.forEach((turn, i) => {
    let user = i === 0 ? `Task: ${task}\n${turn.observation}` : turn.observation;
    const isCurrent = i === kept.length - 1;
    if (isCurrent && s.showValidActions) user += `\nValid actions: ${validActions.join(', ')}`;
    text += `${IM_START}user\n${user}`;
    if (!isCurrent) text += `${IM_END}\n${IM_START}assistant\n${turn.action ?? ''}${IM_END}\n`;
  });
  return { head: text, tail: `${IM_END}\n${IM_START}assistant\n` };
}

/** The line that introduces retrieved tips, and the marker pair around each (spec §3). */
export const TIPS_HEADER = 'Memories from your earlier exploration of this task:';
export const TIP_OPEN = '<tip>';
export const TIP_CLOSE = '</tip>';

export function renderTipBlock(tips: readonly string[]): string {
  return `\n\n${TIPS_HEADER}\n` + tips.map((t) => `${TIP_OPEN} ${t} ${TIP_CLOSE}\n\n`).join('');
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
  task: string,
  turns: readonly Turn[],
  validActions: readonly string[],
  s: PromptSettings,
  tips: readonly string[] = [],
): EncodedPrompt {
  const { head, tail } = renderPromptParts(task, turns, validActions, s);
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
  if (!(0 <= start && start <= end && end <= ids.length)) throw new Error(`removeTips: span [${start}, ${end}) outside a prompt of ${ids.length} tokens`);
  return [...ids.slice(0, start), ...ids.slice(end)];
}
