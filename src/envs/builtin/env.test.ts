import { describe, expect, it } from 'vitest';
import type { Split } from '../types.ts';
import {
  BUILTIN_TASKS,
  Game,
  ORACLE_STEP_CAP,
  Rng,
  createBuiltinEnv,
  generateWorld,
  oracleAct,
  oracleActions,
  randomAct,
  sampleCorpus,
} from './index.ts';

const SPLITS: Split[] = ['train', 'dev', 'test'];

describe('builtin env: interface', () => {
  const env = createBuiltinEnv();

  it('offers at least five tasks with step limits', () => {
    expect(env.name).toBe('builtin');
    expect(env.tasks()).toEqual([...BUILTIN_TASKS]);
    expect(env.tasks().length).toBeGreaterThanOrEqual(5);
    for (const t of env.tasks()) {
      expect(env.maxSteps(t)).toBeGreaterThanOrEqual(20);
      expect(env.maxSteps(t)).toBeLessThanOrEqual(40);
    }
  });

  it('has disjoint named splits of 200 / 50 / 50 variations', () => {
    for (const t of env.tasks()) {
      const [train, dev, test] = SPLITS.map((s) => env.variations(t, s));
      expect([train.length, dev.length, test.length]).toEqual([200, 50, 50]);
      const all = new Set([...train, ...dev, ...test]);
      expect(all.size).toBe(300);
    }
  });

  it('draws distinct worlds: no test world repeats a train world', () => {
    for (const t of env.tasks()) {
      const print = (v: number) => {
        const w = generateWorld(t, v);
        return JSON.stringify([w.description, w.rooms, w.doors, w.things, w.player]);
      };
      const train = new Set(env.variations(t, 'train').map(print));
      for (const v of env.variations(t, 'test')) expect(train.has(print(v))).toBe(false);
    }
  });

  it('throws on unknown tasks and on step before reset, not on bad actions', async () => {
    const e = createBuiltinEnv();
    expect(() => e.variations('nope', 'train')).toThrow(/unknown builtin task/);
    await expect(e.reset('nope', 0)).rejects.toThrow(/unknown builtin task/);
    await expect(e.step('look around')).rejects.toThrow(/reset/);
    expect(e.validActions()).toEqual([]);
    expect(e.score()).toBe(0);
    expect(e.done()).toBe(false);
    await e.close();
    await e.close();
  });

  it('honours options: task subset and step limits', async () => {
    const e = createBuiltinEnv({ tasks: ['fetch'], maxSteps: { fetch: 3 } });
    expect(e.tasks()).toEqual(['fetch']);
    expect(e.maxSteps('fetch')).toBe(3);
    await e.reset('fetch', 0);
    for (let i = 0; i < 3; i++) await e.step('look around');
    expect(e.done()).toBe(true);
    expect(createBuiltinEnv({ maxSteps: 7 }).maxSteps('boil')).toBe(7);
  });
});

describe('builtin env: oracle and baselines', () => {
  it('the oracle scores 100 on every test-split variation of every task, within the cap', async () => {
    const env = createBuiltinEnv();
    for (const t of env.tasks()) {
      for (const v of env.variations(t, 'test')) {
        await env.reset(t, v);
        let steps = 0;
        let total = 0;
        while (!env.done()) {
          const a = oracleAct(env);
          expect(a, `${t}/${v} oracle stuck`).not.toBeNull();
          const r = await env.step(a!);
          total += r.reward;
          steps++;
        }
        expect(env.score(), `${t}/${v}`).toBe(100);
        expect(total).toBe(100);
        expect(steps).toBeLessThanOrEqual(ORACLE_STEP_CAP);
        expect(oracleAct(env)).toBeNull();
      }
    }
  });

  it('oracleActions replays to 100 through the public API, on all splits', async () => {
    const env = createBuiltinEnv();
    for (const t of env.tasks()) {
      for (const v of [0, 199, 200, 249]) {
        const actions = oracleActions(t, v, 123);
        await env.reset(t, v, 123);
        let last;
        for (const a of actions) last = await env.step(a);
        expect(last?.done && last.score).toBe(100);
        expect(last?.info?.success).toBe(true);
      }
    }
  });

  it('a uniformly random policy scores low', async () => {
    const env = createBuiltinEnv();
    const rng = new Rng('test:random');
    for (const t of env.tasks()) {
      let score = 0;
      let wins = 0;
      const vs = env.variations(t, 'dev');
      for (const v of vs) {
        await env.reset(t, v);
        while (!env.done()) await env.step(randomAct(env.validActions(), rng));
        score += env.score();
        wins += env.score() === 100 ? 1 : 0;
      }
      expect(score / vs.length, t).toBeLessThan(40);
      expect(wins / vs.length, t).toBeLessThan(0.25);
    }
  });
});

describe('builtin env: episodes', () => {
  it('is deterministic given (task, variation, seed)', async () => {
    const run = async (t: string, v: number, seed: number) => {
      const env = createBuiltinEnv();
      const rng = new Rng(`det:${t}:${v}`);
      const r0 = await env.reset(t, v, seed);
      const trace: unknown[] = [r0];
      while (!env.done()) {
        const a = randomAct(env.validActions(), rng);
        trace.push(a, await env.step(a));
      }
      return JSON.stringify(trace);
    };
    for (const t of BUILTIN_TASKS) {
      expect(await run(t, 5, 1)).toBe(await run(t, 5, 1));
      expect(await run(t, 260, 9)).toBe(await run(t, 260, 9));
    }
    // seed changes nothing; variations differ
    expect(await run('fetch', 3, 1)).toBe(await run('fetch', 3, 2));
    expect(await run('fetch', 3, 1)).not.toBe(await run('fetch', 4, 1));
  });

  it('keeps scores monotone, rewards = score gained, and ends at the step limit', async () => {
    const env = createBuiltinEnv();
    const rng = new Rng('test:monotone');
    for (const t of env.tasks()) {
      for (const v of env.variations(t, 'train').slice(0, 40)) {
        await env.reset(t, v);
        let prev = 0;
        let steps = 0;
        while (!env.done()) {
          const r = await env.step(randomAct(env.validActions(), rng));
          steps++;
          expect(r.reward).toBeGreaterThanOrEqual(0);
          expect(r.score).toBe(prev + r.reward);
          expect(r.score).toBeGreaterThanOrEqual(0);
          expect(r.score).toBeLessThanOrEqual(100);
          if (r.score === 100) expect(r.done).toBe(true);
          prev = r.score;
        }
        expect(steps).toBeLessThanOrEqual(env.maxSteps(t));
        if (env.score() < 100 && !env.game().failed) expect(steps).toBe(env.maxSteps(t));
        const after = await env.step('look around');
        expect(after).toMatchObject({ done: true, reward: 0, score: prev, validActions: [] });
      }
    }
  });

  it('answers unknown, impossible and garbage actions with an observation', async () => {
    const env = createBuiltinEnv();
    const inputs = [
      '',
      '   ',
      'xyzzy',
      'take',
      'open',
      'put',
      'go to',
      'go to the moon',
      'take key',
      'open box',
      'put battery in lamp',
      'turn on lamp',
      'fill kettle',
      'read note',
      'unlock door to attic',
      'unlock door',
      'put the unicorn in the spaceship',
      'take take take',
      '!!!???',
      'x'.repeat(1_000_000),
      'go to '.repeat(10_000),
      '\u0000\u0001\ud800',
      'drop everything',
      'turn off stove',
      'close red box',
      'examine note',
      42 as unknown as string,
      undefined as unknown as string,
      null as unknown as string,
    ];
    for (const t of env.tasks()) {
      await env.reset(t, 7);
      for (const a of inputs) {
        const r = await env.step(a);
        expect(typeof r.observation).toBe('string');
        expect(r.observation.length).toBeGreaterThan(0);
        expect(r.observation.length).toBeLessThan(400);
        if (r.done) await env.reset(t, 7);
      }
    }
  });

  it('parses well-formed free text outside the valid list', async () => {
    const env = createBuiltinEnv();
    const r0 = await env.reset('fetch', 0);
    const target = (r0.task.match(/Find the (\w+ \w+)/) ?? [])[1];
    const seen = await env.step(`take ${target}`);
    expect(seen.observation).toBe(`You don't see a ${target} here.`);
    expect((await env.step('take the unicorn')).observation).toBe("You don't see that here.");
    expect((await env.step('dance')).observation).toMatch(/don't understand/);
    expect((await env.step('LOOK AROUND!')).observation).toBe(r0.observation);
    expect((await env.step('go to moon')).observation).toBe("You can't go there from here.");
  });

  it('lists short, sorted, lowercase valid actions that all parse', async () => {
    const env = createBuiltinEnv();
    const rng = new Rng('test:valid');
    let count = 0;
    let n = 0;
    for (const t of env.tasks()) {
      for (const v of env.variations(t, 'train').slice(0, 20)) {
        let r = await env.reset(t, v);
        let actions = r.validActions;
        while (actions.length) {
          expect([...actions].sort()).toEqual(actions);
          expect(new Set(actions).size).toBe(actions.length);
          for (const a of actions) {
            expect(a).toMatch(/^[a-z ]+$/);
            expect(a.split(' ').length).toBeLessThanOrEqual(6);
          }
          count += actions.length;
          n++;
          const a = randomAct(actions, rng);
          const s = await env.step(a);
          expect(s.observation, a).not.toMatch(/don't understand|don't see|What do you mean|Which /);
          actions = s.validActions;
        }
      }
    }
    expect(count / n).toBeLessThan(20);
    expect(count / n).toBeGreaterThan(3);
  });
});

describe('builtin env: families', () => {
  /** Play the oracle until `stop` is true of the next action; returns the game. */
  function playUntil(task: string, v: number, stop: (a: string) => boolean): Game {
    const g = new Game(generateWorld(task, v));
    for (let a = g.oracleAction(); a !== null && !stop(a); a = g.oracleAction()) g.step(a);
    return g;
  }

  it('clue: opening a wrong box fails the episode; the note names the right one', () => {
    for (let v = 0; v < 30; v++) {
      const g = playUntil('clue', v, (a) => a.startsWith('open') && a.endsWith(' box'));
      const right = g.oracleAction()!;
      const wrong = g.validActions().find((a) => a.endsWith(' box') && a !== right)!;
      const note = g.world.get('note').text!;
      const colour = (c: string) => c.split(' ')[1];
      if (note.includes(' not in ')) expect(note).not.toContain(colour(right));
      else expect(note).toContain(colour(right));
      const r = g.step(wrong);
      expect(r.done).toBe(true);
      expect(r.observation).toMatch(/wrong box/);
      expect(r.score).toBeLessThan(100);
      expect(g.failed).toBe(true);
    }
  });

  it('boil: the order matters; an empty vessel on a hot stove is ruined', () => {
    const g = playUntil('boil', 0, (a) => a.startsWith('fill'));
    const vessel = g.world.goal.vessel;
    // skip filling: walk to the stove, put it on, turn on -> ruined
    for (let i = 0; i < 10 && !g.validActions().includes(`put ${vessel} on stove`); i++) {
      const route = g.world.route(g.world.player, 'kitchen')!;
      g.step(`go to ${route[0]}`);
    }
    g.step(`put ${vessel} on stove`);
    const r = g.step('turn on stove');
    expect(r.observation).toMatch(/ruined/);
    expect(r.done).toBe(true);
    expect(r.score).toBeLessThan(100);

    const h = playUntil('boil', 1, (a) => a === 'wait');
    expect(h.step('turn off stove').done).toBe(false);
    expect(h.step('wait').observation).toBe('Time passes.');
    expect(h.score).toBe(75);
  });

  it('power: a wrong part does not fit, a device without its part stays off', () => {
    let checked = 0;
    for (let v = 0; v < 60 && checked < 5; v++) {
      const g = playUntil('power', v, (a) => a.startsWith('put'));
      const { device, part } = g.world.goal;
      const wrong = g.world.things.find((t) => t.part && t.noun !== part);
      expect(g.step(`turn on ${device}`).observation).toBe(
        `Nothing happens. The ${device} needs ${/^[aeiou]/.test(part) ? 'an' : 'a'} ${part}.`,
      );
      if (!wrong) continue;
      wrong.loc = { held: true };
      expect(g.step(`put ${wrong.name} in ${device}`).observation).toBe(`The ${wrong.name} does not fit in the ${device}.`);
      checked++;
    }
    expect(checked).toBe(5);
  });

  it('unlock: a wrong key does not fit and the door stays locked', () => {
    let checked = 0;
    for (let v = 0; v < 40 && checked < 5; v++) {
      const g = playUntil('unlock', v, (a) => a.startsWith('unlock'));
      const { key, room } = g.world.goal;
      const other = g.world.things.find((t) => t.noun === 'key' && t.name !== key);
      if (!other) continue;
      g.world.get(key).loc = { room: 'nowhere' };
      other.loc = { held: true };
      expect(g.step(`unlock door to ${room}`).observation).toMatch(/does not fit/);
      expect(g.step(`go to ${room}`).observation).toBe(`The door to the ${room} is locked.`);
      checked++;
    }
    expect(checked).toBe(5);
  });

  it('sort: a thing in the wrong basket earns nothing', () => {
    const g = playUntil('sort', 0, (a) => a.startsWith('put'));
    const [, item, basket] = /^put (.+) in (.+)$/.exec(g.oracleAction()!)!;
    const { basket1, basket2 } = g.world.goal;
    const other = basket === basket1 ? basket2 : basket1;
    const before = g.score;
    const r = g.step(`put ${item} in ${other}`);
    expect(r.observation).toBe(`You put the ${item} in the ${other}.`);
    expect(r.score).toBe(before);
  });
});

describe('builtin env: text', () => {
  const corpus = sampleCorpus(300);

  it('sample corpus is deterministic and covers every task', () => {
    expect(sampleCorpus(30)).toEqual(sampleCorpus(30));
    for (const t of BUILTIN_TASKS) expect(corpus).toContain(generateWorld(t, 0).description);
    expect(corpus.filter((l) => l.endsWith('Task complete.')).length).toBeGreaterThan(100);
  });

  it('uses a small closed vocabulary and short observations', () => {
    const words = new Set<string>();
    let lengths = 0;
    let long = 0;
    for (const l of corpus) {
      const ws = l.toLowerCase().match(/[a-z]+/g) ?? [];
      for (const w of ws) words.add(w);
      lengths += ws.length;
      if (ws.length >= 40) long++;
    }
    expect(words.size).toBeLessThan(300);
    expect(lengths / corpus.length).toBeLessThan(20);
    expect(long / corpus.length).toBeLessThan(0.01);
  });
});
