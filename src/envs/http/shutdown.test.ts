/**
 * Instances still open when the process ends are closed (./instances.ts): a child process opens
 * one on the test server and then exits with process.exit() or is sent SIGTERM/SIGHUP; the server
 * must see the close, and a signalled child must still end by that signal.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { TestEnvServer } from '../../../test/support/http-env-server.ts';

const dir = mkdtempSync(join(tmpdir(), 'empo2-http-shutdown-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const INDEX = pathToFileURL(fileURLToPath(new URL('./index.ts', import.meta.url))).href;

const CHILD = `
import { createHttpEnv } from ${JSON.stringify(INDEX)};
const [url, how] = process.argv.slice(2);
const env = await createHttpEnv({ base_url: url, tasks: ['find'], variations: { train: '0-9' }, max_steps: 5 });
await env.reset('find', 1);
console.log('ready');
if (how === 'exit') process.exit(3);
setInterval(() => {}, 1000); // wait for the signal
`;

async function runChild(url: string, how: 'exit' | 'SIGTERM' | 'SIGHUP'): Promise<{ code: number | null; signal: NodeJS.Signals | null }> {
  const script = join(dir, 'child.mts');
  writeFileSync(script, CHILD);
  const child = spawn(process.execPath, ['--import', 'tsx', script, url, how], { stdio: ['ignore', 'pipe', 'inherit'] });
  child.stdout!.on('data', (d: Buffer) => {
    if (d.toString().includes('ready') && how !== 'exit') child.kill(how);
  });
  return new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
}

describe('instances open when the process ends', () => {
  for (const how of ['exit', 'SIGTERM', 'SIGHUP'] as const) {
    it(`are closed on ${how === 'exit' ? 'process.exit()' : how}`, { timeout: 60_000 }, async () => {
      const server = await TestEnvServer.start();
      try {
        const ended = await runChild(server.url, how);
        expect(ended).toEqual(how === 'exit' ? { code: 3, signal: null } : { code: null, signal: how });
        expect(server.created).toBe(1);
        expect(server.requests.filter((r) => r.path === '/close').map((r) => r.body)).toEqual([{ id: 0 }]);
        expect(server.openInstances).toBe(0);
      } finally {
        await server.stop();
      }
    });
  }
});
