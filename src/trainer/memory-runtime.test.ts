/**
 * Tip writing through the trainer's memory runtime: one entry per step, scored by the episode's
 * final score (reference), by the points scored from that step on (experimental.step_credit: to_go) or by
 * the points the step itself scored (gain).
 */
import { describe, expect, it } from 'vitest';
import { loadConfig } from '../config/load.ts';
import { resolveAlgo } from '../config/schema.ts';
import { HashedNgramEmbedder } from '../memory/hashed.ts';
import { NoveltyList } from '../memory/novelty.ts';
import { TrajectorySummaryReflector } from '../memory/reflector.ts';
import { TipMemory } from '../memory/store.ts';
import { MemoryRuntime, ORACLE_TIP_SUMMARY } from './memory-runtime.ts';
import type { TipQuery } from './rollout.ts';
import type { Episode, StepRecord } from '../run/records.ts';

function step(observation: string, action: string, reward: number, score: number): StepRecord {
  return { observation, prompt: [], tipSpan: null, response: [], logprobs: [], action, reward, score };
}

// Score 0 → 10 (battery seen) → 10 (a wasted step) → 35 (battery taken) → 35 (another wasted step).
const episode: Episode = {
  task: 'power',
  variation: 0,
  group: 0,
  description: 'Find a battery, put it in the lamp and turn on the lamp.',
  steps: [
    step('You are in the hall. A red box is here.', 'open red box', 10, 10),
    step('The red box holds a battery.', 'inventory', 0, 10),
    step('You carry nothing. The red box holds a battery.', 'take battery', 25, 35),
    step('You carry a battery.', 'look around', 0, 35),
  ],
  finalObservation: 'You are in the hall.',
  score: 35,
  success: false,
};

/** One tip query for episode 0 of the power task; fields not given are empty. */
function tipQuery(
  state: string,
  fields: Partial<Pick<TipQuery, 'taken' | 'scoreSoFar' | 'validActions' | 'oracleAction'>> = {},
): TipQuery[] {
  return [
    {
      episode: 0,
      job: { task: 'power', variation: 0, group: 0 },
      state,
      taken: [],
      scoreSoFar: 0,
      validActions: [],
      oracleAction: () => null,
      ...fields,
    },
  ];
}

/** The texts of the tips `memory.tipSource()` returns, per query. */
async function tipTexts(memory: MemoryRuntime, queries: TipQuery[]): Promise<string[][]> {
  return (await memory.tipSource()(queries)).map((tips) => tips.map((t) => t.text));
}

function runtime(overrides: string[]): MemoryRuntime {
  const cfg = loadConfig(null, ['algo.name=empo2', 'algo.p=1', 'memory.reflector=summary', 'memory.dim=256', ...overrides]);
  return new MemoryRuntime(cfg, resolveAlgo(cfg), {
    embedder: new HashedNgramEmbedder({ dim: 256 }),
    reflector: new TrajectorySummaryReflector(),
    tips: new TipMemory(256, { capacity: 100, threshold: 0.5, topK: cfg.memory.top_k }),
    novelty: new NoveltyList(0.9),
  });
}

async function written(credit: 'final' | 'to_go' | 'gain') {
  const memory = runtime([`experimental.step_credit=${credit}`]);
  expect(await memory.write([episode])).toBe(4);
  // Oldest first, so entry t is step t.
  return [...memory.tips.entries('power')].sort((a, b) => a.order - b.order);
}

describe('MemoryRuntime.write: step credit', () => {
  it('final (reference): every step carries the final score', async () => {
    const entries = await written('final');
    expect(entries.map((e) => e.score)).toEqual([35, 35, 35, 35]);
    expect(entries[1].text).toMatch(/The action you took was inventory; you finally scored 35\/100\.$/);
  });

  it('to_go: each step carries the points scored from it to the end, so steps after the last gain rank lowest', async () => {
    const entries = await written('to_go');
    expect(entries.map((e) => e.score)).toEqual([35, 25, 25, 0]);
    expect(entries[2].text).toMatch(/The action you took was take battery; from that step on you scored 25\/100\.$/);
    expect(entries[3].text).toMatch(/The action you took was look around; from that step on you scored 0\/100\.$/);
  });

  it('gain: each step carries only the points it scored itself', async () => {
    const entries = await written('gain');
    expect(entries.map((e) => e.score)).toEqual([10, 0, 25, 0]);
    expect(entries[2].text).toMatch(/The action you took was take battery; it raised your score by 25 points\.$/);
    expect(entries[1].text).toMatch(/The action you took was inventory; it did not change your score\.$/);
  });
});

describe('MemoryRuntime: episodes a failure ended', () => {
  const failed: Episode = { ...episode, variation: 1, outcome: 'failed', failure: 'POST /step lost the connection' };

  it('write no tips: the tips of a batch are those of its other episodes, and its reflection is null', async () => {
    const memory = runtime([]);
    const { added, reflections } = await memory.writeTips([failed, episode]);
    expect(added).toBe(4);
    expect(reflections[0]).toBeNull();
    expect(reflections[1]).not.toBeNull();
    expect(await runtime([]).write([failed])).toBe(0);
  });

  it('get no novelty bonus and do not count as visits: the next episode in the same states is still new', async () => {
    const memory = runtime(['algo.intrinsic=novelty', 'algo.intrinsic_coef=1']);
    const [forFailed, forOther] = await memory.intrinsicRewards([failed, episode]);
    expect(forFailed.every((r) => r === 0)).toBe(true);
    const alone = await runtime(['algo.intrinsic=novelty', 'algo.intrinsic_coef=1']).intrinsicRewards([episode]);
    expect(forOther).toEqual(alone[0]);
    expect(forOther.some((r) => r > 0)).toBe(true);
  });
});

describe('MemoryRuntime.write: experimental.step_tip_reflection', () => {
  it('true (reference): each step entry starts with the episode summary; false: the action and its score alone', async () => {
    const withSummary = runtime(['experimental.step_credit=gain']);
    await withSummary.write([episode]);
    const summary = (await new TrajectorySummaryReflector().reflect([{ ...episode, task: episode.description }]))[0];
    const long = [...withSummary.tips.entries('power')].sort((a, b) => a.order - b.order);
    expect(long[2].text).toBe(`${summary} The action you took was take battery; it raised your score by 25 points.`);
    const bare = runtime(['experimental.step_credit=gain', 'experimental.step_tip_reflection=false']);
    expect(await bare.write([episode])).toBe(4);
    const short = [...bare.tips.entries('power')].sort((a, b) => a.order - b.order);
    expect(short.map((e) => e.text)).toEqual([
      'The action you took was open red box; it raised your score by 10 points.',
      'The action you took was inventory; it did not change your score.',
      'The action you took was take battery; it raised your score by 25 points.',
      'The action you took was look around; it did not change your score.',
    ]);
    expect(short.map((e) => e.score)).toEqual(long.map((e) => e.score));
  });

  it('applies to the oracle tip too', async () => {
    const q = tipQuery('anywhere', { oracleAction: () => 'take battery' });
    expect(await tipTexts(runtime(['experimental.tip_source=oracle', 'experimental.step_credit=gain']), q)).toEqual([
      [`${ORACLE_TIP_SUMMARY} The action you took was take battery; it raised your score by 20 points.`],
    ]);
    expect(
      await tipTexts(
        runtime(['experimental.tip_source=oracle', 'experimental.step_credit=gain', 'experimental.step_tip_reflection=false']),
        q,
      ),
    ).toEqual([['The action you took was take battery; it raised your score by 20 points.']]);
  });
});

describe('MemoryRuntime.tipSource: experimental.skip_taken_actions', () => {
  // The state after the battery was taken still looks like the state it was taken in, so the best
  // match is the tip to take it again: credit a small tip-copying model cannot earn twice.
  const query = (taken: string[]) => tipQuery('You carry nothing. The red box holds a battery.', { taken });

  it('off (default): the tip about the action already taken stays first', async () => {
    const memory = runtime(['experimental.step_credit=gain', 'memory.top_k=1']);
    await memory.write([episode]);
    const [tips] = await tipTexts(memory, query(['open red box', 'inventory', 'take battery']));
    expect(tips).toHaveLength(1);
    expect(tips[0]).toMatch(/took was take battery; it raised your score by 25 points/);
  });

  it('on: tips about actions this episode has taken are left out, the next best tip takes their place', async () => {
    const memory = runtime(['experimental.step_credit=gain', 'memory.top_k=1', 'experimental.skip_taken_actions=true']);
    await memory.write([episode]);
    const [before] = await tipTexts(memory, query([]));
    expect(before[0]).toMatch(/took was take battery/);
    const [after] = await tipTexts(memory, query(['open red box', 'inventory', 'take battery']));
    expect(after).toHaveLength(1);
    expect(after[0]).toMatch(/took was look around; it did not change your score/);
  });
});

describe('MemoryRuntime.tipSource: experimental.valid_actions_only', () => {
  // The same state as above with the battery still in the box: the memory's best tip (take battery,
  // +25) is shown only where the environment offers that action.
  const query = (validActions: string[], taken: string[] = []) =>
    tipQuery('You carry nothing. The red box holds a battery.', { taken, validActions });

  it('off (default): tips are shown whatever the current state accepts', async () => {
    const memory = runtime(['experimental.step_credit=gain', 'memory.top_k=1']);
    await memory.write([episode]);
    const [tips] = await tipTexts(memory, query(['look around']));
    expect(tips[0]).toMatch(/took was take battery/);
  });

  it('on: only tips whose action is valid now are shown, best first among them (ties: the more similar state first)', async () => {
    const memory = runtime(['experimental.step_credit=gain', 'memory.top_k=2', 'experimental.valid_actions_only=true']);
    await memory.write([episode]);
    const [offered] = await tipTexts(memory, query(['inventory', 'look around', 'take battery']));
    expect(offered.map((t) => t.match(/took was ([a-z ]+);/)![1])).toEqual(['take battery', 'inventory']);
    const [notOffered] = await tipTexts(memory, query(['inventory', 'look around']));
    expect(notOffered.map((t) => t.match(/took was ([a-z ]+);/)![1])).toEqual(['inventory', 'look around']);
    expect((await tipTexts(memory, query(['go to kitchen'])))[0]).toEqual([]);
  });

  it('on, in a state that lists no valid actions (free-text environments): tips are not filtered', async () => {
    const memory = runtime(['experimental.step_credit=gain', 'memory.top_k=1', 'experimental.valid_actions_only=true']);
    await memory.write([episode]);
    expect((await tipTexts(memory, query([])))[0][0]).toMatch(/took was take battery/);
  });

  it('combines with skip_taken_actions: a tip must be valid now and not yet taken', async () => {
    const memory = runtime([
      'experimental.step_credit=gain',
      'memory.top_k=3',
      'experimental.valid_actions_only=true',
      'experimental.skip_taken_actions=true',
    ]);
    await memory.write([episode]);
    const [tips] = await tipTexts(
      memory,
      query(['inventory', 'look around', 'take battery', 'open red box'], ['inventory', 'open red box']),
    );
    expect(tips.map((t) => t.match(/took was ([a-z ]+);/)![1])).toEqual(['take battery', 'look around']);
  });
});

describe('MemoryRuntime.tipSource: experimental.min_tip_score', () => {
  const query = tipQuery('You carry nothing. The red box holds a battery.');
  const actions = (tips: string[]) => tips.map((t) => t.match(/took was ([a-z ]+);/)![1]);

  it('off (default): tips about steps that scored nothing fill the top k', async () => {
    const memory = runtime(['experimental.step_credit=gain', 'memory.top_k=4']);
    await memory.write([episode]);
    expect(actions((await tipTexts(memory, query))[0])).toEqual(['take battery', 'inventory', 'look around']);
  });

  it('0 with gain credit: only tips about actions that raised the score are shown', async () => {
    const memory = runtime(['experimental.step_credit=gain', 'memory.top_k=4', 'experimental.min_tip_score=0']);
    await memory.write([episode]);
    expect(actions((await tipTexts(memory, query))[0])).toEqual(['take battery']);
  });

  it('is strict (a tip scored exactly the bound is left out) and applies with the action filters', async () => {
    const at = async (bound: number, taken: string[] = []) => {
      const memory = runtime([
        'experimental.step_credit=gain',
        'memory.top_k=4',
        `experimental.min_tip_score=${bound}`,
        'experimental.skip_taken_actions=true',
      ]);
      await memory.write([episode]);
      return actions((await tipTexts(memory, tipQuery('You carry nothing. The red box holds a battery.', { taken })))[0]);
    };
    expect(await at(24.9)).toEqual(['take battery']);
    expect(await at(25)).toEqual([]);
    expect(await at(0, ['take battery'])).toEqual([]);
  });

  it('is checked in the config: a non-number is refused by name', () => {
    expect(() => loadConfig(null, ['experimental.min_tip_score=lots'])).toThrow(/experimental\.min_tip_score/);
  });
});

describe('MemoryRuntime.tipSource: experimental.match_progress', () => {
  // Scores before each step: open red box 0, inventory 10, take battery 10, look around 35.
  const query = (scoreSoFar: number) => tipQuery('You carry nothing. The red box holds a battery.', { scoreSoFar });
  const actions = (tips: string[]) => tips.map((t) => t.match(/took was ([a-z ]+);/)![1]);

  it('write records, per step, the score reached before it', async () => {
    expect((await written('gain')).map((e) => e.progress)).toEqual([0, 10, 10, 35]);
  });

  it('off (default): tips from any point of the episode are shown', async () => {
    const memory = runtime(['experimental.step_credit=gain', 'memory.top_k=4']);
    await memory.write([episode]);
    expect(actions((await tipTexts(memory, query(35)))[0])).toEqual(['take battery', 'inventory', 'look around']);
  });

  it('on: only tips written at the score the episode has now', async () => {
    const memory = runtime(['experimental.step_credit=gain', 'memory.top_k=4', 'experimental.match_progress=true']);
    await memory.write([episode]);
    expect(actions((await tipTexts(memory, query(10)))[0])).toEqual(['take battery', 'inventory']);
    expect(actions((await tipTexts(memory, query(35)))[0])).toEqual(['look around']);
    expect((await tipTexts(memory, query(0)))[0]).toEqual([]);
  });
});

describe('MemoryRuntime.tipSource: experimental.tip_source=oracle', () => {
  const query = (action: string | null) => tipQuery('You are in the hall.', { oracleAction: () => action });

  it("shows the solver's next action as the only tip, in the step-tip wording of the run's credit, whatever the memory holds", async () => {
    const gain = runtime(['experimental.step_credit=gain', 'experimental.tip_source=oracle']);
    await gain.write([episode]);
    expect(await tipTexts(gain, query('open red box'))).toEqual([
      [`${ORACLE_TIP_SUMMARY} The action you took was open red box; it raised your score by 20 points.`],
    ]);
    const final = runtime(['experimental.tip_source=oracle']);
    expect(await tipTexts(final, query('take battery'))).toEqual([
      [`${ORACLE_TIP_SUMMARY} The action you took was take battery; you finally scored 20/100.`],
    ]);
  });

  it('shows no tip once the solver has no action left', async () => {
    expect(await tipTexts(runtime(['experimental.tip_source=oracle']), query(null))).toEqual([[]]);
  });
});
