/**
 * The trajectory file as writer and reader share it: lines appended one episode at a time and read
 * while they are written, the size cap, a resumed run dropping the iterations it redoes, and damaged
 * lines reported by file and line.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { appendFileSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { followedTip, type EpisodeRecord } from './format.ts';
import { TrajectoryFile } from './reader.ts';
import { TrajectoryWriter } from './writer.ts';

const root = mkdtempSync(join(tmpdir(), 'empo2-trajectory-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

function record(iteration: number, score: number, fields: Partial<EpisodeRecord> = {}): EpisodeRecord {
  return {
    type: 'episode',
    source: 'train',
    iteration,
    trial: null,
    env_steps: iteration * 10,
    checkpoint: null,
    index: 0,
    group: 0,
    task: 'power',
    variation: 3,
    description: 'Turn on the lamp.',
    mode: 'tips-on-policy',
    slot: 'power',
    steps: [
      {
        observation: 'You are in the hall. A red box is here.',
        valid_actions: ['open red box', 'go north'],
        valid_action_count: 2,
        tips: [
          { text: 'The action you took was open red box; you finally scored 35/100.', score: 35, similarity: 0.82, action: 'open red box' },
        ],
        action: 'open red box',
        reward: 10,
        score: 10,
        followed_tip: true,
      },
    ],
    final_observation: 'The red box is open.',
    score,
    success: false,
    reflection: 'Final 10/100.',
    time: '2025-01-01T00:00:00.000Z',
    ...fields,
  };
}

const lines = (path: string) =>
  readFileSync(path, 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as { type: string; iteration?: number });

describe('TrajectoryWriter and TrajectoryFile', () => {
  it('reads each episode as soon as its line is complete, and one episode back in full', () => {
    const path = join(root, 'live', 'train.jsonl');
    const writer = TrajectoryWriter.fresh(path, { maxBytes: 2 ** 20 });
    const reader = new TrajectoryFile(path);
    expect(reader.refresh()).toBe(false);
    expect(writer.append(record(1, 10))).toBe(true);
    expect(reader.refresh()).toBe(true);
    expect(reader.episodes.map((e) => [e.line, e.iteration, e.score, e.tipped_steps, e.followed_steps])).toEqual([[1, 1, 10, 1, 1]]);
    // A line still being written (no newline yet) waits; the rest of it completes the episode.
    const next = JSON.stringify(record(2, 35)) + '\n';
    appendFileSync(path, next.slice(0, 40));
    expect(reader.refresh()).toBe(false);
    expect(reader.episodes).toHaveLength(1);
    appendFileSync(path, next.slice(40));
    expect(reader.refresh()).toBe(true);
    expect(reader.episodes.map((e) => e.score)).toEqual([10, 35]);
    expect(reader.episode(2)).toEqual(record(2, 35));
    expect(() => reader.episode(7)).toThrow(/has no episode on line 7/);
    expect(reader.problems).toEqual([]);
  });

  it('names the file and line of a damaged line, skips it and keeps reading', () => {
    const path = join(root, 'damaged.jsonl');
    writeFileSync(
      path,
      JSON.stringify(record(1, 10)) +
        '\n' +
        '{"type":"episode", "sco\n' +
        JSON.stringify({ ...record(2, 20), steps: [{ action: 3 }] }) +
        '\n' +
        JSON.stringify(record(3, 30)) +
        '\n',
    );
    const reader = new TrajectoryFile(path);
    reader.refresh();
    expect(reader.episodes.map((e) => [e.line, e.score])).toEqual([
      [1, 10],
      [4, 30],
    ]);
    expect(reader.problems).toHaveLength(2);
    expect(reader.problems[0]).toMatch(new RegExp(`^${path.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}:2: not valid JSON`));
    expect(reader.problems[1]).toMatch(/damaged\.jsonl:3: not an episode record \(steps\.0\.observation: .*steps\.0\.action: /);
  });

  it('stops at the size cap with a last line saying so; the reader reports it', () => {
    const path = join(root, 'capped.jsonl');
    const one = Buffer.byteLength(JSON.stringify(record(1, 10)) + '\n');
    const logs: string[] = [];
    const writer = TrajectoryWriter.fresh(path, { maxBytes: 2.5 * one, log: (l) => logs.push(l) });
    expect([1, 2, 3, 4].map((i) => writer.append(record(i, i)))).toEqual([true, true, false, false]);
    expect(writer.full).toBe(true);
    expect(lines(path).map((l) => l.type)).toEqual(['episode', 'episode', 'cap_reached']);
    expect(statSync(path).size).toBeLessThan(2.5 * one + 200);
    expect(logs).toHaveLength(1);
    expect(logs[0]).toMatch(/capped\.jsonl reached its cap .*trajectories\.max_megabytes/);
    const reader = new TrajectoryFile(path);
    reader.refresh();
    expect(reader.episodes).toHaveLength(2);
    const written = [1, 2].reduce((n, i) => n + Buffer.byteLength(JSON.stringify(record(i, i)) + '\n'), 0);
    expect(reader.cap).toEqual({ bytes: written, max_bytes: 2.5 * one });
  });

  it('resume drops the iterations after the checkpoint, a partial last line and a cap line; the reader starts over on the new file', () => {
    const path = join(root, 'resumed.jsonl');
    const writer = TrajectoryWriter.fresh(path, { maxBytes: 2 ** 20 });
    for (const it of [1, 2, 3, 4]) writer.append(record(it, it));
    appendFileSync(path, '{"type":"cap_reached","bytes":1,"max_bytes":1,"time":"x"}\n{"type":"epi');
    const reader = new TrajectoryFile(path);
    reader.refresh();
    expect(reader.episodes.map((e) => e.iteration)).toEqual([1, 2, 3, 4]);
    const resumed = TrajectoryWriter.resume(path, 2, { maxBytes: 2 ** 20 });
    expect(lines(path).map((l) => l.iteration)).toEqual([1, 2]);
    resumed.append(record(3, 99));
    reader.refresh();
    expect(reader.episodes.map((e) => [e.iteration, e.score])).toEqual([
      [1, 1],
      [2, 2],
      [3, 99],
    ]);
    expect(reader.cap).toBeNull();
  });

  it('refuses a cap that is not a positive size', () => {
    expect(() => TrajectoryWriter.fresh(join(root, 'x.jsonl'), { maxBytes: 0 })).toThrow(/positive number of bytes, got 0/);
  });
});

describe('followedTip', () => {
  it('is whether the action is one a shown tip named, and null when no tip named an action', () => {
    const tip = (action: string | null) => ({ action });
    expect(followedTip('go north', [tip('open box'), tip('go north')])).toBe(true);
    expect(followedTip('go south', [tip('open box'), tip('go north')])).toBe(false);
    expect(followedTip('go south', [tip(null)])).toBeNull();
    expect(followedTip('go south', [])).toBeNull();
  });
});
