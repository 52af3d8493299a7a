/**
 * The ChatML special tokens every model here speaks (the tiny model's tokenizer is built with them;
 * SmolLM2 and Qwen2 ship them), and the ids that end an action or a response.
 */
export const IM_START = '<|im_start|>';
export const IM_END = '<|im_end|>';
export const END_OF_TEXT = '<|endoftext|>';
export const CHAT_SPECIAL_TOKENS = [END_OF_TEXT, IM_START, IM_END];

/** Ids of the tokens that end an action (end of turn, end of text) that the tokenizer has, in that order. */
export function endTokenIds(tokenizer: { tokenToId(t: string): number | undefined }): number[] {
  return [IM_END, END_OF_TEXT].map((t) => tokenizer.tokenToId(t)).filter((x): x is number => x !== undefined);
}

/** endTokenIds, refusing a tokenizer that has neither (nothing could tell where a response ends); `where` names it. */
export function requireEndTokenIds(tokenizer: { tokenToId(t: string): number | undefined }, where: string): number[] {
  const ids = endTokenIds(tokenizer);
  if (ids.length === 0) throw new Error(`${where} has neither ${IM_END} nor ${END_OF_TEXT}: cannot tell where a response ends`);
  return ids;
}
