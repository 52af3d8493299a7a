/**
 * Streaming answers as OpenAI's servers send them: server-sent events, one JSON chunk per `data:`
 * line (`chat.completion.chunk` with a `delta`, or `text_completion` with a piece of `text`), the
 * first chat chunk giving the role, the last one the finish reason, then a usage chunk (empty
 * `choices`) when `stream_options.include_usage` asks for it, and `data: [DONE]`.
 *
 * The call's tokens are sampled with the other episodes' in one batch, so the chunks are written once
 * they are all there: one chunk per token, each with its text and (asked for) its log-prob.
 */
import type { ServerResponse } from 'node:http';
import type { Generation, TextTokenizer } from '../policy/types.ts';

export interface StreamedAnswer {
  kind: 'chat' | 'text';
  id: string;
  model: string;
  /** The answer's text (cut at a stop string). */
  content: string;
  generation: Generation;
  promptTokens: number;
}

/** The text each token adds to `content`, in order (tokens past a stop cut add nothing). */
function pieces(tok: TextTokenizer, ids: readonly number[], content: string): string[] {
  const stream = (tok as { streamDecoder?: () => { push(id: number): string } }).streamDecoder?.();
  let text = '';
  let sent = 0;
  return ids.map((id) => {
    text += stream ? stream.push(id) : tok.decode([id]);
    const upTo = Math.min(text.length, content.length);
    const piece = content.slice(sent, upTo);
    sent = Math.max(sent, upTo);
    return piece;
  });
}

export function sendStream(res: ServerResponse, tok: TextTokenizer, a: StreamedAnswer, o: { logprobs: boolean; usage: boolean }): void {
  const created = Math.floor(Date.now() / 1000);
  const g = a.generation;
  res.writeHead(200, { 'Content-Type': 'text/event-stream', 'Cache-Control': 'no-cache', Connection: 'keep-alive' });
  const send = (choices: unknown[], extra: Record<string, unknown> = {}) =>
    res.write(
      `data: ${JSON.stringify({ id: a.id, object: a.kind === 'chat' ? 'chat.completion.chunk' : 'text_completion', created, model: a.model, choices, ...extra })}\n\n`,
    );
  const text = pieces(tok, g.tokens, a.content);
  if (a.kind === 'chat') {
    send([{ index: 0, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null }]);
    g.tokens.forEach((id, k) => {
      const logprobs = o.logprobs ? { content: [{ token: tok.decode([id]), logprob: g.logprobs[k], bytes: [], top_logprobs: [] }] } : null;
      send([{ index: 0, delta: { content: text[k] }, logprobs, finish_reason: null, token_ids: [id] }]);
    });
    send([{ index: 0, delta: {}, logprobs: null, finish_reason: g.finish }]);
  } else {
    g.tokens.forEach((id, k) => {
      const logprobs = o.logprobs
        ? { tokens: [tok.decode([id])], token_logprobs: [g.logprobs[k]], top_logprobs: null, text_offset: [] }
        : null;
      send([{ index: 0, text: text[k], logprobs, finish_reason: null, token_ids: [id] }]);
    });
    send([{ index: 0, text: '', logprobs: null, finish_reason: g.finish }]);
  }
  if (o.usage)
    send([], {
      usage: { prompt_tokens: a.promptTokens, completion_tokens: g.tokens.length, total_tokens: a.promptTokens + g.tokens.length },
    });
  res.end('data: [DONE]\n\n');
}
