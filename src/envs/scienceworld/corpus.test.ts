import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { environmentCorpus } from '../index.ts';
import { loadCatalog, taskNames } from './catalog.ts';
import { loadCorpus, scienceWorldCorpus } from './corpus.ts';

describe('ScienceWorld tokenizer corpus', () => {
  it("covers every task of the catalog, made with the catalog's simulator version", () => {
    const corpus = loadCorpus();
    expect(corpus.scienceworldVersion).toBe(loadCatalog().scienceworldVersion);
    for (const task of taskNames()) expect(corpus.tasks[task]?.length, task).toBeGreaterThan(10);
  });

  it("gives only the chosen tasks' text, starting with the task description and first observation", async () => {
    const boil = await environmentCorpus({ name: 'scienceworld', tasks: ['boil'], max_steps: null, options: {} });
    expect(boil[0]).toMatch(/^Your task is to boil /);
    expect(boil[1]).toMatch(/^This room is called the /);
    const meltDescription = scienceWorldCorpus(['melt'])[0];
    expect(meltDescription).toMatch(/^Your task is to melt /);
    expect(boil).not.toContain(meltDescription);
    const all = scienceWorldCorpus();
    expect(all.length).toBeGreaterThan(boil.length * 10);
  });

  it('names an unknown task and a missing or malformed corpus file', () => {
    expect(() => scienceWorldCorpus(['boiling'])).toThrow(/boiling/);
    const dir = mkdtempSync(join(tmpdir(), 'empo2-sw-corpus-'));
    try {
      expect(() => scienceWorldCorpus(['boil'], join(dir, 'absent.json'))).toThrow(/missing; regenerate it with/);
      writeFileSync(join(dir, 'bad.json'), JSON.stringify({ scienceworldVersion: '1', tasks: { boil: 'not a list' } }));
      expect(() => scienceWorldCorpus(['boil'], join(dir, 'bad.json'))).toThrow(/not a valid ScienceWorld corpus/);
      writeFileSync(join(dir, 'partial.json'), JSON.stringify({ scienceworldVersion: '1', tasks: { melt: ['x'] } }));
      expect(() => scienceWorldCorpus(['boil'], join(dir, 'partial.json'))).toThrow(/has no text for ScienceWorld task 'boil'/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
