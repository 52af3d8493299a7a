import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadConfig } from '../config/load.ts';
import { initBackend } from '../policy/tfjs/backend.ts';
import { saveModelDir } from '../policy/tfjs/checkpoint.ts';
import { createEngine } from '../policy/create-engine.ts';
import { environmentCorpus } from '../envs/index.ts';
import { REPO_ROOT } from '../../test/support/python.ts';
import { TINY_MODEL } from '../../test/support/tiny.ts';
import { checkOutputDir, checkOutputFile } from './output-paths.ts';

const root = mkdtempSync(join(tmpdir(), 'empo2-output-paths-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

describe('output paths are checked before the work', () => {
  it('a file: its folder must exist, and it must not be a folder', () => {
    expect(() => checkOutputFile('/nonexistent/dir/x.json', '--json')).toThrow(
      '--json /nonexistent/dir/x.json: the folder /nonexistent/dir does not exist',
    );
    expect(() => checkOutputFile(root, '--json')).toThrow(`--json ${root}: is a folder; give a file name`);
    const file = join(root, 'plain-file');
    writeFileSync(file, '');
    expect(() => checkOutputFile(join(file, 'x.json'), '--json')).toThrow(`${file} is not a folder`);
    expect(() => checkOutputFile(join(root, 'x.json'), '--json')).not.toThrow();
    expect(() => checkOutputFile(file, '--json')).not.toThrow(); // replaced
  });

  it('a folder: may be missing (it is created), but not under a file', () => {
    expect(() => checkOutputDir(join(root, 'new', 'deeper'), '--out')).not.toThrow();
    const file = join(root, 'a-file');
    writeFileSync(file, '');
    expect(() => checkOutputDir(join(file, 'sub'), '--out')).toThrow(`--out ${join(file, 'sub')}: ${file} is a file, not a folder`);
    expect(() => checkOutputDir(file, '--out')).toThrow('is a file, not a folder');
  });

  describe('empo2 eval --json into a folder that does not exist', () => {
    let modelDir: string;
    beforeAll(async () => {
      await initBackend();
      modelDir = join(root, 'model');
      mkdirSync(modelDir);
      const cfg = loadConfig(null, [`run_dir=${root}`, ...TINY_MODEL]);
      const { engine } = await createEngine(cfg, 'fresh', () => environmentCorpus(cfg.env));
      await saveModelDir(modelDir, engine.model, engine.tokenizer);
      engine.dispose();
    });

    it('fails before evaluating, naming the option and the folder', async () => {
      const args = ['eval', modelDir, '--json', '/nonexistent/dir/x.json', ...TINY_MODEL.flatMap((s) => ['--set', s])];
      const child = spawn(process.execPath, [join(REPO_ROOT, 'bin', 'empo2.js'), ...args], {
        cwd: REPO_ROOT,
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let out = '';
      let err = '';
      child.stdout.on('data', (d: Buffer) => (out += d.toString()));
      child.stderr.on('data', (d: Buffer) => (err += d.toString()));
      const code = await new Promise<number | null>((r) => child.on('exit', (c) => r(c)));
      expect(code).toBe(1);
      expect(err).toContain('empo2: --json /nonexistent/dir/x.json: the folder /nonexistent/dir does not exist');
      expect(out).not.toContain('Held-out evaluation');
    }, 60_000);
  });
});
