/**
 * A small environment of your own: a hall of three coloured doors, one of which opens onto the
 * treasure. In the task "note" the observation says which door; in "hidden-note" a note on the wall
 * says it, and the agent must read it first: an exploration task. Opening a wrong door ends the
 * episode (score 0, or 20 for having read the note). Deterministic given
 * (task, variation); variations 0-29 train, 30-39 dev, 40-49 test.
 */
import type { Env, EnvDefinition, ResetResult, Split, StepResult } from 'empo2';

const COLORS = ['red', 'blue', 'green'] as const;
const TASKS = ['note', 'hidden-note'];
const SPLITS: Record<Split, [number, number]> = { train: [0, 30], dev: [30, 40], test: [40, 50] };

/** The treasure's door in a variation (a fixed shuffle, so neighbouring variations differ). */
const treasureOf = (variation: number) => COLORS[(variation * 7 + 1) % COLORS.length];

export class DoorsEnv implements Env {
  readonly name = 'doors';
  private task = '';
  private treasure: string = COLORS[0];
  private noteRead = false;
  private finished = true;
  private points = 0;

  constructor(private readonly steps: number) {}

  tasks(): string[] {
    return [...TASKS];
  }

  variations(task: string, split: Split): number[] {
    if (!TASKS.includes(task)) throw new Error(`unknown doors task "${task}" (tasks: ${TASKS.join(', ')})`);
    const [from, to] = SPLITS[split];
    return Array.from({ length: to - from }, (_, i) => from + i);
  }

  maxSteps(): number {
    return this.steps;
  }

  async reset(task: string, variation: number): Promise<ResetResult> {
    this.variations(task, 'train'); // checks the task
    this.task = task;
    this.treasure = treasureOf(variation);
    this.noteRead = task === 'note';
    this.finished = false;
    this.points = 0;
    return { observation: this.describe(), task: 'Find the treasure behind one of the doors.', validActions: this.validActions() };
  }

  async step(action: string): Promise<StepResult> {
    if (this.finished) throw new Error('step() after the episode ended: reset() first');
    const before = this.points;
    let observation: string;
    const door = /^open (\w+) door$/.exec(action.trim())?.[1];
    if (action.trim() === 'read note' && this.task === 'hidden-note') {
      this.noteRead = true;
      this.points = Math.max(this.points, 20);
      observation = `The note says: the treasure is behind the ${this.treasure} door.`;
    } else if (door === this.treasure) {
      this.points = 100;
      this.finished = true;
      observation = `The ${door} door opens. You found the treasure!`;
    } else if (door && (COLORS as readonly string[]).includes(door)) {
      // A wrong door ends the episode: trying every door in turn is not a way to win.
      this.finished = true;
      observation = `The ${door} door opens onto an empty room, and shuts behind you. No treasure.`;
    } else {
      observation = `Nothing happens. ${this.describe()}`;
    }
    return { observation, reward: this.points - before, done: this.finished, score: this.points, validActions: this.validActions() };
  }

  validActions(): string[] {
    const open = COLORS.map((c) => `open ${c} door`);
    return this.task === 'hidden-note' && !this.noteRead ? ['read note', ...open] : open;
  }

  score(): number {
    return this.points;
  }

  done(): boolean {
    return this.finished;
  }

  /** The scripted solver (optional in an Env): read the note if it is hidden, then open the right door. */
  oracleAction(): string | null {
    if (this.finished) return null;
    return this.noteRead ? `open ${this.treasure} door` : 'read note';
  }

  async close(): Promise<void> {}

  private describe(): string {
    const note = this.task === 'note' ? ` A sign says: the treasure is behind the ${this.treasure} door.` : ' A note hangs on the wall.';
    return `You are in a hall with a red door, a blue door and a green door.${note}`;
  }
}

/**
 * What registerEnv takes: a factory (given the config's env settings: env.max_steps, env.options...)
 * and the text the default tiny model's tokenizer learns its words from.
 */
export const doors: EnvDefinition = {
  create: (settings) => new DoorsEnv(settings.max_steps ?? 6),
  corpus: async () => {
    const lines: string[] = [];
    for (const task of TASKS)
      for (let variation = 0; variation < 50; variation++) {
        const env = new DoorsEnv(6);
        const first = await env.reset(task, variation);
        lines.push(first.observation, first.task, ...first.validActions);
        // Each first action from a fresh start: opening the right door ends the episode.
        for (const action of first.validActions) {
          await env.reset(task, variation);
          lines.push((await env.step(action)).observation);
        }
      }
    return lines;
  },
};
