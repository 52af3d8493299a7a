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

export interface Turn {
  observation: string;
  /** The action the agent took after this observation (absent for the current turn). */
  action?: string;
}

export interface PromptSettings {
  history: number;
  showValidActions: boolean;
  system: string;
}

export function renderPrompt(task: string, turns: readonly Turn[], validActions: readonly string[], s: PromptSettings): string {
  if (turns.length === 0) throw new Error('renderPrompt: no observation yet');
  const kept = turns.slice(Math.max(0, turns.length - 1 - s.history));
  let text = s.system ? `${IM_START}system\n${s.system}${IM_END}\n` : '';
  kept.forEach((turn, i) => {
    let user = i === 0 ? `Task: ${task}\n${turn.observation}` : turn.observation;
    const isCurrent = i === kept.length - 1;
    if (isCurrent && s.showValidActions) user += `\nValid actions: ${validActions.join(', ')}`;
    text += `${IM_START}user\n${user}${IM_END}\n${IM_START}assistant\n`;
    if (!isCurrent) text += `${turn.action ?? ''}${IM_END}\n`;
  });
  return text;
}
