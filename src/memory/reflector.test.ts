import { describe, expect, it } from 'vitest';
import { reflectionPrompt, stepTipText, summarise, TrajectorySummaryReflector, type Trajectory } from './reflector.ts';

const trajectory: Trajectory = {
  task: 'Find the blue candle and bring it to the hallway.',
  steps: [
    { observation: 'You are in the cellar. The room is bare. A door leads to the garage.', action: 'open red box', score: 0 },
    { observation: "You don't see a red box here.", action: 'go to garage', score: 0 },
    { observation: 'You are in the garage. You see a closed yellow crate.', action: 'open yellow crate', score: 0 },
    { observation: 'You open the yellow crate. It holds a blue candle.', action: 'take blue candle', score: 40 },
  ],
  finalObservation: 'You take the blue candle.',
  score: 40,
  success: false,
};

describe('trajectory-summary reflector', () => {
  it('names places seen, failed actions, best and final score and the distance to done', () => {
    expect(summarise(trajectory)).toBe(
      'Final 40/100 (best 40), 60 short of done after 4 steps. Seen: cellar, garage. Failed: open red box.',
    );
  });
  it('says when the task was completed, and is deterministic', async () => {
    const done = { ...trajectory, score: 100, success: true };
    const r = new TrajectorySummaryReflector();
    const [a, b] = await r.reflect([done, done]);
    expect(a).toBe('Done in 4 steps. Seen: cellar, garage. Failed: open red box.');
    expect(b).toBe(a);
  });
  it('the per-step entry carries the action and the final score (reference format)', () => {
    expect(stepTipText('Tip.', 'go to garage', 40)).toBe('Tip. The action you took was go to garage; you finally scored 40/100.');
    expect(stepTipText('', 'go to garage', 40, 'gain')).toBe('The action you took was go to garage; it raised your score by 40 points.');
  });
  it('the policy reflector prompt shows the trajectory, the score and asks for one sentence under 100 words', () => {
    const p = reflectionPrompt(trajectory, 2);
    expect(p).toContain('Task: Find the blue candle');
    expect(p).toContain('(last 2 of 4 steps)');
    expect(p).toContain('did "take blue candle"');
    expect(p).toContain('Final score: 40/100 (not completed)');
    expect(p).toMatch(/one sentence of at most 100 words/);
  });
});
