import { describe, expect, it } from 'vitest';
import { createEnv, evalVariationsNote } from './index.ts';

describe('evalVariationsNote', () => {
  const settings = { name: 'builtin', tasks: null, max_steps: null, options: {} };

  it('says when env.eval_variations is more than a split holds, and how many episodes an evaluation plays', async () => {
    const env = await createEnv(settings);
    const tasks = env.tasks();
    const held = env.variations(tasks[0], 'test').length;
    expect(evalVariationsNote(env, tasks, 'test', held)).toBeNull();
    expect(evalVariationsNote(env, ['fetch'], 'test', 1e9)).toBe(
      `env.eval_variations is 1,000,000,000, more than the test split holds (fetch ${held}): every task is evaluated on all of it, ${held} episodes per evaluation`,
    );
    const many = evalVariationsNote(env, tasks, 'test', held + 1)!;
    expect(many).toMatch(new RegExp(`^env\\.eval_variations is ${held + 1}, more than the test split holds \\(${tasks[0]} ${held}, `));
    expect(many).toMatch(new RegExp(`every task is evaluated on all of it, ${held * tasks.length} episodes per evaluation$`));
    if (tasks.length > 5) expect(many).toContain(`, ${tasks.length - 5} more)`);
  });
});
