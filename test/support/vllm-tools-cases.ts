/**
 * The tool requests sent to vLLM and read by our side (bench/vllm-tools.ts records vLLM's answers to
 * them; src/openai/vllm-tools.test.ts checks ours against the record). Greedy (temperature 0), with
 * `return_token_ids` so that vLLM says which prompt ids it rendered and which ids it sampled.
 */
const WEATHER = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Get the current weather in a city.',
    parameters: {
      type: 'object',
      properties: { city: { type: 'string' }, unit: { type: 'string', enum: ['celsius', 'fahrenheit'] } },
      required: ['city', 'unit'],
    },
  },
};
const TIME = {
  type: 'function',
  function: { name: 'get_time', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } },
};
const TOOLS = [WEATHER, TIME];
/** The same tools with `strict: true`: vLLM 0.32 constrains a forced call's arguments to the schema only then. */
const STRICT = TOOLS.map((t) => ({ ...t, function: { ...t.function, strict: true } }));
const CALL = [
  { role: 'system', content: 'You are a helpful assistant.' },
  { role: 'user', content: 'Use the get_weather tool for Paris, in celsius.' },
];
const ASK = [
  { role: 'system', content: 'You are a helpful assistant.' },
  { role: 'user', content: 'What is the weather in Paris, in celsius?' },
];
const GREEDY = { temperature: 0, max_tokens: 60, return_token_ids: true };

export const TOOL_CASES: Record<string, Record<string, unknown>> = {
  auto: { messages: ASK, tools: TOOLS, tool_choice: 'auto', ...GREEDY },
  required: { messages: ASK, tools: TOOLS, tool_choice: 'required', ...GREEDY },
  named: { messages: ASK, tools: TOOLS, tool_choice: { type: 'function', function: { name: 'get_time' } }, ...GREEDY },
  required_strict: { messages: ASK, tools: STRICT, tool_choice: 'required', ...GREEDY },
  named_strict: { messages: ASK, tools: STRICT, tool_choice: { type: 'function', function: { name: 'get_time' } }, ...GREEDY },
  auto_call: { messages: CALL, tools: TOOLS, ...GREEDY },
  auto_no_system: { messages: ASK.slice(1), tools: TOOLS, ...GREEDY },
  stream_auto: { messages: ASK, tools: TOOLS, tool_choice: 'auto', stream: true, ...GREEDY },
  stream_required: { messages: ASK, tools: TOOLS, tool_choice: 'required', stream: true, ...GREEDY },
  stream_named: { messages: ASK, tools: TOOLS, tool_choice: { type: 'function', function: { name: 'get_time' } }, stream: true, ...GREEDY },
  stream_required_strict: { messages: ASK, tools: STRICT, tool_choice: 'required', stream: true, ...GREEDY },
  stream_named_strict: {
    messages: ASK,
    tools: STRICT,
    tool_choice: { type: 'function', function: { name: 'get_time' } },
    stream: true,
    ...GREEDY,
  },
  stream_auto_call: { messages: CALL, tools: TOOLS, stream: true, ...GREEDY },
  round_trip: {
    messages: [
      ...ASK,
      {
        role: 'assistant',
        content: null,
        tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris","unit":"celsius"}' } }],
      },
      { role: 'tool', tool_call_id: 'call_1', content: '{"temperature": 18, "sky": "clear"}' },
    ],
    tools: TOOLS,
    ...GREEDY,
  },
  round_trip_two_results: {
    messages: [
      ...ASK,
      {
        role: 'assistant',
        content: 'Let me look.',
        tool_calls: [
          { id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city": "Paris", "unit": "celsius"}' } },
          { id: 'call_2', type: 'function', function: { name: 'get_time', arguments: '{"city":"Paris"}' } },
        ],
      },
      { role: 'tool', tool_call_id: 'call_1', content: 'Sunny, 18 C.' },
      { role: 'tool', tool_call_id: 'call_2', content: '14:05' },
    ],
    tools: TOOLS,
    ...GREEDY,
  },
};

/** The same tools, each with a description (vLLM writes `"description": null` for one without). */
function described(body: Record<string, unknown>): Record<string, unknown> {
  const tools = (body.tools as typeof TOOLS).map((t) => ({
    ...t,
    function: { description: 'Get the current time in a city.', ...t.function },
  }));
  return { ...body, tools };
}

/**
 * Sent to vLLM's /tokenize with Qwen2.5's own template (test/support/qwen25-template.ts) as its chat
 * template: the requests as they are (a tool without description; strict tools), and with every tool
 * described and not strict.
 */
export const QWEN25_CASES: Record<string, Record<string, unknown>> = Object.fromEntries(
  [
    ['auto', TOOL_CASES.auto],
    ['named_strict', TOOL_CASES.named_strict],
    ['described_auto', described(TOOL_CASES.auto)],
    ['described_auto_no_system', described(TOOL_CASES.auto_no_system)],
    ['described_round_trip', described(TOOL_CASES.round_trip)],
    ['described_round_trip_two_results', described(TOOL_CASES.round_trip_two_results)],
  ].map(([name, b]) => {
    const { messages, tools } = b as { messages: unknown; tools: unknown };
    return [name, { messages, tools, add_generation_prompt: true }];
  }),
);
