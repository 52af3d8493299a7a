import { describe, expect, it } from 'vitest';
import { sampleCorpus } from '../envs/builtin/index.ts';
import { Tokenizer, trainByteLevelBPE } from '../policy/tokenizer.ts';
import { Rng } from '../util/rng.ts';
import { CHAT_SPECIAL_TOKENS, encodePrompt, removeTips, renderPrompt, renderTipBlock, TIP_CLOSE, TIP_OPEN, type PromptSettings, type Turn } from './prompt.ts';

const tokenizer = Tokenizer.fromJSON(trainByteLevelBPE(sampleCorpus(60), { vocabSize: 400, specialTokens: CHAT_SPECIAL_TOKENS }), 'test tokenizer');

const PIECES = [
  'You are in the kitchen.', 'A door leads to the attic.', 'open red box', ' ', '\n', '\n\n', 'ü', '漢字', '  spaced  ',
  TIP_OPEN, TIP_CLOSE, '<tip', 'tip>', '</', '<|im_end|>', '<|im_start|>assistant\n', '<|endoftext|>', 'Memories from your earlier exploration of this task:',
  'The action you took was go to attic; you finally scored 40/100.', '0', '100/100', '"quoted"', 'tab\there',
];

function randomText(rng: Rng, maxPieces: number): string {
  const n = rng.int(maxPieces + 1);
  let s = '';
  for (let i = 0; i < n; i++) s += rng.pick(PIECES);
  return s;
}

describe('tips in the prompt (spec §3-4)', () => {
  it('cutting the tip span out gives exactly the tip-free ids, for random prompts and tips (marker-like text included)', () => {
    const rng = new Rng(2024);
    for (let trial = 0; trial < 300; trial++) {
      const turns: Turn[] = [];
      const nTurns = 1 + rng.int(5);
      for (let i = 0; i < nTurns; i++) turns.push({ observation: randomText(rng, 4), action: i < nTurns - 1 ? randomText(rng, 2) : undefined });
      const settings: PromptSettings = { history: rng.pick([0, 1, 2, null]), showValidActions: rng.next() < 0.5, system: rng.next() < 0.3 ? randomText(rng, 2) : '' };
      const valid = [randomText(rng, 2), randomText(rng, 2)];
      const task = randomText(rng, 3);
      const tips = Array.from({ length: 1 + rng.int(4) }, () => randomText(rng, 5));
      const plain = encodePrompt(tokenizer, task, turns, valid, settings);
      const withTips = encodePrompt(tokenizer, task, turns, valid, settings, tips);
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
      expect(encodePrompt(tokenizer, 'task', turns, [], s).ids).toEqual(tokenizer.encode(renderPrompt('task', turns, [], s)));
    }
  });

  it('tips go into the current user turn only, between the header line and the end of the turn', () => {
    const turns: Turn[] = [{ observation: 'first', action: 'look around' }, { observation: 'second' }];
    const s: PromptSettings = { history: null, showValidActions: false, system: '' };
    const ids = encodePrompt(tokenizer, 'T', turns, [], s, ['tip one', 'tip two']).ids;
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
