/**
 * A remote engine from a model directory (for its tokenizer.json) and a server address: what
 * `empo2 eval --remote` and the trainer's `model.remote` use.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { Tokenizer } from '../tokenizer.ts';
import { END_OF_TEXT, IM_END, endTokenIds } from '../../trainer/prompt.ts';
import { RemoteEngine, type RemoteEngineOptions } from './engine.ts';

export { RemoteEngine, type RemoteEngineOptions, type ConstraintField } from './engine.ts';
export { RemoteHttpError } from './http.ts';

export function remoteEngineFromDir(tokenizerDir: string, options: Omit<RemoteEngineOptions, 'tokenizer' | 'endTokens'>): RemoteEngine {
  const path = join(tokenizerDir, 'tokenizer.json');
  if (!existsSync(path)) throw new Error(`${path} is missing: a remote engine encodes prompts locally with the served model's tokenizer.json`);
  const tokenizer = Tokenizer.fromFile(path);
  const endTokens = endTokenIds(tokenizer);
  if (endTokens.length === 0) throw new Error(`${path} has neither ${IM_END} nor ${END_OF_TEXT}: cannot tell where a response ends`);
  return new RemoteEngine({ ...options, tokenizer, endTokens });
}
