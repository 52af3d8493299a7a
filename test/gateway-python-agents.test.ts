/**
 * A Python agent written with the OpenAI Agents SDK (`openai-agents`, examples/agent-python/agent_tools.py)
 * on its default model (the Responses API, plain and streamed) and on Chat Completions, run as a process as `empo2 train --agent` runs it, trains the
 * tiny model: every move is a tool call forced by the SDK's own `tool_choice="required"`, sent back with its
 * result as the SDK's history, plain and streamed. Each recorded step is one call of `move` with a room of
 * the tool's enum, each episode makes three moves or fewer and scores 100 exactly when it reached its room.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { trainAgent } from '../src/index.ts';
import { runAgentProcess } from '../src/gateway/index.ts';
import { pythonGate, REPO_ROOT, venvPython } from './support/python.ts';
import { TINY_MODEL } from './support/tiny.ts';

let root: string;
beforeAll(() => {
  root = mkdtempSync(join(tmpdir(), 'empo2-gateway-python-agents-'));
});
afterAll(() => rmSync(root, { recursive: true, force: true }));

interface RoomTask {
  room: string;
}
const TASKS: RoomTask[] = [{ room: 'kitchen' }, { room: 'garden' }];
const SET = [
  ...TINY_MODEL,
  'seed=4',
  'train.iterations=1',
  'train.eval_every=0',
  'rollout.tasks_per_batch=2',
  'rollout.group_size=2',
  'rollout.max_tokens=120',
  'env.eval_variations=1',
  'trajectories.train_per_iteration=4',
];

describe('a Python openai-agents agent through empo2 train --agent', () => {
  const gate = pythonGate(['agents', 'openai']);
  it.skipIf(!gate.available)(
    `plays tool episodes with forced calls on the Responses API (plain, streamed) and on Chat Completions (${gate.label})`,
    async () => {
      const script = join(REPO_ROOT, 'examples', 'agent-python', 'agent_tools.py');
      for (const [api, stream] of [
        ['responses', false],
        ['responses', true],
        ['chat_completions', false],
      ] as const) {
        const lines: string[] = [];
        const result = await trainAgent<RoomTask>({
          agent: (input) =>
            runAgentProcess({ command: `AGENT_API=${api} AGENT_STREAM=${stream ? 1 : 0} ${venvPython()} ${script}` }, input),
          tasks: TASKS,
          set: [...SET, `run_dir=${join(root, `run-${api}-${stream}`)}`],
          timeoutSeconds: 120,
          log: (l) => lines.push(l),
        });
        expect(lines.filter((l) => l.includes('failed')).filter((l) => /episode .* failed/.test(l))).toEqual([]);
        const episodes = readFileSync(join(result.runDir, 'trajectories', 'train.jsonl'), 'utf8')
          .trim()
          .split('\n')
          .map((l) => JSON.parse(l) as { description: string; score: number; steps: { action: string; observation: string }[] });
        expect(episodes).toHaveLength(4);
        for (const e of episodes) {
          const goal = (JSON.parse(e.description) as RoomTask).room;
          const rooms = e.steps.map((s) => /^move \{"room":"(hall|kitchen|garden)"\}$/.exec(s.action)?.[1]);
          expect(
            rooms.every((r) => r !== undefined),
            JSON.stringify(e.steps.map((s) => s.action)),
          ).toBe(true);
          expect(rooms.length).toBeGreaterThanOrEqual(1);
          expect(rooms.length).toBeLessThanOrEqual(3);
          // The agent stops at its room: only the last move may reach it, and the score says whether it did.
          expect(rooms.slice(0, -1)).not.toContain(goal);
          expect(e.score).toBe(rooms.at(-1) === goal ? 100 : 0);
          if (rooms.at(-1) !== goal) expect(rooms).toHaveLength(3);
          // After the first move, the state is the tool's result for the previous move.
          e.steps.slice(1).forEach((s, k) => expect(s.observation).toContain(`You are in the ${rooms[k]}.`));
        }
      }
    },
    300_000,
  );
});
