import { describe, expect, it } from 'vitest';
import { getTask, loadCatalog, parseCatalog, splitVariations, taskNames } from './catalog.ts';
import { ScienceWorldEnv } from './env.ts';
import { checkScienceWorldSetup } from './setup.ts';
import { Simulator, SimulatorError } from './simulator.ts';
import { REFERENCE_DEFAULT_STEP_LIMIT, REFERENCE_STEP_LIMITS } from './stepLimits.ts';

// These tests need no simulator: they check the shipped catalog and the adapter's input checks.

describe('ScienceWorld catalog', () => {
  const catalog = loadCatalog();

  it('has the 30 official tasks with the paper ids', () => {
    expect(taskNames()).toHaveLength(30);
    expect(new Set(taskNames()).size).toBe(30);
    expect(getTask('boil')).toMatchObject({ id: '1-1', topic: 'Matter' });
    expect(getTask('mendelian-genetics-unknown-plant').id).toBe('10-2');
  });

  it('splits every task into disjoint train/dev/test sets that cover all its variations', () => {
    for (const task of catalog.tasks) {
      const all = [...task.train, ...task.dev, ...task.test];
      expect(new Set(all).size, task.name).toBe(all.length);
      expect(
        [...all].sort((a, b) => a - b),
        task.name,
      ).toEqual(Array.from({ length: task.maxVariations }, (_, i) => i));
      expect(task.train.length, task.name).toBeGreaterThanOrEqual(4);
      expect(task.test.length, task.name).toBeGreaterThanOrEqual(4);
    }
  });

  it('matches the simulator split rule on a known task (first half train, then a quarter dev, rest test)', () => {
    expect(splitVariations('boil', 'train')).toEqual([...Array(14).keys()]);
    expect(splitVariations('boil', 'dev')).toEqual([14, 15, 16, 17, 18, 19, 20]);
    expect(splitVariations('boil', 'test')).toEqual([21, 22, 23, 24, 25, 26, 27, 28, 29]);
  });

  it('names what is wrong in bad lookups', () => {
    expect(() => getTask('boil-water')).toThrow(/unknown ScienceWorld task 'boil-water'; the tasks are: boil, /);
    expect(() => splitVariations('boil', 'validation' as 'dev')).toThrow(/unknown split 'validation'/);
    expect(() => parseCatalog({ scienceworldVersion: '1', tasks: [{ name: 'x' }] }, 'test.json')).toThrow(
      /invalid ScienceWorld catalog in test.json/,
    );
  });
});

describe('ScienceWorldEnv configuration (no simulator needed)', () => {
  it('uses the reference step limits, with 100 for tasks the reference table leaves out', () => {
    const env = new ScienceWorldEnv();
    expect(env.maxSteps('boil')).toBe(100);
    expect(env.maxSteps('find-animal')).toBe(30);
    expect(env.maxSteps('measure-melting-point-known-substance')).toBe(120);
    expect(env.maxSteps('mendelian-genetics-known-plant')).toBe(REFERENCE_DEFAULT_STEP_LIMIT);
    for (const task of Object.keys(REFERENCE_STEP_LIMITS)) expect(taskNames()).toContain(task);
  });

  it('lets step limits be overridden per task and by default', () => {
    const env = new ScienceWorldEnv({ stepLimits: { boil: 7 }, defaultStepLimit: 50 });
    expect(env.maxSteps('boil')).toBe(7);
    expect(env.maxSteps('inclined-plane-determine-angle')).toBe(50);
    expect(env.maxSteps('melt')).toBe(80);
  });

  it('rejects bad options with messages that name the option', () => {
    expect(() => new ScienceWorldEnv({ simplification: 'easy,teleport' })).toThrow(/unknown ScienceWorld simplification 'easy'/);
    expect(() => new ScienceWorldEnv({ simplification: 'teleport' })).toThrow(
      /unknown ScienceWorld simplification 'teleport'.*teleportAction/,
    );
    expect(() => new ScienceWorldEnv({ stepLimits: { boiling: 5 } })).toThrow(/unknown ScienceWorld task 'boiling'/);
    expect(() => new ScienceWorldEnv({ stepLimits: { boil: 0 } })).toThrow(/stepLimits\['boil'\] must be a positive integer/);
    expect(() => new ScienceWorldEnv({ moveLimit: 1.5 })).toThrow(/moveLimit must be a positive integer/);
    expect(() => new ScienceWorldEnv({ actionCorrection: { history: 'both' as 'original' } })).toThrow(/actionCorrection.history/);
    expect(() => new ScienceWorldEnv({ stepTimeoutMs: -1 })).toThrow(/stepTimeoutMs/);
    expect(() => new ScienceWorldEnv({ jvmOptions: ['-Xmx2g -Xss1m'] })).toThrow(/jvmOptions entries must be single JVM flags/);
    expect(new ScienceWorldEnv({ simplification: 'teleportAction,openDoors' }).tasks()).toHaveLength(30);
  });

  it('rejects unknown tasks and out-of-range variations before starting a simulator', async () => {
    const env = new ScienceWorldEnv({ python: '/nonexistent/python' });
    await expect(env.reset('boil-water', 0)).rejects.toThrow(/unknown ScienceWorld task 'boil-water'/);
    await expect(env.reset('boil', 30)).rejects.toThrow(/'boil' has variations 0..29, got 30/);
    await expect(env.reset('boil', 1.5)).rejects.toThrow(/got 1.5/);
    const noElectrical = new ScienceWorldEnv({ simplification: 'noElectricalAction', python: '/nonexistent/python' });
    await expect(noElectrical.reset('power-component', 0)).rejects.toThrow(/needs electrical actions/);
    await expect(env.step('look around')).rejects.toThrow(/before reset/);
    await env.close();
    await env.close();
    await expect(env.reset('boil', 0)).rejects.toThrow(/closed/);
  });
});

describe('missing Python set-up', () => {
  it('says what to install when the interpreter is missing', async () => {
    const status = checkScienceWorldSetup('/nonexistent/python');
    expect(status.ok).toBe(false);
    expect(status.reason).toMatch(/scripts\/setup-python\.sh/);
    const failure = await Simulator.start({ python: '/nonexistent/python' }).catch((error: unknown) => error);
    expect(failure).toBeInstanceOf(SimulatorError);
    expect((failure as Error).message).toMatch(/cannot start the ScienceWorld bridge with \/nonexistent\/python.*setup-python\.sh/);
    const env = new ScienceWorldEnv({ python: '/nonexistent/python' });
    await expect(env.reset('boil', 0)).rejects.toThrow(/failed on 2 fresh simulator\(s\).*setup-python\.sh/s);
  });

  it('says what to install when python lacks the scienceworld package', async () => {
    const status = checkScienceWorldSetup('python3');
    // The system python3 normally lacks the package; if someone installed it globally, there is nothing to check.
    if (status.ok) return;
    expect(status.reason).toMatch(/scienceworld package is not installed for python3.*setup-python\.sh/);
    const failure = await Simulator.start({ python: 'python3' }).catch((error: unknown) => error);
    expect((failure as Error).message).toMatch(/'scienceworld' is not importable.*setup-python\.sh/);
  });
});

describe('createScienceWorldEnv (configuration from YAML/JSON)', () => {
  it('builds an env from plain options, with maxSteps replacing every per-task limit', async () => {
    const { createScienceWorldEnv } = await import('./factory.ts');
    const env = createScienceWorldEnv({
      tasks: ['boil', 'melt'],
      maxSteps: 40,
      stepLimits: { melt: 12 },
      actionCorrection: { enabled: true },
    });
    expect(env.tasks()).toEqual(['boil', 'melt']);
    expect(env.maxSteps('boil')).toBe(40);
    expect(env.maxSteps('melt')).toBe(12);
    await expect(env.reset('freeze', 0)).rejects.toThrow(/'freeze' is not among this env's tasks: boil, melt/);
  });

  it('names the offending field', async () => {
    const { createScienceWorldEnv } = await import('./factory.ts');
    expect(() => createScienceWorldEnv({ maxSteps: 'ten' })).toThrow(/invalid scienceworld env options[\s\S]*maxSteps/);
    expect(() => createScienceWorldEnv({ simplifications: 'easy' })).toThrow(/simplifications/);
    expect(() => createScienceWorldEnv({ actionCorrection: { history: 'both' } })).toThrow(/actionCorrection\.history/);
    expect(() => createScienceWorldEnv({ tasks: ['boil', 'fly'] })).toThrow(/unknown ScienceWorld task 'fly'/);
  });
});
