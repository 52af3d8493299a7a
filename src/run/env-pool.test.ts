/** The environments a run opens: as many as its first one says are wanted, within env.max_instances, all closed on a failure. */
import { describe, expect, it } from 'vitest';
import { loadConfig } from '../config/load.ts';
import type { Env } from '../envs/types.ts';
import { environmentCount, openEnvPool } from './env-pool.ts';

const cfg = loadConfig(null, ['env.tasks=[fetch,power]']);

describe('the environment pool', () => {
  it('environmentCount caps the instances at env.max_instances and leaves them uncapped by default', () => {
    expect(environmentCount(cfg, 32)).toBe(32);
    expect(environmentCount({ ...cfg, env: { ...cfg.env, max_instances: 8 } }, 32)).toBe(8);
    expect(environmentCount({ ...cfg, env: { ...cfg.env, max_instances: 64 } }, 32)).toBe(32);
  });

  it('asks the first environment how many are wanted, then opens the rest up to env.max_instances', async () => {
    const asked: string[][] = [];
    const envs = await openEnvPool({ ...cfg, env: { ...cfg.env, max_instances: 3 } }, (first) => (asked.push(first.tasks()), 5));
    expect(asked).toEqual([['fetch', 'power']]);
    expect(envs).toHaveLength(3);
    expect(new Set(envs).size).toBe(3);
    await Promise.all(envs.map((e) => e.close()));
  });

  it('closes the environment it opened when the first one is refused, and the error goes on', async () => {
    let opened: Env | null = null;
    let closed = false;
    const refuse = (first: Env) => {
      opened = first;
      const close = first.close.bind(first);
      first.close = async () => {
        closed = true;
        await close();
      };
      throw new Error('no solver');
    };
    await expect(openEnvPool(cfg, refuse)).rejects.toThrow('no solver');
    expect(opened).not.toBeNull();
    expect(closed).toBe(true);
  });
});
