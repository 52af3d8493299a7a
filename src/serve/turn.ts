/**
 * `empo2 serve`'s TurnBackend: the one the protocol layer's endpoints (../openai/) answer through. A turn
 * is rendered as the served model reads its chat (ChatML, as ./chat.ts renders chat completions; tools,
 * tool calls and their results with the ChatML + Hermes default of ../openai/render.ts, as the gateway
 * renders them in training), checked against the request limits before it is tokenised (./limits.ts), and
 * sampled on the engine queue with the client's temperature, top-p and seed. Decoding is constrained, as
 * in training, for a forced call (`tool_choice` "required" or a named function: one valid call of the
 * tools' schemas) and for JSON (`text.format`), or to the request's `allowed_texts`; the answer's calls
 * are read with the hermes tool parser (../openai/tool-parsers/). A request without tools renders exactly as
 * serve's chat completions always have (plain ChatML, ./chat.ts), and its text is cut before the first
 * stop string, as OpenAI returns it.
 *
 * The policy version an answer carries is how many times the weights that sampled it were loaded into
 * this server: 0 for those it started with, one more for each POST /v1/empo2/load_weights (the base
 * model) or each POST /v1/load_lora_adapter of the adapter the request names (counted across unloads, as
 * a trainer's sync unloads and loads it every time). With a trainer pushing its weights after every
 * update, it is the iteration whose weights answered.
 */
import { randomBytes } from 'node:crypto';
import { endTokenIds, JsonSchemaError, jsonFormatConstraint, toolCallConstraint, type ChatTemplate } from '../policy/index.ts';
import type { TextTokenizer, TokenConstraint } from '../policy/types.ts';
import { RequestError } from '../openai/errors.ts';
import { renderMessages, usesTools } from '../openai/render.ts';
import { toolParser } from '../openai/tool-parsers/index.ts';
import type { TurnBackend, TurnRequest, TurnResult } from '../openai/types.ts';
import { checkAllowedTexts, checkPrompt, checkTextFits, checkWork, servedLimit } from './limits.ts';
import type { EngineQueue } from './queue.ts';

export interface ServeTurnOptions {
  queue: EngineQueue;
  modelName: string;
  /** The LoRA adapter a request's `model` names (null: the base model); throws the 404 for a name not served. */
  adapterOf: (model: string | undefined) => string | null;
  defaultMaxTokens: number;
  maxRequestTokens: number;
  /** How many times the weights of `adapter` (null: the base model's) were loaded; read when the request runs. */
  versionOf?: (adapter: string | null) => number;
  /** A chat template that renders tools itself: tool conversations render through it. */
  toolTemplate?: ChatTemplate | null;
}

export const SERVE_NAME = 'empo2 serve';

const parse = toolParser('hermes');

/** Forced calls of few valid texts are sampled as allowed texts, as the gateway samples them. */
const FINITE_CALLS = 256;

/** What decoding is limited to: a forced call, JSON, the request's allowed texts, or nothing. */
function constraintOf(
  req: TurnRequest,
  tok: TextTokenizer,
): { constraints: TokenConstraint[] } | { allowedTexts: (readonly string[])[] } | null {
  const base = { tokenizer: tok, endTokens: endTokenIds(tok) };
  const choice = req.toolChoice;
  try {
    if (req.allowedTexts) return { allowedTexts: [req.allowedTexts] };
    if (req.tools.length > 0 && (choice === 'required' || typeof choice === 'object')) {
      const c = toolCallConstraint({ ...base, tools: req.tools, choice, parser: 'hermes', finiteLimit: FINITE_CALLS });
      const texts = c.finiteTexts();
      return texts ? { allowedTexts: [texts] } : { constraints: [c] };
    }
    if (req.format.type !== 'text') return { constraints: [jsonFormatConstraint(req.format, base)] };
  } catch (e) {
    // The endpoints check the schemas they constrain and name them; this names what is left.
    if (e instanceof JsonSchemaError) throw new RequestError(400, `decoding cannot be constrained to this: ${e.message}`, e.path);
    throw e;
  }
  return null;
}

export function serveTurnBackend(o: ServeTurnOptions): TurnBackend {
  return {
    modelName: o.modelName,
    serverName: SERVE_NAME,
    tokenizer: () => o.queue.current.engine.tokenizer,
    checkModel: (model) => void o.adapterOf(model),
    async turn(req, { signal }): Promise<TurnResult> {
      const adapter = o.adapterOf(req.model);
      const served = o.queue.current;
      const tok = served.engine.tokenizer;
      const explicitMax = req.maxTokens;
      if (req.allowedTexts)
        checkAllowedTexts(served, [req.allowedTexts], explicitMax ?? o.defaultMaxTokens, (_, j) => `allowed_texts[${j}]`);
      // Measured before it is tokenised: a text that cannot fit is not worth the time.
      const field = req.messagesField ?? 'messages';
      // Chat's messages are the request's `messages`, one for one: the longest alone is named by its place.
      if (field === 'messages') {
        const lengths = req.messages.map((m) => Buffer.byteLength(m.content ?? '', 'utf8'));
        const longest = lengths.reduce((at, n, i) => (n > lengths[at] ? i : at), 0);
        checkTextFits(servedLimit(served), req.messages[longest].content ?? '', explicitMax ?? 1, `messages[${longest}].content`);
      }
      // Tool conversations through the model's own tool template where it has one; plain chats as before (ChatML).
      const template = o.toolTemplate && usesTools(req.messages, req.tools) ? o.toolTemplate : undefined;
      const rendered = renderMessages(req.messages, { tools: req.tools, template });
      checkTextFits(servedLimit(served), rendered, explicitMax ?? 1, field);
      const prompt = tok.encode(rendered);
      const maxTokens = explicitMax ?? Math.max(1, Math.min(o.defaultMaxTokens, served.maxModelLen - prompt.length));
      checkWork(1, prompt.length, maxTokens, o.maxRequestTokens, field);
      let version = o.versionOf?.(adapter) ?? 0;
      // Run again by the queue just before the call, against the weights that will answer (a load may come first).
      const check = (s: typeof served) => {
        checkPrompt(s, prompt, () => field, maxTokens);
        version = o.versionOf?.(adapter) ?? 0;
      };
      check(served);
      const [g] = await o.queue.generate(
        [prompt],
        {
          temperature: req.temperature ?? 1,
          topP: req.topP ?? 1,
          maxTokens,
          stop: req.stop,
          ...constraintOf(req, tok),
          ...(req.cacheKey ? { cacheKeys: [req.cacheKey] } : {}),
          seed: req.seed ?? null,
        },
        { signal, check, adapter },
      );
      const text = cutAtStop(g.text, req.stop);
      // As the gateway reads an answer: one constrained to a JSON format is that JSON, not a call (unless a call was forced).
      const jsonOnly = req.format.type !== 'text' && req.toolChoice !== 'required' && typeof req.toolChoice !== 'object';
      const parsed = req.tools.length > 0 && req.toolChoice !== 'none' && !jsonOnly ? parse(text, { tools: req.tools }) : null;
      // parallel_tool_calls false: at most one call goes back.
      const calls = parsed === null ? [] : req.parallelToolCalls ? parsed.calls : parsed.calls.slice(0, 1);
      const toolCalls = calls.map((c) => ({ id: `call_${randomBytes(12).toString('hex')}`, ...c }));
      return {
        content: parsed ? parsed.content : text,
        toolCalls,
        finishReason: toolCalls.length > 0 ? 'tool_calls' : g.finish,
        generation: g,
        promptIds: prompt,
        policyVersion: version,
      };
    },
  };
}

/** The answer's text as OpenAI returns it: cut before the first stop string (the ids keep what was sampled). */
export function cutAtStop(text: string, stop: readonly string[]): string {
  let end = text.length;
  for (const s of stop) {
    const at = text.indexOf(s);
    if (at >= 0 && at < end) end = at;
  }
  return text.slice(0, end);
}
