/**
 * Streaming text completions as OpenAI's servers send them: server-sent events, one JSON chunk per
 * `data:` line (`text_completion` with a piece of `text`), the last one the finish reason, then a usage
 * chunk (empty `choices`) when `stream_options.include_usage` asks for it, and `data: [DONE]`. (Chat
 * streams are the protocol layer's: ../openai/chat_completion/serving.ts.)
 *
 * The call's tokens are sampled with the other episodes' in one batch, so the chunks are written once
 * they are all there: one chunk per token, each with its text and (asked for) its log-prob.
 */
import type { ServerResponse } from 'node:http';
import type { Generation, TextTokenizer } from '../policy/types.ts';
import { contentPieces, policyFingerprint, POLICY_VERSION_HEADER } from '../openai/chat_completion/serving.ts';

export interface StreamedAnswer {
  id: string;
  model: string;
  /** The answer's text (cut at a stop string). */
  content: string;
  generation: Generation;
  promptTokens: number;
  /** The policy version that sampled it (`system_fingerprint` and the x-empo2-policy-version header). */
  policyVersion: number;
}

export function sendStream(res: ServerResponse, tok: TextTokenizer, a: StreamedAnswer, o: { logprobs: boolean; usage: boolean }): void {
  const created = Math.floor(Date.now() / 1000);
  const g = a.generation;
  res.writeHead(200, {
    'Content-Type': 'text/event-stream',
    'Cache-Control': 'no-cache',
    Connection: 'keep-alive',
    [POLICY_VERSION_HEADER]: String(a.policyVersion),
  });
  const system_fingerprint = policyFingerprint(a.policyVersion);
  const send = (choices: unknown[], extra: Record<string, unknown> = {}) =>
    res.write(
      `data: ${JSON.stringify({ id: a.id, object: 'text_completion', created, model: a.model, system_fingerprint, choices, ...extra })}\n\n`,
    );
  const text = contentPieces(tok, g.tokens, a.content);
  g.tokens.forEach((id, k) => {
    const logprobs = o.logprobs
      ? { tokens: [tok.decode([id])], token_logprobs: [g.logprobs[k]], top_logprobs: null, text_offset: [] }
      : null;
    send([{ index: 0, text: text[k], logprobs, finish_reason: null, token_ids: [id] }]);
  });
  send([{ index: 0, text: '', logprobs: null, finish_reason: g.finish }]);
  if (o.usage)
    send([], {
      usage: { prompt_tokens: a.promptTokens, completion_tokens: g.tokens.length, total_tokens: a.promptTokens + g.tokens.length },
    });
  res.end('data: [DONE]\n\n');
}
