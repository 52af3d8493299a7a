import { PassThrough } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { createBuiltinEnv, oracleActions } from '../envs/builtin/index.ts';
import { play } from './play.ts';

function collect(): { stream: PassThrough; text: () => string } {
  const stream = new PassThrough();
  const chunks: Buffer[] = [];
  stream.on('data', (c: Buffer) => chunks.push(c));
  return { stream, text: () => Buffer.concat(chunks).toString('utf8') };
}

describe('play', () => {
  it('plays the oracle actions, some typed as numbers, to a full score', async () => {
    const env = createBuiltinEnv();
    const actions = oracleActions('power', 3);
    // Type the first action by its number in the list shown at the start.
    const shown = (await env.reset('power', 3)).validActions;
    expect(shown).toContain(actions[0]);
    const lines = ['', '99', String(shown.indexOf(actions[0]) + 1), ...actions.slice(1)];
    const input = new PassThrough();
    input.end(lines.join('\n') + '\n');
    const out = collect();
    const r = await play({ env, task: 'power', variation: 3, input, output: out.stream });
    expect(r).toMatchObject({ score: 100, done: true, quit: false, steps: actions.length, actions });
    const text = out.text();
    expect(text).toContain('Task: Find a');
    expect(text).toMatch(/ 1\. /);
    expect(text).toContain('There is no action 99');
    expect(text).toContain('Task complete.');
    expect(text).toContain(`Episode over: score 100/100 in ${actions.length} steps.`);
  });

  it('accepts free text and stops on quit', async () => {
    const env = createBuiltinEnv();
    const input = new PassThrough();
    input.end('dance\nlook around\nquit\ninventory\n');
    const out = collect();
    const r = await play({ env, task: 'boil', variation: 0, input, output: out.stream });
    expect(r).toMatchObject({ quit: true, done: false, steps: 2, actions: ['dance', 'look around'] });
    expect(out.text()).toContain("I don't understand that.");
    expect(out.text()).toContain('Stopped: score 0/100 after 2 steps.');
  });

  it('shows only the count of a long action list, and lists matching actions on request with their full-list numbers', async () => {
    const env = createBuiltinEnv();
    const shown = (await env.reset('power', 3)).validActions;
    const pick = shown.length - 1;
    const word = shown[pick].split(' ').pop()!;
    const input = new PassThrough();
    input.end(`actions ${word}\nactions zzzqqq\n${pick + 1}\nquit\n`);
    const out = collect();
    const r = await play({ env, task: 'power', variation: 3, input, output: out.stream, listLimit: 1 });
    const text = out.text();
    expect(text).toContain(`${shown.length} valid actions: type one or its number`);
    expect(text).not.toMatch(/^ {2} 1\. /m);
    expect(text).toContain(`${String(pick + 1).padStart(2)}. ${shown[pick]}`);
    expect(text).toContain('No valid action contains "zzzqqq".');
    expect(r).toMatchObject({ quit: true, steps: 1, actions: [shown[pick]] });
  });

  it('ends cleanly when the input ends', async () => {
    const env = createBuiltinEnv();
    const input = new PassThrough();
    input.end();
    const out = collect();
    const r = await play({ env, task: 'clue', variation: 1, input, output: out.stream });
    expect(r).toMatchObject({ quit: false, done: false, steps: 0 });
  });
});
