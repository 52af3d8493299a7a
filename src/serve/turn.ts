/**
 * `empo2 serve`'s TurnBackend: the one the protocol layer's endpoints (../openai/) answer through. A turn
 * is rendered as the served model reads its chat (ChatML, as ./chat.ts renders chat completions), checked
 * against the request limits before it is tokenised (./limits.ts), and sampled on the engine queue with
 * the client's temperature, top-p and seed, constrained where the request asks for JSON (`text.format`:
 * the same constrained decoding as the trainer's, ../policy/json-constraint.ts) or gives `allowed_texts`.
 */
import { endTokenIds, JsonSchemaError, jsonFormatConstraint } from '../policy/index.ts';
import type { TokenConstraint } from '../policy/types.ts';
import { RequestError } from '../openai/errors.ts';
import type { TurnBackend, TurnMessage, TurnRequest, TurnResult } from '../openai/types.ts';
import { renderChatML } from './chat.ts';
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

/** Tool calls are the next step here (the gateway's rendering and parsers, shared through ../openai/). */
function refuseTools(req: TurnRequest): void {
  const why = `tool calls are not served by ${SERVE_NAME} yet`;
  if (req.tools.length > 0) throw new RequestError(400, `${why}: send no "tools"`, 'tools');
  if (req.messages.some((m) => m.role === 'tool' || (m.role === 'assistant' && m.toolCalls.length > 0)))
    throw new RequestError(400, `${why}: the input has tool calls or their outputs`, 'input');
}

function chatMessage(m: TurnMessage): { role: 'system' | 'developer' | 'user' | 'assistant'; content: string } {
  if (m.role === 'assistant') return { role: 'assistant', content: m.content ?? '' };
  if (m.role === 'tool') throw new Error('unreachable: tool messages are refused first');
  return m;
}

export function serveTurnBackend(o: ServeTurnOptions): TurnBackend {
  return {
    modelName: o.modelName,
    serverName: SERVE_NAME,
    tokenizer: () => o.queue.current.engine.tokenizer,
    checkModel: (model) => void o.adapterOf(model),
    async turn(req, { signal }): Promise<TurnResult> {
      refuseTools(req);
      const adapter = o.adapterOf(req.model);
      const served = o.queue.current;
      const tok = served.engine.tokenizer;
      const explicitMax = req.maxTokens;
      if (req.allowedTexts)
        checkAllowedTexts(served, [req.allowedTexts], explicitMax ?? o.defaultMaxTokens, (_, j) => `allowed_texts[${j}]`);
      // Measured before it is tokenised: a text that cannot fit is not worth the time.
      const rendered = renderChatML(req.messages.map(chatMessage));
      checkTextFits(servedLimit(served), rendered, explicitMax ?? 1, 'input');
      const prompt = tok.encode(rendered);
      const maxTokens = explicitMax ?? Math.max(1, Math.min(o.defaultMaxTokens, served.maxModelLen - prompt.length));
      checkWork(1, prompt.length, maxTokens, o.maxRequestTokens, 'input');
      const check = (s: typeof served) => checkPrompt(s, prompt, () => 'input', maxTokens);
      check(served);
      let constraint: TokenConstraint | null = null;
      if (req.format.type !== 'text')
        try {
          constraint = jsonFormatConstraint(req.format, { tokenizer: tok, endTokens: endTokenIds(tok) });
        } catch (e) {
          if (e instanceof JsonSchemaError)
            throw new RequestError(400, `the JSON schema cannot be constrained: ${e.message}`, 'text.format.schema');
          throw e;
        }
      const [g] = await o.queue.generate(
        [prompt],
        {
          temperature: req.temperature ?? 1,
          topP: req.topP ?? 1,
          maxTokens,
          stop: req.stop,
          ...(constraint ? { constraints: [constraint] } : req.allowedTexts ? { allowedTexts: [req.allowedTexts] } : {}),
          seed: req.seed ?? null,
        },
        { signal, check, adapter },
      );
      return { content: g.text, toolCalls: [], finishReason: g.finish, generation: g, promptIds: prompt, policyVersion: 0 };
    },
  };
}
