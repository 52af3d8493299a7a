import { afterAll, describe, expect, it } from 'vitest';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { PlayedChunk } from '../trainer/rollout.ts';
import { EvalPartial } from './eval-partial.ts';

const dir = mkdtempSync(join(tmpdir(), 'empo2-eval-partial-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

// Chunks without episodes: the timing does not look inside them.
const chunk = (start: number) => ({ start, episodes: [], stats: {} }) as unknown as PlayedChunk;

describe('EvalPartial seconds', () => {
  it('earlier seconds are those of earlier sessions only, not the chunks this session records', () => {
    const path = join(dir, 'eval.json.partial');
    const identity = { seed: 0 };
    const first = EvalPartial.open(path, identity, { resume: true, log: () => {} });
    first.record(chunk(0), 100, null);
    first.record(chunk(4), 50, null);
    // The session that played both chunks adds nothing from before (its own time is its wall clock).
    expect(first.earlierSeconds).toBe(0);
    const second = EvalPartial.open(path, identity, { resume: true, log: () => {} });
    expect(second.done.map((c) => c.start)).toEqual([0, 4]);
    expect(second.earlierSeconds).toBe(150);
    second.record(chunk(8), 20, null);
    expect(second.earlierSeconds).toBe(150);
    expect(EvalPartial.open(path, identity, { resume: true, log: () => {} }).earlierSeconds).toBe(170);
  });
});
