/**
 * The tool parsers as vLLM's behave: hermes reads `<tool_call>` JSON blocks (the content is the text
 * before the first; an unclosed last block is read to the end), llama3_json a run of JSON objects after an
 * optional `<|python_tag|>` (`arguments` or `parameters`); a call that does not parse gives the whole
 * text back as content with the reason; a program's parser is registered by name and refused over a
 * built-in one.
 */
import { describe, expect, it } from 'vitest';
import { registerToolParser, toolParser, toolParserNames } from './index.ts';

const hermes = toolParser('hermes');
const llama = toolParser('llama3_json');
const none = { tools: [] };

describe('hermes', () => {
  it('reads calls and the content before them', () => {
    expect(hermes('just text', none)).toEqual({ content: 'just text', calls: [], malformed: null });
    expect(hermes('<tool_call>\n{"name": "move", "arguments": {"room": "hall"}}\n</tool_call>', none)).toEqual({
      content: null,
      calls: [{ name: 'move', arguments: '{"room":"hall"}' }],
      malformed: null,
    });
    const two =
      'Let me look.\n<tool_call>\n{"name": "look", "arguments": {}}\n</tool_call>\n<tool_call>\n{"arguments": {"n": 2}, "name": "take"}\n</tool_call>';
    expect(hermes(two, none)).toEqual({
      content: 'Let me look.\n',
      calls: [
        { name: 'look', arguments: '{}' },
        { name: 'take', arguments: '{"n":2}' },
      ],
      malformed: null,
    });
  });

  it('reads an unclosed last call to the end, and arguments written as a JSON string', () => {
    expect(hermes('<tool_call>\n{"name": "look", "arguments": "{\\"far\\": true}"}', none).calls).toEqual([
      { name: 'look', arguments: '{"far":true}' },
    ]);
  });

  it('gives a malformed call back as text, saying why', () => {
    const bad = '<tool_call>\n{"name": "move", "arguments": }\n</tool_call>';
    const r = hermes(bad, none);
    expect(r.content).toBe(bad);
    expect(r.calls).toEqual([]);
    expect(r.malformed).toMatch(/^tool call 1: not JSON/);
    expect(hermes('<tool_call>{"arguments": {}}</tool_call>', none).malformed).toBe('tool call 1: no "name" string');
    expect(hermes('<tool_call>{"name": "a", "arguments": [1]}</tool_call>', none).malformed).toBe(
      'tool call 1: "arguments" must be a JSON object',
    );
  });
});

describe('llama3_json', () => {
  it('reads one call or several after <|python_tag|>, with arguments or parameters', () => {
    expect(llama('{"name": "move", "parameters": {"room": "hall"}}', none)).toEqual({
      content: null,
      calls: [{ name: 'move', arguments: '{"room":"hall"}' }],
      malformed: null,
    });
    expect(llama('<|python_tag|>{"name": "a", "arguments": {}}; {"name": "b", "arguments": {"x": [1, 2]}}', none).calls).toEqual([
      { name: 'a', arguments: '{}' },
      { name: 'b', arguments: '{"x":[1,2]}' },
    ]);
  });

  it('leaves text without a call as content, and gives a malformed one back with the reason', () => {
    expect(llama('no call here', none)).toEqual({ content: 'no call here', calls: [], malformed: null });
    const r = llama('{"nam": "a"}', none);
    expect(r).toEqual({ content: '{"nam": "a"}', calls: [], malformed: 'tool call 1: no "name" string' });
    expect(llama('<|python_tag|>{"name": ', none).malformed).toMatch(/no complete JSON object/);
  });
});

describe('the registry', () => {
  it("takes a program's parser by name, refuses a built-in name, and names the registered ones for an unknown one", () => {
    registerToolParser('upper', (text) => ({ content: text.toUpperCase(), calls: [], malformed: null }));
    expect(toolParser('upper')('hi', none).content).toBe('HI');
    expect(toolParserNames()).toEqual(expect.arrayContaining(['hermes', 'llama3_json', 'upper']));
    expect(() => registerToolParser('hermes', hermes)).toThrow(/built-in/);
    expect(() => toolParser('nope')).toThrow(/no tool parser "nope" \(registered: hermes, llama3_json, upper\)/);
  });
});
