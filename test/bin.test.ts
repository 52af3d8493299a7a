/**
 * bin/empo2.js's choice of what to run, on copies of it in folders of their own laid out as a clone or
 * as the installed package: the sources through tsx where both are there, dist/ where tsx is not (the
 * published package, or a clone installed with `npm ci --omit=dev` and built), and a clear refusal where
 * neither can run. The stand-in main files print which one ran.
 */
import { spawnSync } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

const ROOT = resolve(import.meta.dirname, '..');
const work = mkdtempSync(join(tmpdir(), 'empo2-bin-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));

/** A folder with the real bin and the given parts: src/ (TypeScript only tsx can run), dist/, tsx. */
function layout(name: string, parts: { src?: boolean; dist?: boolean; tsx?: boolean }): string {
  const dir = join(work, name);
  mkdirSync(join(dir, 'bin'), { recursive: true });
  writeFileSync(join(dir, 'package.json'), JSON.stringify({ type: 'module' }));
  copyFileSync(join(ROOT, 'bin/empo2.js'), join(dir, 'bin/empo2.js'));
  if (parts.src) {
    mkdirSync(join(dir, 'src/cli'), { recursive: true });
    writeFileSync(join(dir, 'src/cli/main.ts'), "const ran: string = 'source';\nconsole.log(ran, process.argv.slice(2).join(' '));\n");
  }
  if (parts.dist) {
    mkdirSync(join(dir, 'dist/cli'), { recursive: true });
    writeFileSync(join(dir, 'dist/cli/main.js'), "console.log('dist', process.argv.slice(2).join(' '));\n");
  }
  if (parts.tsx) {
    mkdirSync(join(dir, 'node_modules'));
    symlinkSync(join(ROOT, 'node_modules/tsx'), join(dir, 'node_modules/tsx'));
  }
  return dir;
}

function empo2(dir: string) {
  const r = spawnSync(process.execPath, [join(dir, 'bin/empo2.js'), 'train', '--help'], {
    cwd: work,
    encoding: 'utf8',
    env: { ...process.env, NODE_OPTIONS: '' },
  });
  return { code: r.status, stdout: r.stdout.trim(), stderr: r.stderr.trim() };
}

describe('bin/empo2.js', () => {
  it('runs the sources through tsx in a clone with its dev dependencies, even beside a build', () => {
    expect(empo2(layout('clone', { src: true, dist: true, tsx: true }))).toEqual({ code: 0, stdout: 'source train --help', stderr: '' });
  });

  it('runs dist/ with plain node where there is no src/, as in the published package', () => {
    expect(empo2(layout('package', { dist: true }))).toEqual({ code: 0, stdout: 'dist train --help', stderr: '' });
  });

  it('runs dist/ in a built clone installed without dev dependencies (no tsx)', () => {
    expect(empo2(layout('clone-no-dev', { src: true, dist: true }))).toEqual({ code: 0, stdout: 'dist train --help', stderr: '' });
  });

  it('refuses, saying what to do, a clone with neither tsx nor a build', () => {
    const r = empo2(layout('clone-bare', { src: true }));
    expect(r.code).toBe(1);
    expect(r.stderr).toBe(
      'empo2: this clone has neither tsx (a dev dependency: run `npm ci` without --omit=dev) nor a build (`npm run build`)',
    );
  });

  it('refuses a package whose dist/ is missing, naming the file', () => {
    const dir = layout('broken-package', {});
    expect(empo2(dir)).toEqual({
      code: 1,
      stdout: '',
      stderr: `empo2: ${join(dir, 'dist/cli/main.js')} is missing; reinstall the package`,
    });
  });
});
