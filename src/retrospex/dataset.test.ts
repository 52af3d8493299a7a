import { appendFileSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { EpisodeRecord } from '../trajectory/format.ts';
import { episodeTransitions, readLoggedData, trajectoryFiles } from './dataset.ts';

const record = (task: string, steps: [observation: string, action: string, reward: number][], final: string): EpisodeRecord => ({
  type: 'episode',
  source: 'train',
  iteration: 1,
  trial: null,
  env_steps: 10,
  checkpoint: null,
  index: 0,
  group: 0,
  task,
  variation: 3,
  description: `Do ${task}.`,
  mode: 'plain',
  slot: null,
  steps: steps.map(([observation, action, reward], i) => ({
    observation,
    valid_actions: [],
    valid_action_count: 4,
    tips: [],
    action,
    reward,
    score: steps.slice(0, i + 1).reduce((a, s) => a + s[2], 0),
    followed_tip: null,
  })),
  final_observation: final,
  score: steps.reduce((a, s) => a + s[2], 0),
  success: false,
  reflection: null,
  time: '2026-12-02T00:00:00.000Z',
});

const power = record(
  'power',
  [
    ['hall', 'go to kitchen', 0],
    ['kitchen', 'take battery', 35],
    ['kitchen, holding a battery', 'put battery in lamp', 30],
  ],
  'the lamp has a battery',
);
const clue = record('clue', [['study', 'read note', 30]], 'the note says: white box');

let dir: string;
const lines = (...rs: object[]) => rs.map((r) => JSON.stringify(r) + '\n').join('');

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'empo2-logged-'));
  // A training run, an adapt output inside a checkpoint's folder of a compare output, a bare file, and a folder with none.
  mkdirSync(join(dir, 'run', 'trajectories'), { recursive: true });
  writeFileSync(join(dir, 'run', 'trajectories', 'train.jsonl'), lines(power, clue));
  writeFileSync(join(dir, 'run', 'trajectories', 'eval-iter-000002.jsonl'), lines(clue));
  writeFileSync(join(dir, 'run', 'trajectories', 'notes.txt'), 'not records');
  mkdirSync(join(dir, 'cmp', 'grpo', 'seed0', 'adapt-power'), { recursive: true });
  writeFileSync(join(dir, 'cmp', 'grpo', 'seed0', 'adapt-power', 'trajectories.jsonl'), lines(power));
  writeFileSync(join(dir, 'bare.jsonl'), lines(record('power', [], 'nothing happened'), power));
  writeFileSync(join(dir, 'notes.md'), '# notes');
  mkdirSync(join(dir, 'empty', 'checkpoints'), { recursive: true });
  writeFileSync(join(dir, 'broken.jsonl'), lines(clue) + '{"type": "episode", "steps": 3}\n' + 'not json\n');
});

afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('episodeTransitions', () => {
  it('pairs each step with the next observation; the last step ends the episode at the final observation', () => {
    expect(episodeTransitions(power)).toEqual([
      { task: 'Do power.', observation: 'hall', action: 'go to kitchen', reward: 0, nextObservation: 'kitchen', done: false },
      {
        task: 'Do power.',
        observation: 'kitchen',
        action: 'take battery',
        reward: 35,
        nextObservation: 'kitchen, holding a battery',
        done: false,
      },
      {
        task: 'Do power.',
        observation: 'kitchen, holding a battery',
        action: 'put battery in lamp',
        reward: 30,
        nextObservation: 'the lamp has a battery',
        done: true,
      },
    ]);
  });
});

describe('trajectoryFiles: where empo2 records episodes', () => {
  it("a run's trajectories/*.jsonl, an adapt output's trajectories.jsonl however deep in a compare output, or a file", () => {
    expect(trajectoryFiles(join(dir, 'run'))).toEqual([
      join(dir, 'run', 'trajectories', 'eval-iter-000002.jsonl'),
      join(dir, 'run', 'trajectories', 'train.jsonl'),
    ]);
    expect(trajectoryFiles(join(dir, 'cmp'))).toEqual([join(dir, 'cmp', 'grpo', 'seed0', 'adapt-power', 'trajectories.jsonl')]);
    expect(trajectoryFiles(join(dir, 'bare.jsonl'))).toEqual([join(dir, 'bare.jsonl')]);
  });

  it('refuses a folder without records, a file that is not records, and a path that is not there', () => {
    expect(() => trajectoryFiles(join(dir, 'empty'))).toThrow(/empty holds no trajectory records \(looked for trajectories\/\*\.jsonl/);
    expect(() => trajectoryFiles(join(dir, 'notes.md'))).toThrow(/notes\.md is a file but not trajectory records \(\.jsonl\)/);
    expect(() => trajectoryFiles(join(dir, 'nowhere'))).toThrow(/nowhere does not exist/);
  });
});

describe('readLoggedData', () => {
  it('reads every episode of every source once, skipping episodes without steps', () => {
    const data = readLoggedData([join(dir, 'run'), join(dir, 'bare.jsonl'), join(dir, 'run', 'trajectories', 'train.jsonl')]);
    expect(data.files.map((f) => [f.path.slice(dir.length + 1), f.episodes])).toEqual([
      ['run/trajectories/eval-iter-000002.jsonl', 1],
      ['run/trajectories/train.jsonl', 2],
      ['bare.jsonl', 1],
    ]);
    expect(data.episodes).toBe(4);
    expect(data.transitions).toHaveLength(3 + 1 + 1 + 3);
    expect(data.tasks).toEqual(['clue', 'power']);
  });

  it("leaves out an episode the environment or the engine broke off (outcome 'failed'), as training does, and counts it", () => {
    const cut = {
      ...record('clue', [['study', 'read note', 0]], 'the note says: white box'),
      outcome: 'failed',
      failure: 'prompt past the context',
    };
    writeFileSync(join(dir, 'with-failed.jsonl'), lines(power, cut, { ...clue, outcome: 'step_limit' }));
    const data = readLoggedData([join(dir, 'with-failed.jsonl')]);
    expect(data.episodes).toBe(2);
    expect(data.failedEpisodes).toBe(1);
    expect(data.files[0].episodes).toBe(2);
    expect(data.transitions.map((t) => t.action)).toEqual(['go to kitchen', 'take battery', 'put battery in lamp', 'read note']);
    expect(data.transitions.at(-1)).toMatchObject({ reward: 30, done: true });
    writeFileSync(join(dir, 'only-failed.jsonl'), lines(cut));
    expect(() => readLoggedData([join(dir, 'only-failed.jsonl')])).toThrow(
      /no episodes with steps in .*only-failed\.jsonl.*1 left out as failed/,
    );
  });

  it('keeps only the tasks asked for', () => {
    const data = readLoggedData([join(dir, 'run')], ['clue']);
    expect(data.episodes).toBe(2);
    expect(data.transitions.every((t) => t.task === 'Do clue.')).toBe(true);
  });

  it('names the lines it could not read, and reads the rest', () => {
    const data = readLoggedData([join(dir, 'broken.jsonl')]);
    expect(data.episodes).toBe(1);
    expect(data.problems).toEqual([
      expect.stringMatching(/broken\.jsonl:2: not an episode record \(.*steps: /),
      expect.stringMatching(/broken\.jsonl:3: not valid JSON/),
    ]);
  });

  it('refuses data with no steps to learn from, naming the files read', () => {
    expect(() => readLoggedData([join(dir, 'run')], ['boil'])).toThrow(
      /no episodes of task boil with steps in .*run \(read eval-iter-000002\.jsonl, train\.jsonl\)/,
    );
    appendFileSync(join(dir, 'steps0.jsonl'), lines(record('power', [], 'x')));
    expect(() => readLoggedData([join(dir, 'steps0.jsonl')])).toThrow(/no episodes with steps in .*steps0\.jsonl/);
    expect(() => readLoggedData([])).toThrow(/no logged episodes given/);
  });
});
