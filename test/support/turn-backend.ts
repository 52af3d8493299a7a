/**
 * A real TurnBackend over the tiny engine, for the protocol layer's endpoint tests before a server's own
 * backend answers them: the turn's messages rendered as ChatML with Hermes tool markup (`<tools>` in the
 * system turn, `<tool_call>` in assistant turns, `<tool_response>` for results), sampled by
 * `engine.generate`, and the answer's `<tool_call>` blocks parsed out. A forced call (`tool_choice`
 * "required" or a named function) and a `text.format` of JSON are sampled with the engine's constrained
 * decoding (src/policy/json-constraint.ts), so the untrained tiny model still calls a tool validly or
 * answers valid JSON; a free answer is whatever the model samples. A server for it, per episode, is `startTurnServer` below.
 */
import { createServer, type Server } from 'node:http';
import { randomBytes } from 'node:crypto';
import type { PolicyEngine } from '../../src/policy/types.ts';
import { IM_END, IM_START, canonicalJson, endTokenIds, jsonFormatConstraint, toolCallConstraint } from '../../src/policy/index.ts';
import { RequestError } from '../../src/openai/errors.ts';
import type { ToolCall, TurnBackend, TurnMessage, TurnRequest, TurnResult } from '../../src/openai/types.ts';
import { answerResponses, sendResponsesError } from '../../src/openai/responses/serving.ts';
import { ResponseStore } from '../../src/openai/responses/store.ts';
import { readJson } from '../../src/serve/protocol.ts';

// Written as the constraint writes a call (canonical json.dumps spacing), so a call sent back renders as sampled.
const callText = (name: string, args: unknown) => `<tool_call>\n${canonicalJson({ name, arguments: args })}\n</tool_call>`;

function render(req: TurnRequest): string {
  const tools = req.tools.length
    ? `# Tools\n\n<tools>\n${req.tools.map((t) => JSON.stringify({ type: 'function', function: t })).join('\n')}\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags.`
    : '';
  const messages: TurnMessage[] = [...req.messages];
  if (tools) {
    if (messages[0]?.role === 'system') messages[0] = { role: 'system', content: `${messages[0].content}\n\n${tools}` };
    else messages.unshift({ role: 'system', content: tools });
  }
  let text = '';
  for (const m of messages) {
    if (m.role === 'assistant') {
      const calls = m.toolCalls.map((c) => callText(c.name, JSON.parse(c.arguments)));
      text += `${IM_START}assistant\n${[m.content ?? '', ...calls].filter(Boolean).join('\n')}${IM_END}\n`;
    } else if (m.role === 'tool') text += `${IM_START}user\n<tool_response>\n${m.content}\n</tool_response>${IM_END}\n`;
    else text += `${IM_START}${m.role === 'developer' ? 'system' : m.role}\n${m.content}${IM_END}\n`;
  }
  return `${text}${IM_START}assistant\n`;
}

function parse(text: string): { content: string | null; toolCalls: ToolCall[] } {
  const toolCalls: ToolCall[] = [];
  const rest = text.replace(/<tool_call>\s*(\{[\s\S]*?\})\s*<\/tool_call>/g, (all, json: string) => {
    try {
      const { name, arguments: args } = JSON.parse(json) as { name: string; arguments: unknown };
      toolCalls.push({ id: `call_${randomBytes(12).toString('hex')}`, name, arguments: JSON.stringify(args) });
      return '';
    } catch {
      return all; // not a valid call: plain text, as vLLM returns a malformed one
    }
  });
  const content = rest.trim();
  return { content: content === '' && toolCalls.length > 0 ? null : toolCalls.length > 0 ? content : text, toolCalls };
}

export interface TinyTurnBackend extends TurnBackend {
  /** Every turn sampled, in order: what the test compares the answers with. */
  turns: { request: TurnRequest; prompt: string; result: TurnResult }[];
}

export function tinyTurnBackend(engine: PolicyEngine, o: { seed: number; policyVersion?: number }): TinyTurnBackend {
  const turns: TinyTurnBackend['turns'] = [];
  return {
    modelName: 'tiny',
    serverName: 'the test server',
    tokenizer: () => engine.tokenizer,
    turns,
    async turn(req, { signal }) {
      const prompt = render(req);
      const tok = engine.tokenizer;
      const base = { tokenizer: tok, endTokens: endTokenIds(tok) };
      const choice = req.toolChoice;
      const constraint =
        choice === 'required' || typeof choice === 'object'
          ? toolCallConstraint({ ...base, tools: req.tools, choice, parser: 'hermes' })
          : req.format.type !== 'text'
            ? jsonFormatConstraint(req.format, base)
            : null;
      const promptIds = tok.encode(prompt);
      const [g] = await engine.generate([promptIds], {
        maxTokens: req.maxTokens ?? (constraint ? 160 : 24),
        temperature: 1,
        topP: 1,
        seed: o.seed + turns.length,
        ...(constraint ? { constraints: [constraint] } : { allowedTexts: [req.allowedTexts ?? null] }),
        signal,
      });
      const parsed = req.toolChoice === 'none' ? { content: g.text, toolCalls: [] } : parse(g.text);
      const result: TurnResult = {
        ...parsed,
        finishReason: parsed.toolCalls.length > 0 ? 'tool_calls' : g.finish,
        generation: g,
        promptIds,
        policyVersion: o.policyVersion ?? 0,
      };
      turns.push({ request: req, prompt, result });
      return result;
    },
  };
}

/**
 * An HTTP server answering `POST /episodes/{id}/v1/responses` through `backend`, each episode with its
 * own response store (as the gateway keeps one per episode).
 */
export async function startTurnServer(backend: TurnBackend): Promise<{
  url: string;
  baseURL(episode: string): string;
  /** Every request body, by episode, in order (what the client sent). */
  bodies: Map<string, Record<string, unknown>[]>;
  close(): Promise<void>;
}> {
  const stores = new Map<string, ResponseStore>();
  const bodies = new Map<string, Record<string, unknown>[]>();
  const server: Server = createServer((req, res) => {
    const abort = new AbortController();
    res.once('close', () => abort.abort(new Error('the client closed the connection')));
    void (async () => {
      const m = /^\/episodes\/([^/]+)\/v1\/responses$/.exec(req.url ?? '');
      if (!m || req.method !== 'POST') throw new RequestError(404, `no route ${req.method} ${req.url}`, null);
      let store = stores.get(m[1]);
      if (!store) stores.set(m[1], (store = new ResponseStore({ scope: `episode ${m[1]}`, capacity: 8 })));
      const body = await readJson(req, 16 << 20);
      bodies.set(m[1], [...(bodies.get(m[1]) ?? []), body as Record<string, unknown>]);
      await answerResponses({ backend, store, body, res, signal: abort.signal });
    })().catch((e: unknown) =>
      sendResponsesError(res, e instanceof RequestError ? e : new RequestError(500, (e as Error).message, null, 'server_error')),
    );
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  const url = `http://127.0.0.1:${port}`;
  return {
    url,
    baseURL: (episode) => `${url}/episodes/${episode}/v1`,
    bodies,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
