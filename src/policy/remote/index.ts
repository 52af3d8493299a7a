/**
 * A remote engine from a model directory (for its tokenizer.json) and a server address: what
 * `empo2 eval --remote` and the trainer's `model.remote` use.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { Tokenizer } from '../tokenizer.ts';
import { requireEndTokenIds } from '../chat-tokens.ts';
import { RemoteEngine, type RemoteEngineOptions } from './engine.ts';

export { RemoteEngine, type RemoteEngineOptions, type ConstraintField } from './engine.ts';
export { RemoteHttpError } from './http.ts';

export function remoteEngineFromDir(tokenizerDir: string, options: Omit<RemoteEngineOptions, 'tokenizer' | 'endTokens'>): RemoteEngine {
  const path = join(tokenizerDir, 'tokenizer.json');
  if (!existsSync(path))
    throw new Error(`${path} is missing: a remote engine encodes prompts locally with the served model's tokenizer.json`);
  const tokenizer = Tokenizer.fromFile(path);
  const endTokens = requireEndTokenIds(tokenizer, path);
  return new RemoteEngine({ ...options, tokenizer, endTokens });
}
