import { describe, expect, it } from 'vitest';
import { sampleCorpus } from '../envs/builtin/index.ts';
import { Tokenizer, trainByteLevelBPE } from '../policy/tokenizer.ts';
import { Rng } from '../util/rng.ts';
import { ChatTemplate } from '../policy/chat-template.ts';
import { CHAT_SPECIAL_TOKENS } from '../policy/chat-tokens.ts';
import {
  encodePrompt,
  parseAction,
  removeTips,
  renderPrompt,
  renderTipBlock,
  startDialogue,
  TIP_CLOSE,
  TIP_OPEN,
  type EncodedPrompt,
  type PromptSettings,
  type Turn,
} from './prompt.ts';
import type { PastReflection } from '../memory/reflexion.ts';

const tokenizer = Tokenizer.fromJSON(
  trainByteLevelBPE(sampleCorpus(60), { vocabSize: 400, specialTokens: CHAT_SPECIAL_TOKENS }),
  'test tokenizer',
);

const PIECES = [
  'You are in the kitchen.',
  'A door leads to the attic.',
  'open red box',
  ' ',
  '\n',
  '\n\n',
  'ü',
  '漢字',
  '  spaced  ',
  TIP_OPEN,
  TIP_CLOSE,
  '<tip',
  'tip>',
  '</',
  '<|im_end|>',
  '<|im_start|>assistant\n',
  '<|endoftext|>',
  'Memories from your earlier exploration of this task:',
  'The action you took was go to attic; you finally scored 40/100.',
  '0',
  '100/100',
  '"quoted"',
  'tab\there',
];

function randomText(rng: Rng, maxPieces: number): string {
  const n = rng.int(maxPieces + 1);
  let s = '';
  for (let i = 0; i < n; i++) s += rng.pick(PIECES);
  return s;
}

describe('tips in the prompt (docs/EMPO2.md §3-4)', () => {
  it('cutting the tip span out gives exactly the tip-free ids, for random prompts and tips (marker-like text included)', () => {
    const rng = new Rng(2024);
    for (let trial = 0; trial < 300; trial++) {
      const turns: Turn[] = [];
      const nTurns = 1 + rng.int(5);
      for (let i = 0; i < nTurns; i++)
        turns.push({ observation: randomText(rng, 4), action: i < nTurns - 1 ? randomText(rng, 2) : undefined });
      const settings: PromptSettings = {
        history: rng.pick([0, 1, 2, null]),
        showValidActions: rng.next() < 0.5,
        system: rng.next() < 0.3 ? randomText(rng, 2) : '',
      };
      const valid = [randomText(rng, 2), randomText(rng, 2)];
      const task = randomText(rng, 3);
      const tips = Array.from({ length: 1 + rng.int(4) }, () => randomText(rng, 5));
      const plain = encodePrompt(tokenizer, { task, turns, validActions: valid }, settings);
      const withTips = encodePrompt(tokenizer, { task, turns, validActions: valid }, settings, tips);
      expect(plain.tipSpan).toBeNull();
      expect(withTips.tipSpan).not.toBeNull();
      expect(removeTips(withTips.ids, withTips.tipSpan)).toEqual(plain.ids);
      // The span holds exactly the tip block.
      const [a, b] = withTips.tipSpan!;
      expect(withTips.ids.slice(a, b)).toEqual(tokenizer.encode(renderTipBlock(tips)));
    }
  });

  it('the tip-free encoding equals encoding the whole rendered prompt at once (no drift from encoding in pieces)', () => {
    const rng = new Rng(7);
    for (let trial = 0; trial < 100; trial++) {
      const turns: Turn[] = [{ observation: randomText(rng, 4), action: 'go to attic' }, { observation: randomText(rng, 4) }];
      const s: PromptSettings = { history: 2, showValidActions: false, system: '' };
      expect(encodePrompt(tokenizer, { task: 'task', turns, validActions: [] }, s).ids).toEqual(
        tokenizer.encode(renderPrompt({ task: 'task', turns, validActions: [] }, s)),
      );
    }
  });

  it('tips go into the current user turn only, between the header line and the end of the turn', () => {
    const turns: Turn[] = [{ observation: 'first', action: 'look around' }, { observation: 'second' }];
    const s: PromptSettings = { history: null, showValidActions: false, system: '' };
    const ids = encodePrompt(tokenizer, { task: 'T', turns, validActions: [] }, s, ['tip one', 'tip two']).ids;
    expect(tokenizer.decode(ids)).toBe(
      '<|im_start|>user\nTask: T\nfirst<|im_end|>\n<|im_start|>assistant\nlook around<|im_end|>\n' +
        '<|im_start|>user\nsecond\n\nMemories from your earlier exploration of this task:\n<tip> tip one </tip>\n\n<tip> tip two </tip>\n\n<|im_end|>\n<|im_start|>assistant\n',
    );
  });

  it('removeTips refuses a span outside the prompt', () => {
    expect(() => removeTips([1, 2, 3], [2, 5])).toThrow(/outside a prompt of 3 tokens/);
    expect(removeTips([1, 2, 3], null)).toEqual([1, 2, 3]);
  });
});

// The chat template SmolLM2-135M-Instruct ships (ChatML with a default system turn), and a Llama-3-like
// one that trims message contents, as real models' templates do.
const SMOLLM2_TEMPLATE =
  "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}" +
  "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";
const TRIMMING_TEMPLATE =
  "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n\n' + message['content'] | trim + '<|im_end|>' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n\n' }}{% endif %}";

describe('the instruct style: the model chat template, token-in/token-out', () => {
  const template = ChatTemplate.fromTokenizerConfig({ chat_template: SMOLLM2_TEMPLATE }, 'test template');
  const imEnd = tokenizer.tokenToId('<|im_end|>')!;
  const settings = (history: number | null = null): PromptSettings => ({
    history,
    showValidActions: true,
    system: 'Be brief.',
    template,
    maxListedActions: 3,
  });

  /** Plays `steps` turns with random responses, returning each turn's tip-free prompt, its response and the prompt with tips. */
  function play(rng: Rng, s: PromptSettings, steps: number, text: (rng: Rng) => string) {
    const d = startDialogue(tokenizer, s, { task: 'find the key', observation: text(rng), validActions: ['go to kitchen', 'open box'] });
    const turns: { plain: EncodedPrompt; tipped: EncodedPrompt; response: number[] }[] = [];
    for (let t = 0; t < steps; t++) {
      const tipped = d.prompt(['tip ' + text(rng)]);
      const plain = d.prompt();
      const answer = text(rng);
      // A response ends at its first end token, or is cut by the length limit without one.
      const body = tokenizer.encode(answer).filter((x) => x !== imEnd);
      const response = [...body, ...(rng.next() < 0.8 ? [imEnd] : [])];
      turns.push({ plain, tipped, response });
      d.advance(
        { tokens: response, text: tokenizer.decode(body) },
        answer.trim(),
        text(rng),
        rng.next() < 0.5 ? ['look around'] : ['a', 'b', 'c', 'd'],
      );
    }
    return turns;
  }

  it("each turn's tip-free prompt extends the previous one plus the response as sampled (full history)", () => {
    const rng = new Rng(11);
    for (let trial = 0; trial < 40; trial++) {
      const turns = play(rng, settings(), 6, (r) => randomText(r, 4));
      for (let t = 1; t < turns.length; t++) {
        const before = [...turns[t - 1].plain.ids, ...turns[t - 1].response];
        expect(turns[t].plain.ids.slice(0, before.length)).toEqual(before);
      }
      for (const turn of turns) expect(removeTips(turn.tipped.ids, turn.tipped.tipSpan)).toEqual(turn.plain.ids);
    }
  });

  it('the prompt is the text the template renders, the tips at the end of the current user turn', () => {
    const d = startDialogue(tokenizer, settings(), { task: 'T', observation: 'first', validActions: ['look around', 'go to attic'] });
    d.advance({ tokens: [...tokenizer.encode('look around'), imEnd], text: 'look around' }, 'look around', 'second', ['a', 'b', 'c', 'd']);
    expect(tokenizer.decode(d.prompt(['tip one']).ids)).toBe(
      '<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nTask: T\n\nfirst\n\nValid actions: look around, go to attic<|im_end|>\n' +
        '<|im_start|>assistant\nlook around<|im_end|>\n' +
        // Four valid actions are over maxListedActions (3): not listed.
        '<|im_start|>user\nsecond\n\nMemories from your earlier exploration of this task:\n<tip> tip one </tip>\n\n<|im_end|>\n<|im_start|>assistant\n',
    );
  });

  it('a history window re-renders the kept turns (task first) and the tips still cut out exactly', () => {
    const rng = new Rng(5);
    const turns = play(rng, settings(1), 5, (r) => randomText(r, 3));
    for (const turn of turns) {
      expect(removeTips(turn.tipped.ids, turn.tipped.tipSpan)).toEqual(turn.plain.ids);
      expect(tokenizer.decode(turn.plain.ids)).toContain('Task: find the key');
      expect(tokenizer.decode(turn.plain.ids).split('<|im_start|>user').length - 1).toBeLessThanOrEqual(2);
    }
  });

  it('works with a template that trims contents (the extension holds where the text does)', () => {
    const trimming = ChatTemplate.fromTokenizerConfig({ chat_template: TRIMMING_TEMPLATE }, 'trimming template');
    const rng = new Rng(3);
    const turns = play(rng, { ...settings(), template: trimming }, 4, () => 'plain words here');
    for (let t = 1; t < turns.length; t++) {
      const before = [...turns[t - 1].plain.ids, ...turns[t - 1].response];
      expect(turns[t].plain.ids.slice(0, before.length)).toEqual(before);
    }
  });

  it('refuses a template that drops or repeats the user message', () => {
    const dropping = ChatTemplate.fromTokenizerConfig(
      { chat_template: "{% for m in messages %}{{ m['role'] }}{% endfor %}" },
      'dropping template',
    );
    const d = startDialogue(tokenizer, { ...settings(), template: dropping }, { task: 'T', observation: 'o', validActions: [] });
    expect(() => d.prompt()).toThrow(/dropping template: the chat template must render the user message once/);
  });
});

describe("Reflexion's plans in the prompt", () => {
  const plans: PastReflection[] = [
    { trial: 2, plan: 'Plan: open the blue box first.' },
    { trial: 3, plan: '  I should read the note, then open the box it names.\n' },
  ];
  const BLOCK =
    'Your memory for the task below:\nTrial 2:\nPlan: open the blue box first.\nTrial 3:\nI should read the note, then open the box it names.\nHere is the task:\n';
  const imEnd = tokenizer.tokenToId('<|im_end|>')!;

  /** The decoded prompts of a three-step episode with `plans`, tips in every turn, and whether the tips still cut out exactly. */
  function episode(s: PromptSettings, reflections: readonly PastReflection[]): string[] {
    const d = startDialogue(tokenizer, s, {
      task: 'find the candle',
      observation: 'You are in the attic.',
      validActions: ['go to porch'],
      reflections,
    });
    const prompts: string[] = [];
    for (const [action, next] of [
      ['go to porch', 'You are on the porch.'],
      ['open box', 'The box is empty.'],
      ['look around', 'Nothing new.'],
    ]) {
      const tipped = d.prompt(['tip one']);
      expect(removeTips(tipped.ids, tipped.tipSpan)).toEqual(d.prompt().ids);
      prompts.push(tokenizer.decode(tipped.ids));
      d.advance({ tokens: [...tokenizer.encode(action), imEnd], text: action }, action, next, ['look around']);
    }
    return prompts;
  }

  it('plain style: the plans open the first kept user turn, before the task, in every prompt of the episode', () => {
    const prompts = episode({ history: 1, showValidActions: false, system: '' }, plans);
    expect(prompts[0]).toBe(
      `<|im_start|>user\n${BLOCK}Task: find the candle\nYou are in the attic.\n\nMemories from your earlier exploration of this task:\n<tip> tip one </tip>\n\n<|im_end|>\n<|im_start|>assistant\n`,
    );
    // A history of one turn drops the attic turn, never the task and the plans before it.
    expect(prompts[2].startsWith(`<|im_start|>user\n${BLOCK}Task: find the candle\nYou are on the porch.<|im_end|>\n`)).toBe(true);
    for (const p of prompts) expect(p.split('Your memory for the task below:')).toHaveLength(2);
    // No plans: no block.
    for (const p of episode({ history: 1, showValidActions: false, system: '' }, [])) expect(p).not.toContain('Your memory');
  });

  it("instruct style: the plans open the first user message of the model's chat template, and later prompts still extend earlier ones", () => {
    const template = ChatTemplate.fromTokenizerConfig({ chat_template: SMOLLM2_TEMPLATE }, 'test template');
    const s: PromptSettings = { history: null, showValidActions: true, system: 'Be brief.', template };
    const prompts = episode(s, plans);
    expect(prompts[0]).toBe(
      `<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n${BLOCK}Task: find the candle\n\nYou are in the attic.\n\nValid actions: go to porch` +
        '\n\nMemories from your earlier exploration of this task:\n<tip> tip one </tip>\n\n<|im_end|>\n<|im_start|>assistant\n',
    );
    for (const p of prompts) expect(p.split('Your memory for the task below:')).toHaveLength(2);
    // Token-in/token-out: each prompt (without tips) begins with the previous one.
    const d = startDialogue(tokenizer, s, { task: 'T', observation: 'o', validActions: [], reflections: plans });
    const first = d.prompt().ids;
    const response = [...tokenizer.encode('look around'), imEnd];
    d.advance({ tokens: response, text: 'look around' }, 'look around', 'next', []);
    expect(d.prompt().ids.slice(0, first.length + response.length)).toEqual([...first, ...response]);
  });
});

describe('parseAction: the action in a free-text answer', () => {
  it.each([
    ['go to kitchen', 'go to kitchen'],
    ['  Go to kitchen.\n', 'Go to kitchen'],
    ['Action: open red box', 'open red box'],
    ['**Action:** take key\nBecause the key opens the door.', 'take key'],
    ['"look around"', 'look around'],
    ['\n\n`inventory`', 'inventory'],
    ['', ''],
  ])('%j -> %j', (answer, action) => {
    expect(parseAction(answer)).toBe(action);
  });

  it("fills the one free slot (WebShop's search page) with an answer that is not an action of that form", () => {
    const search = ['search[<your query>]'];
    expect(parseAction('red pillows under 30 dollars', search)).toBe('search[red pillows under 30 dollars]');
    expect(parseAction('Action: search[red pillows]', search)).toBe('search[red pillows]');
    expect(parseAction('a [weird] query', search)).toBe('search[a  weird  query]');
    expect(parseAction('', search)).toBe('');
    // Not when a listed action was chosen, another form was written, or there is no single slot.
    expect(parseAction('click[back to search]', [...search, 'click[back to search]'])).toBe('click[back to search]');
    expect(parseAction('click[item 3]', search)).toBe('click[item 3]');
    expect(parseAction('red pillows', ['click[buy now]', 'click[back to search]'])).toBe('red pillows');
    expect(parseAction('go to kitchen', ['go to kitchen', 'look around'])).toBe('go to kitchen');
  });
});
