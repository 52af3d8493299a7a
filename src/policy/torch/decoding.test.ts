/**
 * The PyTorch worker's batched decoding pieces (workers/torch/decoding.py) against plain references,
 * on random cases run by workers/torch/check_decoding.py: the top-p nucleus found among the top-k
 * against a full stable sort of the vocabulary, the inverse-CDF draw against its probabilities, the
 * flattened token tries against a dict trie walked from the root, and incremental stop-string
 * matching against the tokenizer's decoding of the whole response, on a byte-level BPE tokenizer
 * trained here with multi-byte text.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pythonGate, runPython, REPO_ROOT } from '../../../test/support/python.ts';
import { trainByteLevelBPE, Tokenizer } from '../tokenizer.ts';
import { CHAT_SPECIAL_TOKENS } from '../chat-tokens.ts';

const gate = pythonGate(['torch', 'tokenizers', 'transformers']);
const SCRIPT = join(REPO_ROOT, 'workers', 'torch', 'check_decoding.py');
const dir = mkdtempSync(join(tmpdir(), 'empo2-decoding-'));

afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe.skipIf(!gate.available)(`batched decoding in the torch worker (${gate.label})`, () => {
  it('nucleus, draw, tries and stop strings agree with their references', async () => {
    const corpus = ['café → naïve', 'the red box', 'go to kitchen', '日本語のテキスト', 'You take the yellow hat.\n\nThe box is open.'];
    const path = join(dir, 'tokenizer.json');
    Tokenizer.fromJSON(trainByteLevelBPE(corpus, { vocabSize: 330, specialTokens: CHAT_SPECIAL_TOKENS }), 'decoding test').save(path);
    const r = JSON.parse(await runPython(SCRIPT, [path]));
    expect(r.nucleus).toEqual({ cases: 300, mismatches: 0 });
    // 200,000 draws: the standard error of a frequency is at most 0.0011.
    expect(r.draw.max_abs_error).toBeLessThan(0.005);
    expect(r.draw.zero_probability_draws).toBe(0);
    expect(r.tries.mismatches).toBe(0);
    expect(r.tries.steps).toBeGreaterThan(500);
    expect(r.stops.byte_table).toBe(true);
    for (const kind of ['bytes', 'stream']) {
      expect(r.stops[kind].mismatches, kind).toBe(0);
      expect(r.stops[kind].hits, kind).toBeGreaterThan(50);
    }
  }, 300_000);
});
