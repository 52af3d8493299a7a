/**
 * The openai tip writer's own rules: the tip is cut to memory.reflection_max_tokens of the policy's
 * tokenizer, an empty or failed answer is no tip (null), the prompt is the policy reflector's, and
 * the config says what is missing.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../config/load.ts';
import { ExternalModelSchema, resumeConflicts } from '../config/schema.ts';
import { ExternalModel } from '../external/client.ts';
import type { TextTokenizer } from '../policy/types.ts';
import { ExternalReflector, capTokens } from './external-reflector.ts';
import { reflectionPrompt, type Trajectory } from './reflector.ts';

/** One token per character: lengths are easy to read. */
const chars: TextTokenizer = {
  encode: (t) => [...t].map((c) => c.codePointAt(0)!),
  decode: (ids) => String.fromCodePoint(...ids),
  vocabSize: 0x110000,
  tokenToId: (t) => t.codePointAt(0),
};

const trajectory: Trajectory = {
  task: 'Find the key.',
  steps: [{ observation: 'You are in the hall.', action: 'go north', score: 0 }],
  finalObservation: 'You are in the kitchen.',
  score: 0,
  success: false,
};

let server: Server;
let url = '';
const answers: (string | null)[] = [];
const asked: any[] = [];
beforeAll(async () => {
  server = createServer((req, res) => {
    let raw = '';
    req.on('data', (d) => (raw += d));
    req.on('end', () => {
      asked.push(JSON.parse(raw));
      const text = answers.shift();
      if (text === null || text === undefined) return void res.writeHead(500).end('down');
      res.writeHead(200, { 'Content-Type': 'application/json' }).end(JSON.stringify({ choices: [{ message: { content: text } }] }));
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
});
afterAll(() => new Promise<void>((r) => server.close(() => r())));

function reflector(maxTokens: number): ExternalReflector {
  const settings = ExternalModelSchema.parse({ base_url: url, model: 'writer', max_retries: 0, cache: false });
  return new ExternalReflector(new ExternalModel(settings, { role: 'reflector', defaultCacheDir: null }), chars, {
    maxTokens,
    historySteps: 12,
    seed: 5,
  });
}

describe('openai reflector', () => {
  it("asks the policy reflector's prompt and caps the tip at the policy's tokens; an empty or failed answer is no tip", async () => {
    answers.push('  Go\u0007  north\nfirst, then open the door.  ', '   ', null);
    const r = reflector(12);
    const tips = await r.reflect([trajectory, trajectory, trajectory]);
    expect(tips).toEqual(['Go north fir', null, null]);
    expect(asked[0]).toMatchObject({
      model: 'writer',
      max_tokens: 12,
      seed: 5,
      messages: [{ role: 'user', content: reflectionPrompt(trajectory, 12) }],
    });
    expect(r.takeUsage()).toMatchObject({ calls: 3, failed: 1 });
    expect(r.name).toBe('openai (writer)');
    r.close();
  });

  it('keeps a tip that fits as written, and never cuts to more tokens than allowed', () => {
    expect(capTokens('short', chars, 10)).toBe('short');
    // A tokenizer whose decode adds a replacement character where a cut split one.
    const splitting: TextTokenizer = { ...chars, decode: (ids) => chars.decode(ids) + '\uFFFD' };
    expect(capTokens('abcdefgh', splitting, 4)).toBe('abcd');
  });

  it('lets a resume move the writer to another server, not change the model', () => {
    const writer = (url: string, model: string) => `memory.reflector_model={base_url: "${url}", model: ${model}, timeout_s: 5}`;
    const saved = loadConfig(null, ['memory.reflector=openai', writer('http://a:1/v1', 'm')]);
    expect(resumeConflicts(saved, loadConfig(null, ['memory.reflector=openai', writer('http://b:2/v1', 'm')]))).toEqual([]);
    expect(resumeConflicts(saved, loadConfig(null, ['memory.reflector=openai', writer('http://a:1/v1', 'other')]))).toEqual([
      'memory.reflector_model.model: "m" in the run, "other" now',
    ]);
  });

  it('refuses openai without a model, a model without openai, and an address that is not http', () => {
    expect(() => loadConfig(null, ['memory.reflector=openai'])).toThrow(/memory.reflector: openai needs memory.reflector_model/);
    expect(() => loadConfig(null, ['memory.reflector_model={base_url: "http://x", model: m}'])).toThrow(
      /memory.reflector_model is for memory.reflector: openai \(reflector is auto\)/,
    );
    expect(() => loadConfig(null, ['memory.reflector=openai', 'memory.reflector_model={base_url: "x:1", model: m}'])).toThrow(ConfigError);
    expect(() =>
      loadConfig(null, ['memory.reflector=openai', 'memory.reflector_model={base_url: "http://x", model: m, api_key: sk-1}']),
    ).toThrow(
      /memory.reflector_model.api_key: a key never goes into a config; put it in an environment variable and name that variable in memory.reflector_model.api_key_env/,
    );
  });
});
