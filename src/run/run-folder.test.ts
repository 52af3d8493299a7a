/**
 * `--run-dir` names a folder a run writes into: a new one, an empty one or an earlier run's. Any other
 * folder (`/etc`, a home folder, a project's tree) is refused by name before anything is written into it.
 */
import { mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../config/load.ts';
import { train } from '../trainer/trainer.ts';
import { TINY_RUN } from '../../test/support/tiny.ts';
import { checkRunFolder } from './run-folder.ts';

const root = mkdtempSync(join(tmpdir(), 'empo2-run-folder-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

/** A folder holding `files` (a trailing slash makes a folder). */
function folder(name: string, files: Record<string, string>): string {
  const dir = join(root, name);
  mkdirSync(dir, { recursive: true });
  for (const [file, text] of Object.entries(files)) {
    if (file.endsWith('/')) mkdirSync(join(dir, file), { recursive: true });
    else writeFileSync(join(dir, file), text);
  }
  return dir;
}

describe('the run folder', () => {
  it('train() refuses a non-empty folder that is not a run, naming it, and writes nothing into it', async () => {
    const dir = folder('not-a-run', { passwd: 'root:x:0:0', hosts: '127.0.0.1 localhost', 'apt/': '' });
    const before = readdirSync(dir).sort();
    const cfg = loadConfig(null, [`run_dir=${dir}`, ...TINY_RUN, 'train.iterations=1']);
    await expect(train(cfg, { resume: false, log: () => {} })).rejects.toThrow(
      `run_dir ${dir} holds 3 entries (apt, hosts, passwd) and no empo2 run`,
    );
    expect(readdirSync(dir).sort()).toEqual(before);
    await expect(train(cfg, { resume: true, log: () => {} })).rejects.toThrow(/no empo2 run/);
    expect(readdirSync(dir).sort()).toEqual(before);
  });

  it('accepts a folder that does not exist, an empty one, and one an earlier run wrote', () => {
    expect(() => checkRunFolder(join(root, 'new', 'deeper'))).not.toThrow();
    expect(() => checkRunFolder(folder('empty', {}))).not.toThrow();
    for (const [name, files] of [
      ['locked', { 'run.lock': '{}' }],
      ['metrics', { 'metrics.jsonl': '' }],
      ['abandoned', { 'metrics.jsonl.abandoned': '' }],
      ['torch-start', { 'initial-model/': '' }],
      ['torch-killed', { 'initial-model.tmp-1234/': '' }],
      ['configured', { 'config.yaml': 'run_dir: runs/x\nseed: 3\nmodel:\n  hidden_size: 32\n' }],
      ['compare-prepared', { 'compare-run.json': '{}', 'train.log': '# empo2 compare ...\n' }],
    ] as const)
      expect(() => checkRunFolder(folder(name, files)), name).not.toThrow();
  });

  it('does not take a config.yaml of something else, or a lone checkpoints folder, for a run', () => {
    expect(() => checkRunFolder(folder('other-config', { 'config.yaml': 'server:\n  port: 80\n' }))).toThrow(
      /holds 1 entry \(config\.yaml\) and no empo2 run/,
    );
    expect(() => checkRunFolder(folder('garbled-config', { 'config.yaml': ': : [' }))).toThrow(/no empo2 run/);
    expect(() => checkRunFolder(folder('checkpoints-only', { 'checkpoints/': '' }))).toThrow(/no empo2 run/);
    const many = folder('many', Object.fromEntries(Array.from({ length: 30 }, (_, i) => [`f${String(i).padStart(2, '0')}`, ''])));
    expect(() => checkRunFolder(many)).toThrow(/holds 30 entries \(f00, f01, f02, f03, f04, f05, f06, f07, \.\.\.\) and no empo2 run/);
  });

  it('refuses a run_dir that is a file', () => {
    const file = join(root, 'a-file');
    writeFileSync(file, 'x');
    expect(() => checkRunFolder(file)).toThrow(`run_dir ${file} is a file, not a folder`);
  });
});
