/**
 * Tasks files (`empo2 train --agent --tasks`): every line a JSON value, a bad one named by its number
 * before the run starts (issue #90: line 7 of a probe, `{"word": "table"`, reached the agent as a
 * string), bytes that are not UTF-8 named by line, and `--tasks-as-text` for plain-text lines.
 */
import { describe, expect, it } from 'vitest';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { TINY_MODEL } from '../../test/support/tiny.ts';
import { firstNonUtf8Byte, readTasksFile } from './tasks-file.ts';

function withFile(content: string | Buffer, f: (file: string) => void): void {
  const root = mkdtempSync(join(tmpdir(), 'empo2-tasks-file-'));
  try {
    const file = join(root, 'tasks.jsonl');
    writeFileSync(file, content);
    f(file);
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
}

const PROBE = [
  '{"word": "apple"}',
  '{"word": "river"}',
  '',
  '"a string task"',
  '{"word": "stone"}',
  '{"word": "pear"}',
  '{"word": "table"',
];

describe('readTasksFile', () => {
  it('reads one JSON value per line, skipping blank lines (CRLF and a BOM too)', () => {
    withFile('\uFEFF{"word": "apple"}\r\n\r\n"plain"\r\n42\n', (file) => {
      expect(readTasksFile(file, { flag: '--tasks' })).toEqual([{ word: 'apple' }, 'plain', 42]);
    });
  });

  it('names the line that is not valid JSON, with its text, and stops', () => {
    withFile(PROBE.join('\n') + '\n', (file) => {
      expect(() => readTasksFile(file, { flag: '--tasks' })).toThrow(
        new RegExp(
          `^--tasks: ${file.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')} line 7 is not valid JSON \\(.*\\): \\{"word": "table"\\n.*--tasks-as-text`,
        ),
      );
    });
  });

  it('counts blank lines in the line number, as an editor does', () => {
    withFile('{"a": 1}\n\n\nnot json\n', (file) => {
      expect(() => readTasksFile(file, { flag: '--eval-tasks' })).toThrow(/^--eval-tasks: .* line 4 is not valid JSON/);
    });
  });

  it('takes every line as a text task with asText (--tasks-as-text)', () => {
    withFile('What is 2 + 2?\n{"word": "table"\n\n  "quoted"  \n', (file) => {
      expect(readTasksFile(file, { flag: '--tasks', asText: true })).toEqual(['What is 2 + 2?', '{"word": "table"', '"quoted"']);
    });
  });

  it('names the line of a byte that is not UTF-8, in either mode, instead of reading U+FFFD', () => {
    const bytes = Buffer.concat([Buffer.from('{"word": "apple"}\n"café"\n"ab'), Buffer.from([0xff]), Buffer.from('c"\n')]);
    withFile(bytes, (file) => {
      for (const asText of [false, true])
        expect(() => readTasksFile(file, { flag: '--tasks', asText })).toThrow(
          /^--tasks: .* line 3 is not UTF-8 text \(its byte 4 is not part of a UTF-8 character\); save the file as UTF-8$/,
        );
    });
  });

  it('refuses a missing file, a folder and a file without tasks', () => {
    expect(() => readTasksFile('/nonexistent/tasks.jsonl', { flag: '--tasks' })).toThrow('--tasks: no file /nonexistent/tasks.jsonl');
    expect(() => readTasksFile(tmpdir(), { flag: '--tasks' })).toThrow('is not a file');
    withFile('\n  \n', (file) => expect(() => readTasksFile(file, { flag: '--tasks' })).toThrow('holds no task'));
  });
});

describe('firstNonUtf8Byte', () => {
  const at = (bytes: number[]) => firstNonUtf8Byte(Uint8Array.from(bytes));
  it('accepts UTF-8 up to U+10FFFF and finds cut, overlong, surrogate and out-of-range sequences', () => {
    expect(firstNonUtf8Byte(Buffer.from('a\né€😀\n\u{10FFFF}'))).toBeNull();
    expect(at([0x61, 0x0a, 0x62, 0xc3])).toEqual({ line: 2, column: 2 }); // cut at the end
    expect(at([0xc0, 0xaf])).toEqual({ line: 1, column: 1 }); // overlong '/'
    expect(at([0xe0, 0x80, 0xaf])).toEqual({ line: 1, column: 1 }); // overlong
    expect(at([0x61, 0xed, 0xa0, 0x80])).toEqual({ line: 1, column: 2 }); // a surrogate
    expect(at([0xf4, 0x90, 0x80, 0x80])).toEqual({ line: 1, column: 1 }); // past U+10FFFF
    expect(at([0x0a, 0x0a, 0xe2, 0x82, 0x61])).toEqual({ line: 3, column: 1 }); // a continuation byte missing
  });
});

describe('empo2 train --agent with a bad tasks file', () => {
  it('stops before the run starts, naming the line, with exit status 1', () => {
    const root = mkdtempSync(join(tmpdir(), 'empo2-tasks-cli-'));
    try {
      writeFileSync(join(root, 'tasks.jsonl'), PROBE.join('\n') + '\n');
      const main = resolve(import.meta.dirname, '..', 'cli', 'main.ts');
      const args = ['train', '--agent', 'true', '--tasks', join(root, 'tasks.jsonl'), '--run-dir', join(root, 'run')];
      const r = spawnSync(process.execPath, ['--import', 'tsx', main, ...args, ...TINY_MODEL.flatMap((s) => ['--set', s])], {
        encoding: 'utf8',
        timeout: 120_000,
      });
      expect(r.status).toBe(1);
      expect(r.stderr).toMatch(/^empo2: --tasks: .*tasks\.jsonl line 7 is not valid JSON/);
      expect(r.stdout).not.toContain('gateway:');
      expect(existsSync(join(root, 'run'))).toBe(false);
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  }, 180_000);
});
