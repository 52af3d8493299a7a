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
if (how === 'busy') {
  // Like a long prefill: the thread held 1 s at a time, the event loop turned once between. Each turn
  // says whether the SIGTERM handler of ./instances.ts is still installed (it removes itself when it runs).
  for (;;) {
    const until = Date.now() + 1000;
    while (Date.now() < until);
    await new Promise((resolve) => setImmediate(resolve));
    console.log(\`turn: \${process.listenerCount('SIGTERM')} SIGTERM listeners\`);
  }
}
setInterval(() => {}, 1000); // wait for the signal
`;

async function runChild(
  url: string,
  how: 'exit' | 'SIGTERM' | 'SIGHUP' | 'busy',
): Promise<{ code: number | null; signal: NodeJS.Signals | null; stdout: string }> {
  const script = join(dir, 'child.mts');
  writeFileSync(script, CHILD);
  const child = spawn(process.execPath, ['--import', 'tsx', script, url, how], { stdio: ['ignore', 'pipe', 'inherit'] });
  let stdout = '';
  child.stdout!.on('data', (d: Buffer) => {
    stdout += d.toString();
    if (!d.toString().includes('ready') || how === 'exit') return;
    // A busy child is signalled in the middle of its first held stretch.
    setTimeout(() => child.kill(how === 'busy' ? 'SIGTERM' : how), how === 'busy' ? 500 : 0);
  });
  return new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal, stdout })));
}

describe('instances open when the process ends', () => {
  for (const how of ['exit', 'SIGTERM', 'SIGHUP'] as const) {
    it(`are closed on ${how === 'exit' ? 'process.exit()' : how}`, { timeout: 60_000 }, async () => {
      const server = await TestEnvServer.start();
      try {
        const ended = await runChild(server.url, how);
        expect(ended).toMatchObject(how === 'exit' ? { code: 3, signal: null } : { code: null, signal: how });
        expect(server.created).toBe(1);
        expect(server.requests.filter((r) => r.path === '/close').map((r) => r.body)).toEqual([{ id: 0 }]);
        expect(server.openInstances).toBe(0);
      } finally {
        await server.stop();
      }
    });
  }

  it(
    'are closed on SIGTERM while the thread is held in stretches (a long prompt): at the turn that handles it',
    { timeout: 60_000 },
    async () => {
      const server = await TestEnvServer.start();
      try {
        const ended = await runChild(server.url, 'busy');
        expect(ended).toMatchObject({ code: null, signal: 'SIGTERM' });
        // Its handler ran at a turn and the process ended there: no turn ran after the handler had gone,
        // as turns do while close requests sent from this process wait for them.
        const turns = ended.stdout.split('\n').filter((l) => l.startsWith('turn: '));
        expect(turns.length).toBeGreaterThan(0);
        expect(turns).not.toContain('turn: 0 SIGTERM listeners');
        expect(server.requests.filter((r) => r.path === '/close').map((r) => r.body)).toEqual([{ id: 0 }]);
        expect(server.openInstances).toBe(0);
      } finally {
        await server.stop();
      }
    },
  );
});
