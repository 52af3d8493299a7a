/**
 * The HTTP env against a real server (./test-server.ts) speaking AgentGym's protocol: what it
 * sends, what it makes of the answers, when instances are created and closed, the WebShop-shaped
 * dialect, and the option checks.
 */
import { createServer } from 'node:net';
import { describe, expect, it } from 'vitest';
import {
  createHttpEnv,
  HttpEnv,
  openInstanceCount,
  parseHttpEnvOptions,
  parseIndices,
  actionsInObservation,
  SEARCH_ACTION,
} from './index.ts';
import { FindGame, TestEnvServer } from '../../../test/support/http-env-server.ts';
import { useTestServers } from '../../../test/support/http-env-servers.ts';

const { serve, envs } = useTestServers();

async function envFor(server: TestEnvServer, options: Record<string, unknown> = {}): Promise<HttpEnv> {
  const env = await createHttpEnv(
    { base_url: server.url, tasks: ['find'], variations: { train: '0-19', dev: '20-24', test: [25, 26, 27] }, max_steps: 8, ...options },
    {},
    { warn: () => {} },
  );
  envs.push(env);
  return env;
}

/** The actions that solve data index `index` of the test game. */
function solution(index: number): string[] {
  const game = new FindGame(index);
  return [`go to ${game.target}`, `take ${game.item}`];
}

describe('HttpEnv against an AgentGym-shaped server', () => {
  it('plays an episode to success and closes its instance when it ends', async () => {
    const server = await serve();
    const env = await envFor(server);
    expect(env.tasks()).toEqual(['find']);
    expect(env.variations('find', 'train')).toHaveLength(20);
    expect(env.variations('find', 'test')).toEqual([25, 26, 27]);
    expect(env.maxSteps('find')).toBe(8);

    const first = await env.reset('find', 7);
    expect(first.task).toBe('Find the coin and take it.'); // index 7: item 7 % 5, room 1 + floor(7 / 5)
    expect(first.observation).toContain('You are in the hall.');
    expect(first.validActions).toContain('go to garden');
    expect(server.openInstances).toBe(1);

    const [move, take] = solution(7);
    const r1 = await env.step(move);
    expect(r1).toMatchObject({ reward: 0, score: 0, done: false });
    expect(r1.validActions).toContain(take);
    const r2 = await env.step(take);
    expect(r2).toMatchObject({ reward: 100, score: 100, done: true, validActions: [] });
    expect(r2.info?.outcome).toBe('success');
    expect(env.done()).toBe(true);
    expect(env.score()).toBe(100);
    expect(server.openInstances).toBe(0);
    expect(env.stats).toMatchObject({ created: 1, closed: 1, failedEpisodes: 0 });

    const sent = server.requests.filter((r) => r.path !== '/').map((r) => [r.method, r.path, r.body]);
    expect(sent).toEqual([
      ['POST', '/create', {}],
      ['POST', '/reset', { id: 0, data_idx: 7 }],
      ['POST', '/step', { id: 0, action: move }],
      ['POST', '/step', { id: 0, action: take }],
      ['POST', '/close', { id: 0 }],
    ]);
    await expect(env.step('look')).rejects.toThrow(/after the episode .* ended/);
  });

  it('cuts an episode at max_steps and closes its instance; an unfinished episode is closed at the next reset', async () => {
    const server = await serve();
    const env = await envFor(server, { max_steps: 2 });
    await env.reset('find', 0);
    expect((await env.step('look')).done).toBe(false);
    const last = await env.step('look');
    expect(last).toMatchObject({ done: true, reward: 0, score: 0 });
    expect(last.info).toMatchObject({ outcome: 'step_limit', truncated: true });
    expect(server.openInstances).toBe(0);

    await env.reset('find', 1);
    await env.step('look');
    expect(server.openInstances).toBe(1);
    await env.reset('find', 2);
    expect(server.openInstances).toBe(1);
    expect(server.created).toBe(3);
    await env.close();
    expect(server.openInstances).toBe(0);
    expect(openInstanceCount()).toBe(0);
  });

  it('env.max_steps and env.tasks override the options', async () => {
    const server = await serve();
    const options = { base_url: server.url, tasks: { find: { train: '0-9', max_steps: 5 }, other: { train: '10-19' } }, max_steps: 7 };
    const env = await createHttpEnv(options, { tasks: ['find'], maxSteps: 3 });
    envs.push(env);
    expect(env.tasks()).toEqual(['find']);
    expect(env.maxSteps('find')).toBe(3);
    expect(() => env.maxSteps('other')).toThrow(/unknown task "other"/);
    expect(() => env.variations('find', 'test')).toThrow(/no test split for task "find"/);
    await expect(env.reset('nope', 0)).rejects.toThrow(/unknown task "nope"/);
    await expect(env.reset('find', -1)).rejects.toThrow(/non-negative integer/);
  });

  it('with reuse_instance keeps one instance across episodes and closes it with the env', async () => {
    const server = await serve();
    const env = await envFor(server, { reuse_instance: true });
    for (let i = 0; i < 5; i++) {
      await env.reset('find', i);
      for (const a of solution(i)) await env.step(a);
      expect(env.score()).toBe(100);
    }
    expect(server.created).toBe(1);
    expect(server.openInstances).toBe(1);
    await env.close();
    await env.close();
    expect(server.openInstances).toBe(0);
  });

  it('sends the task name where task_field asks for it, and reset_body fields', async () => {
    const server = await serve();
    const env = await envFor(server, { task_field: 'task', reset_body: { world_type: 'Text' } });
    await env.reset('find', 3);
    expect(server.requests.find((r) => r.path === '/reset')?.body).toEqual({ world_type: 'Text', id: 0, data_idx: 3, task: 'find' });
  });

  it("speaks WebShop's dialect with preset webshop: bare ids, env_idx, session_id, state, clickables, no /close", async () => {
    const server = await serve({ dialect: 'webshop' });
    const env = await envFor(server, { preset: 'webshop' });
    for (let i = 0; i < 3; i++) {
      const first = await env.reset('find', i);
      expect(first.observation).toMatch(/^Find the \w+ and take it\. You are in the hall\./);
      expect(first.validActions).toContain('click[look]');
      let result;
      for (const a of solution(i)) result = await env.step(`click[${a}]`);
      expect(result).toMatchObject({ done: true, score: 100 });
    }
    // WebShop's server cannot close an instance, so the env keeps one and never asks.
    expect(server.created).toBe(1);
    expect(server.requests.some((r) => r.path === '/close')).toBe(false);
    expect(server.requests.find((r) => r.path === '/reset')?.body).toEqual({ env_idx: 0, session_id: 0 });
    expect(openInstanceCount()).toBe(0);
  });

  it('fails fast when nothing listens at base_url', async () => {
    const port = await freePort();
    await expect(
      createHttpEnv({
        base_url: `http://127.0.0.1:${port}`,
        tasks: ['t'],
        variations: { train: '0-1' },
        max_steps: 3,
        retries: 1,
        retry_backoff_ms: 1,
      }),
    ).rejects.toThrow(
      new RegExp(
        `cannot reach the environment server at http://127.0.0.1:${port} \\(env.options.base_url\\): GET .* could not reach the server \\(ECONNREFUSED`,
      ),
    );
  });
});

describe('actions from where each server family puts them', () => {
  it("reads BabyAI's list at the end of the observation", () => {
    const obs =
      'Your goal: go to the red ball\nIn front of you in this room, you can see several objects: ...\nAvailable actions: ["turn left", "turn right", "go to red ball 1", "check available actions"]';
    expect(actionsInObservation(obs)).toEqual(['turn left', 'turn right', 'go to red ball 1', 'check available actions']);
    expect(actionsInObservation('no list here')).toEqual([]);
    expect(actionsInObservation('Available actions: [not json]')).toEqual([]);
  });

  it("turns WebShop's search bar into an action with a slot", () => {
    expect(SEARCH_ACTION).toMatch(/<[^<>]+>/);
  });
});

describe('env.options checks', () => {
  const base = { base_url: 'http://127.0.0.1:1', tasks: ['t'], variations: { train: '0-9', test: '10-19' }, max_steps: 5 };
  const problem = (options: Record<string, unknown>, overrides = {}) => {
    try {
      parseHttpEnvOptions(options, overrides);
    } catch (e) {
      return (e as Error).message;
    }
    return 'no error';
  };

  it('accepts the documented forms', () => {
    const cfg = parseHttpEnvOptions({ ...base, base_url: 'http://host:36001/maze/' });
    expect(cfg.baseUrl).toBe('http://host:36001/maze');
    expect(cfg.protocol).toMatchObject({
      idField: 'id',
      indexField: 'data_idx',
      closeEndpoint: true,
      reuseInstance: false,
      scoreScale: 100,
    });
    expect(parseHttpEnvOptions({ ...base, preset: 'sciworld' }).protocol).toMatchObject({ scoreScale: 1, reuseInstance: true });
    expect(parseHttpEnvOptions({ ...base, preset: 'alfworld' }).protocol).toMatchObject({
      indexField: 'game',
      resetBody: { world_type: 'Text' },
      closeEndpoint: false,
    });
    expect(parseIndices('0-2, 5,7-8', 'x')).toEqual([0, 1, 2, 5, 7, 8]);
  });

  it('names what is wrong and where', () => {
    expect(problem({ ...base, base_url: undefined })).toMatch(/env\.options\.base_url: /);
    expect(problem({ ...base, tasks: undefined })).toMatch(/env\.options\.tasks: required: the task names, as a list/);
    expect(problem({ ...base, tasks: 'find' })).toMatch(/env\.options\.tasks: expected a non-empty list of task names, or a mapping/);
    expect(problem({ ...base, variations: { train: -3 } })).toMatch(/env\.options\.variations\.train: expected data indices/);
    expect(problem({ ...base, base_url: 'ftp://x' })).toMatch(/http:\/\/ or https:\/\//);
    expect(problem({ ...base, colour: 'red' })).toMatch(/env\.options: unknown option\(s\) colour/);
    expect(problem({ ...base, preset: 'minecraft' })).toMatch(/env\.options\.preset: /);
    expect(problem({ ...base, variations: undefined })).toMatch(/env\.options\.variations must give the data indices/);
    expect(problem({ ...base, variations: { train: '0-9', test: '9-12' } })).toMatch(/data index 9 is in both train and test/);
    expect(problem({ ...base, variations: { train: '0-9,3' } })).toMatch(/env\.options\.variations\.train: data index 3 is listed twice/);
    expect(problem({ ...base, variations: { train: '0-x' } })).toMatch(/env\.options\.variations\.train: "0-x" is not an index or a range/);
    expect(problem({ ...base, variations: { train: '9-3' } })).toMatch(/ends before it starts/);
    expect(problem({ ...base, max_steps: undefined })).toMatch(/env\.options\.max_steps .* must be set/);
    expect(problem({ ...base, max_steps: undefined }, { maxSteps: 4 })).toBe('no error');
    expect(problem({ ...base, close_endpoint: false })).toMatch(/set reuse_instance: true/);
    expect(problem({ ...base, reset_body: { id: 3 } })).toMatch(/reset_body must not set "id"/);
    expect(problem(base, { tasks: ['u'] })).toMatch(/env\.tasks names "u", which env\.options\.tasks does not define/);
    expect(problem({ ...base, tasks: { t: { train: '0-3', dev: '2' } }, variations: undefined })).toMatch(
      /env\.options\.tasks\.t: data index 2 is in both train and dev/,
    );
    expect(problem({ ...base, tasks: { t: { train: '0-3' } } })).toMatch(/variations is only read when env\.options\.tasks is a list/);
  });
});

function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const s = createServer();
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
  });
}
