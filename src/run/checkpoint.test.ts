import { existsSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { latestCheckpoint, saveCheckpoint } from './checkpoint.ts';

describe('saveCheckpoint', () => {
  it("copies the base model's chat template and side files the policy writer did not write, so a checkpoint stands alone", async () => {
    const root = mkdtempSync(join(tmpdir(), 'empo2-ckpt-'));
    const base = join(root, 'base');
    mkdirSync(base);
    writeFileSync(join(base, 'tokenizer_config.json'), '{"chat_template": "{{ messages }}"}');
    writeFileSync(join(base, 'generation_config.json'), '{"from": "base"}');
    const run = join(root, 'run');
    // A policy writer that writes its own generation_config.json (as the torch worker does): that one is kept.
    const writer = {
      writePolicy: async (dir: string) => {
        mkdirSync(dir, { recursive: true });
        writeFileSync(join(dir, 'generation_config.json'), '{"from": "writer"}');
      },
    };
    const state = { iteration: 1, envSteps: 10, rngState: [1, 2, 3, 4], elapsedSeconds: 1 };
    const dir = await saveCheckpoint(run, { writer, state: state as never, baseModelDir: base }, 3);
    expect(latestCheckpoint(run)).toBe(dir);
    expect(readFileSync(join(dir, 'tokenizer_config.json'), 'utf8')).toContain('chat_template');
    expect(readFileSync(join(dir, 'generation_config.json'), 'utf8')).toContain('writer');
    expect(existsSync(join(dir, 'chat_template.jinja'))).toBe(false);
    // Without a base model (the tiny default) nothing is copied.
    const tiny = await saveCheckpoint(join(root, 'tiny'), { writer, state: state as never }, 3);
    expect(existsSync(join(tiny, 'tokenizer_config.json'))).toBe(false);
  });
});
