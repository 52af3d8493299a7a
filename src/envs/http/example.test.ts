/**
 * examples/http-env/server.py, the guide's runnable example (Python standard library only),
 * speaks the protocol this client expects: episodes solved through HttpEnv reach score 100, its
 * errors come back as environment errors, and no instance stays open on it afterwards.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createHttpEnv } from './index.ts';

const SERVER = fileURLToPath(new URL('../../../examples/http-env/server.py', import.meta.url));
const PYTHON = 'python3';
const hasPython = spawnSync(PYTHON, ['--version']).status === 0;
if (!hasPython) console.warn(`example.test.ts: skipped, no ${PYTHON} on PATH to run ${SERVER}`);

describe.skipIf(!hasPython)('examples/http-env/server.py', () => {
  let child: ChildProcess;
  let url = '';

  beforeAll(async () => {
    child = spawn(PYTHON, [SERVER, '--port', '0'], { stdio: ['ignore', 'pipe', 'inherit'] });
    const lines = createInterface({ input: child.stdout! });
    url = await new Promise<string>((resolve, reject) => {
      child.once('exit', (code) => reject(new Error(`${SERVER} exited with ${code} before listening`)));
      lines.on('line', (line) => {
        const m = /^listening on (http:\/\/\S+)$/.exec(line);
        if (m) resolve(m[1]);
      });
    });
  });
  afterAll(() => {
    child?.kill();
  });

  const openOnServer = async () => (await (await fetch(`${url}/list_envs`)).json()) as number[];

  it('plays solved episodes to score 100 and leaves no instance open', async () => {
    const env = await createHttpEnv({ base_url: url, tasks: ['unlock'], variations: { train: '0-47', test: '56-63' }, max_steps: 12 });
    try {
      for (const index of [0, 5, 21, 63]) {
        const first = await env.reset('unlock', index);
        const colour = /open the (\w+) door/.exec(first.task)![1];
        // A scripted player: visit rooms until the key is taken and the door opened.
        let valid = first.validActions;
        let result;
        const rooms = ['kitchen', 'study', 'garden', 'cellar'];
        for (let i = 0; !env.done(); i++) {
          const action =
            valid.find((a) => a === 'take key') ??
            (env.score() > 0 ? valid.find((a) => a === `open ${colour} door`) : undefined) ??
            `go to ${rooms[i % rooms.length]}`;
          result = await env.step(valid.includes(action) ? action : 'look');
          valid = result.validActions;
        }
        expect(result).toMatchObject({ done: true, score: 100 });
        expect(result!.info?.outcome).toBe('success');
      }
      // An unfinished episode, then the env closes.
      await env.reset('unlock', 7);
      await env.step('take key');
      expect(await openOnServer()).toHaveLength(1);
    } finally {
      await env.close();
    }
    expect(await openOnServer()).toEqual([]);
  });

  it("answers a bad request as AgentGym's servers do, which ends the episode as an environment error", async () => {
    const env = await createHttpEnv(
      {
        base_url: url,
        tasks: ['unlock'],
        variations: { train: '0-47' },
        max_steps: 5,
        reset_body: { data_idx_typo: 1 },
        index_field: 'wrong_index',
      },
      {},
      { warn: () => {} },
    );
    try {
      const first = await env.reset('unlock', 0);
      expect(first.info).toMatchObject({ outcome: 'simulator_error' });
      expect(String(first.info?.simulatorError)).toMatch(/POST .*\/reset: the server reported an error: "data_idx"/);
    } finally {
      await env.close();
    }
    expect(await openOnServer()).toEqual([]);
  });
});
