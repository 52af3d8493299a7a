/**
 * `empo2 serve`'s `POST /v1/chat/completions` answers through the OpenAI protocol layer the training
 * gateway uses (../openai/chat_completion/), with the real tiny model and the real `openai` client: forced
 * tool calls valid for their schema (plain and streamed as tool-call deltas), a tool message round trip
 * rendered as the gateway renders it in training and sampled as the in-process engine samples it,
 * `response_format` json_schema, bad input refused naming the field and `empo2 serve`, and the policy
 * version: how many times the answering weights were loaded (load_weights, load_lora_adapter).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import { cpSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { tf } from '../policy/tfjs/backend.ts';
import { saveLoraAdapter } from '../policy/tfjs/lora.ts';
import { loadServedModel, readServedAdapter, toolTemplateOf } from './load.ts';
import { startServer, type RunningServer } from './server.ts';
import { startServedFixture, type ServedFixture } from '../../test/support/served-fixture.ts';

const MOVE = {
  type: 'function' as const,
  function: {
    name: 'move',
    description: 'Go to a room.',
    parameters: {
      type: 'object',
      properties: { room: { type: 'string', enum: ['hall', 'kitchen', 'garden'] } },
      required: ['room'],
      additionalProperties: false,
    },
  },
};
const LOOK = {
  type: 'function' as const,
  function: { name: 'look', description: 'Look around.', parameters: { type: 'object', properties: {} } },
};
const ROOMS = ['hall', 'kitchen', 'garden'];

describe('empo2 serve: /v1/chat/completions through the protocol layer', () => {
  let f: ServedFixture;
  beforeAll(async () => {
    f = await startServedFixture('tiny');
  }, 60_000);
  afterAll(async () => f?.close());
  const client = () => new OpenAI({ baseURL: `${f.server.url}/v1`, apiKey: 'none', maxRetries: 0 });

  it('makes a valid call of the schema for tool_choice "required", with finish_reason tool_calls and the version stamp', async () => {
    for (let seed = 0; seed < 3; seed++) {
      const { data, response } = await client()
        .chat.completions.create({
          model: 'tiny',
          messages: [{ role: 'user', content: 'Find the hat. You are in the hall.' }],
          tools: [MOVE, LOOK],
          tool_choice: 'required',
          parallel_tool_calls: false,
          seed,
        })
        .withResponse();
      const c = data.choices[0];
      expect(c.finish_reason).toBe('tool_calls');
      expect(c.message.tool_calls).toHaveLength(1);
      const call = c.message.tool_calls![0] as OpenAI.Chat.ChatCompletionMessageFunctionToolCall;
      expect(call.type).toBe('function');
      expect(call.id).toMatch(/^call_/);
      expect(['move', 'look']).toContain(call.function.name);
      const args = JSON.parse(call.function.arguments);
      if (call.function.name === 'move') expect(ROOMS).toContain(args.room);
      else expect(args).toEqual({});
      expect(data.system_fingerprint).toBe('empo2-policy-0');
      expect(response.headers.get('x-empo2-policy-version')).toBe('0');
    }
    // A named function: that one, every time.
    const named = await client().chat.completions.create({
      model: 'tiny',
      messages: [{ role: 'user', content: 'Where to?' }],
      tools: [MOVE, LOOK],
      tool_choice: { type: 'function', function: { name: 'move' } },
      seed: 4,
    });
    const call = named.choices[0].message.tool_calls![0] as OpenAI.Chat.ChatCompletionMessageFunctionToolCall;
    expect(call.function.name).toBe('move');
    expect(ROOMS).toContain(JSON.parse(call.function.arguments).room);
  });

  it('streams a forced call as tool-call deltas: index, id and name first, then the arguments', async () => {
    const stream = await client().chat.completions.create({
      model: 'tiny',
      messages: [{ role: 'user', content: 'You are in the hall.' }],
      tools: [MOVE],
      tool_choice: 'required',
      stream: true,
      stream_options: { include_usage: true },
      seed: 2,
    });
    const deltas: OpenAI.Chat.ChatCompletionChunk.Choice.Delta.ToolCall[] = [];
    let finish: string | null = null;
    let usage: OpenAI.CompletionUsage | null | undefined;
    for await (const chunk of stream) {
      for (const ch of chunk.choices) {
        deltas.push(...(ch.delta.tool_calls ?? []));
        finish = ch.finish_reason ?? finish;
      }
      if (chunk.usage) usage = chunk.usage;
    }
    expect(finish).toBe('tool_calls');
    expect(deltas[0]).toMatchObject({ index: 0, type: 'function', function: { name: 'move', arguments: '' } });
    expect(deltas[0].id).toMatch(/^call_/);
    const args = deltas
      .filter((d) => d.index === 0)
      .map((d) => d.function?.arguments ?? '')
      .join('');
    expect(ROOMS).toContain(JSON.parse(args).room);
    expect(usage?.completion_tokens).toBeGreaterThan(0);
  });

  it('renders a tool message round trip as in training and samples it as the in-process engine does', async () => {
    const tok = f.local.tokenizer;
    const first = await client().chat.completions.create({
      model: 'tiny',
      messages: [
        { role: 'system', content: 'Find the hat.' },
        { role: 'user', content: 'You are in the hall.' },
      ],
      tools: [MOVE],
      tool_choice: 'required',
      seed: 1,
    });
    const call = first.choices[0].message.tool_calls![0] as OpenAI.Chat.ChatCompletionMessageFunctionToolCall;
    const room = JSON.parse(call.function.arguments).room as string;
    // The client re-serialises the call with its own spacing; the prompt is the same.
    const history = (args: string): OpenAI.Chat.ChatCompletionMessageParam[] => [
      { role: 'system', content: 'Find the hat.' },
      { role: 'user', content: 'You are in the hall.' },
      { role: 'assistant', content: null, tool_calls: [{ ...call, function: { name: 'move', arguments: args } }] },
      { role: 'tool', tool_call_id: call.id, content: `You walk into the ${room}.` },
    ];
    const ask = (args: string) =>
      client().chat.completions.create({
        model: 'tiny',
        messages: history(args),
        tools: [MOVE],
        max_tokens: 8,
        temperature: 0.9,
        seed: 6,
        // empo2 serve's (vLLM's) extra fields.
        ...({ return_token_ids: true } as object),
      }) as unknown as Promise<OpenAI.Chat.ChatCompletion & { choices: { token_ids: number[]; prompt_token_ids: number[] }[] }>;
    const second = await ask(JSON.stringify({ room }));
    const respaced = await ask(`{ "room" :  "${room}" }`);
    const prompt = second.choices[0].prompt_token_ids;
    expect(respaced.choices[0].prompt_token_ids).toEqual(prompt);
    const text = tok.decode(prompt);
    // The ChatML + Hermes default the gateway renders in training (../openai/render.ts), as Qwen2.5's template writes it.
    expect(text).toBe(
      '<|im_start|>system\nFind the hat.\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n' +
        'You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n' +
        '{"type": "function", "function": {"name": "move", "description": "Go to a room.", "parameters": {"type": "object", ' +
        '"properties": {"room": {"type": "string", "enum": ["hall", "kitchen", "garden"]}}, "required": ["room"], "additionalProperties": false}}}\n' +
        '</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n' +
        '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n' +
        '<|im_start|>user\nYou are in the hall.<|im_end|>\n' +
        `<|im_start|>assistant\n<tool_call>\n{"name": "move", "arguments": {"room": "${room}"}}\n</tool_call><|im_end|>\n` +
        `<|im_start|>user\n<tool_response>\nYou walk into the ${room}.\n</tool_response><|im_end|>\n<|im_start|>assistant\n`,
    );
    expect(tok.encode(text)).toEqual(prompt);
    // tool_choice auto: sampled freely, as the in-process engine samples the same prompt.
    const [g] = await f.local.generate([prompt], { maxTokens: 8, temperature: 0.9, topP: 1, seed: 6 });
    expect(second.choices[0].token_ids).toEqual(g.tokens);
    // A tool message for a call that was never made is refused by name.
    const bad = await client()
      .chat.completions.create({ model: 'tiny', messages: [...history('{}').slice(0, 2), history('{}')[3]], tools: [MOVE] })
      .catch((e: unknown) => e);
    expect(bad).toBeInstanceOf(OpenAI.BadRequestError);
    expect((bad as InstanceType<typeof OpenAI.BadRequestError>).param).toBe('messages[2].tool_call_id');
  });

  it('reads the answer as the gateway does: parallel calls unless parallel_tool_calls is false, a malformed call as text', async () => {
    const callText = (room: string) => `<tool_call>\n{"name": "move", "arguments": {"room": "${room}"}}\n</tool_call>`;
    // allowed_texts makes the tiny model write exactly these answers.
    const answer = async (text: string, extra: Record<string, unknown> = {}) =>
      (
        await client().chat.completions.create({
          model: 'tiny',
          messages: [{ role: 'user', content: 'Where to?' }],
          tools: [MOVE],
          seed: 1,
          ...({ allowed_texts: [text], ...extra } as object),
        })
      ).choices[0];
    const two = `${callText('hall')}\n${callText('garden')}`;
    const both = await answer(two);
    expect(both.finish_reason).toBe('tool_calls');
    expect(both.message.content).toBeNull();
    expect(both.message.tool_calls!.map((c) => (c as OpenAI.Chat.ChatCompletionMessageFunctionToolCall).function.arguments)).toEqual([
      '{"room":"hall"}',
      '{"room":"garden"}',
    ]);
    const one = await answer(two, { parallel_tool_calls: false });
    expect(one.message.tool_calls!.map((c) => (c as OpenAI.Chat.ChatCompletionMessageFunctionToolCall).function.arguments)).toEqual([
      '{"room":"hall"}',
    ]);
    const malformed = '<tool_call>\n{"name": "move", "arguments": [1]}\n</tool_call>';
    const text = await answer(malformed);
    expect(text.finish_reason).toBe('stop');
    expect(text.message.content).toBe(malformed);
    expect(text.message.tool_calls ?? []).toEqual([]);
  });

  it('streams a plain answer as the JSON answer gives it, and labels log-prob tokens "token_id:N" on request', async () => {
    const ask = { model: 'tiny', messages: [{ role: 'user' as const, content: 'You are in the hall.' }], max_tokens: 8, seed: 3 };
    const whole = (await client().chat.completions.create({
      ...ask,
      logprobs: true,
      ...({ return_tokens_as_token_ids: true } as object),
    })) as OpenAI.Chat.ChatCompletion & { choices: { token_ids: number[] }[] };
    const c = whole.choices[0];
    expect(c.logprobs!.content!.map((x) => x.token)).toEqual(c.token_ids.map((id) => `token_id:${id}`));
    let streamed = '';
    for await (const chunk of await client().chat.completions.create({ ...ask, stream: true }))
      streamed += chunk.choices[0]?.delta.content ?? '';
    expect(streamed).toBe(c.message.content);
  });

  it('constrains response_format json_schema to the schema', async () => {
    const schema = {
      type: 'object',
      properties: { door: { type: 'string', enum: ['open', 'locked'] }, rooms: { type: 'integer', enum: [1, 2, 3] } },
      required: ['door', 'rooms'],
      additionalProperties: false,
    };
    for (let seed = 0; seed < 3; seed++) {
      const r = await client().chat.completions.create({
        model: 'tiny',
        messages: [{ role: 'user', content: 'Describe the hall.' }],
        response_format: { type: 'json_schema', json_schema: { name: 'hall', schema, strict: true } },
        seed,
      });
      const out = JSON.parse(r.choices[0].message.content!);
      expect(Object.keys(out).sort()).toEqual(['door', 'rooms']);
      expect(['open', 'locked']).toContain(out.door);
      expect([1, 2, 3]).toContain(out.rooms);
      expect(r.choices[0].finish_reason).toBe('stop');
    }
  });

  it('refuses bad input with a 400 naming the field and empo2 serve', async () => {
    const refused = async (body: Record<string, unknown>) => {
      const e = await client()
        .chat.completions.create({ model: 'tiny', messages: [{ role: 'user', content: 'hi' }], ...body } as never)
        .catch((x: unknown) => x);
      expect(e).toBeInstanceOf(OpenAI.BadRequestError);
      return e as InstanceType<typeof OpenAI.BadRequestError>;
    };
    const web = await refused({ tools: [{ type: 'web_search' }] });
    expect(web.param).toBe('tools[0].type');
    expect(web.message).toContain('"web_search" tools are not supported by empo2 serve');
    const unknown = await refused({ colour: 'red' });
    expect(unknown.param).toBe('colour');
    expect(unknown.message).toContain('empo2 serve refuses');
    const choice = await refused({ tools: [MOVE], tool_choice: { type: 'function', function: { name: 'fly' } } });
    expect(choice.param).toBe('tool_choice.function.name');
    const schema = await refused({
      tools: [{ type: 'function', function: { name: 'go', parameters: { type: 'object', properties: { to: { type: 'place' } } } } }],
    });
    expect(schema.param).toBe('tools[0].function.parameters.properties.to.type');
  });
});

describe('empo2 serve: the policy version is how many times the answering weights were loaded', () => {
  const KEY = 'version-key';
  const roots = mkdtempSync(join(tmpdir(), 'empo2-version-'));
  let f: ServedFixture;
  beforeAll(async () => {
    f = await startServedFixture('tiny', {
      apiKey: KEY,
      loadWeights: { roots: [roots], load: loadServedModel, readAdapter: readServedAdapter },
    });
    cpSync(f.modelDir, join(roots, 'model'), { recursive: true });
    const model = f.local.model;
    const adapters = model.attachLora({ r: 2, alpha: 4, dropout: 0, targetModules: ['q_proj', 'v_proj'] }, 3);
    for (const { B } of adapters.modules.values()) B.assign(tf.randomNormal(B.shape, 0, 0.5, 'float32', 3));
    await saveLoraAdapter(join(roots, 'adapter'), model);
    model.setLora(null);
  }, 60_000);
  afterAll(async () => {
    await f?.close();
    rmSync(roots, { recursive: true, force: true });
  });

  const post = (path: string, body: unknown) =>
    fetch(f.server.url + path, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${KEY}` },
      body: JSON.stringify(body),
    });
  async function versionOf(model: string): Promise<{ header: string | null; fingerprint: string; model: string }> {
    const res = await post('/v1/chat/completions', { model, messages: [{ role: 'user', content: 'look' }], max_tokens: 2, seed: 1 });
    expect(res.status).toBe(200);
    const json = (await res.json()) as { system_fingerprint: string; model: string };
    return { header: res.headers.get('x-empo2-policy-version'), fingerprint: json.system_fingerprint, model: json.model };
  }

  it('counts load_weights for the base model and each load of an adapter name, across unloads', async () => {
    expect(await versionOf('tiny')).toEqual({ header: '0', fingerprint: 'empo2-policy-0', model: 'tiny' });
    expect((await post('/v1/empo2/load_weights', { path: join(roots, 'model') })).status).toBe(200);
    expect(await versionOf('tiny')).toEqual({ header: '1', fingerprint: 'empo2-policy-1', model: 'tiny' });
    // A trainer's LoRA sync: unload (absent at first), load, once per update.
    for (const expected of ['1', '2']) {
      await post('/v1/unload_lora_adapter', { lora_name: 'policy' });
      expect((await post('/v1/load_lora_adapter', { lora_name: 'policy', lora_path: join(roots, 'adapter') })).status).toBe(200);
      expect(await versionOf('policy')).toEqual({ header: expected, fingerprint: `empo2-policy-${expected}`, model: 'policy' });
    }
    expect((await versionOf('tiny')).header).toBe('1');
  });
});

/** A template with tool support of its own (Qwen2.5's shape, with its default system line), unlike the ChatML + Hermes default. */
const QWEN_LIKE =
  '{%- if tools %}<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.\n\n# Tools\n\n<tools>{% for t in tools %}\n{{ t | tojson }}{% endfor %}\n</tools><|im_end|>\n{% endif %}' +
  "{%- for m in messages %}{% if m.role == 'tool' %}<|im_start|>user\n<tool_response>\n{{ m.content }}\n</tool_response><|im_end|>\n" +
  '{% elif m.role == \'assistant\' and m.tool_calls %}<|im_start|>assistant\n{% for c in m.tool_calls %}<tool_call>\n{"name": "{{ c.function.name }}", "arguments": {{ c.function.arguments | tojson }}}\n</tool_call>{% endfor %}<|im_end|>\n' +
  '{% else %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}';

describe('empo2 serve: a model whose chat template renders tools gets its tool conversations rendered by it', () => {
  let f: ServedFixture;
  let server: RunningServer;
  beforeAll(async () => {
    f = await startServedFixture('tiny');
    // The served model directory with the template beside it, as a Qwen2.5 download has it.
    writeFileSync(join(f.modelDir, 'chat_template.jinja'), QWEN_LIKE);
    const toolTemplate = toolTemplateOf(f.modelDir);
    expect(toolTemplate).not.toBeNull();
    // A second server on the fixture's engine, with the template (the fixture's own has none).
    server = await startServer({ engine: f.server.queue.current.engine, modelName: 'tiny', port: 0, toolTemplate });
  }, 60_000);
  afterAll(async () => {
    await server?.close();
    await f?.close();
  });

  const promptOf = async (body: object) => {
    const res = await fetch(`${server.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ model: 'tiny', seed: 1, max_tokens: 4, return_token_ids: true, ...body }),
    });
    expect(res.status).toBe(200);
    const json = (await res.json()) as {
      prompt_token_ids: number[];
      choices: { message: { tool_calls?: { function: { name: string } }[] } }[];
    };
    return { text: f.local.tokenizer.decode(json.prompt_token_ids), json };
  };

  it('renders tools, calls and results through the template; a chat without tools as before', async () => {
    const { text, json } = await promptOf({
      messages: [
        { role: 'user', content: 'Find the hat.' },
        {
          role: 'assistant',
          content: null,
          tool_calls: [{ id: 'c1', type: 'function', function: { name: 'move', arguments: '{"room":"hall"}' } }],
        },
        { role: 'tool', tool_call_id: 'c1', content: 'You are in the hall.' },
      ],
      tools: [MOVE],
      tool_choice: 'required',
      max_tokens: 64,
    });
    expect(text.startsWith('<|im_start|>system\nYou are Qwen, created by Alibaba Cloud.')).toBe(true);
    expect(text).toContain('"name": "move"');
    // The call's arguments as an object, as transformers hands them to a template.
    expect(text).toContain('<tool_call>\n{"name": "move", "arguments": {"room": "hall"}}\n</tool_call>');
    expect(text).toContain('<tool_response>\nYou are in the hall.\n</tool_response>');
    expect(text.endsWith('<|im_start|>assistant\n')).toBe(true);
    expect(json.choices[0].message.tool_calls?.[0].function.name).toBe('move');
    const plain = await promptOf({ messages: [{ role: 'user', content: 'Find the hat.' }] });
    expect(plain.text).toBe('<|im_start|>user\nFind the hat.<|im_end|>\n<|im_start|>assistant\n');
  });

  it('a model directory without a template (the tiny model) has none', () => {
    rmSync(join(f.modelDir, 'chat_template.jinja'));
    expect(toolTemplateOf(f.modelDir)).toBeNull();
  });
});
