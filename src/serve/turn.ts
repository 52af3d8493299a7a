/**
 * `empo2 serve`'s TurnBackend: the one the protocol layer's endpoints (../openai/) answer through. A turn
 * is rendered as the served model reads its chat (ChatML, as ./chat.ts renders chat completions; tools,
 * tool calls and their results with the ChatML + Hermes default of ../openai/render.ts, as the gateway
 * renders them in training), checked against the request limits before it is tokenised (./limits.ts), and
 * sampled on the engine queue with the client's temperature, top-p and seed. Decoding is constrained, as
 * in training, for a forced call (`tool_choice` "required" or a named function: one valid call of the
 * tools' schemas) and for JSON (`text.format`), or to the request's `allowed_texts`; the answer's calls
 * are read with the hermes tool parser (../openai/tool-parsers/).
 */
import { randomBytes } from 'node:crypto';
import { endTokenIds, JsonSchemaError, jsonFormatConstraint, toolCallConstraint } from '../policy/index.ts';
import type { TextTokenizer, TokenConstraint } from '../policy/types.ts';
import { RequestError } from '../openai/errors.ts';
import { renderMessages } from '../openai/render.ts';
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
      const rendered = renderMessages(req.messages, { tools: req.tools });
      checkTextFits(servedLimit(served), rendered, explicitMax ?? 1, field);
      const prompt = tok.encode(rendered);
      const maxTokens = explicitMax ?? Math.max(1, Math.min(o.defaultMaxTokens, served.maxModelLen - prompt.length));
      checkWork(1, prompt.length, maxTokens, o.maxRequestTokens, field);
      const check = (s: typeof served) => checkPrompt(s, prompt, () => field, maxTokens);
      check(served);
      const [g] = await o.queue.generate(
        [prompt],
        {
          temperature: req.temperature ?? 1,
          topP: req.topP ?? 1,
          maxTokens,
          stop: req.stop,
          ...constraintOf(req, tok),
          seed: req.seed ?? null,
        },
        { signal, check, adapter },
      );
      const parsed = req.tools.length > 0 && req.toolChoice !== 'none' ? parse(g.text, { tools: req.tools }) : null;
      const toolCalls = (parsed?.calls ?? []).map((c) => ({ id: `call_${randomBytes(12).toString('hex')}`, ...c }));
      return {
        content: parsed ? parsed.content : g.text,
        toolCalls,
        finishReason: toolCalls.length > 0 ? 'tool_calls' : g.finish,
        generation: g,
        promptIds: prompt,
        policyVersion: 0,
      };
    },
  };
}
