/**
 * End to end in a real headless Chromium (Debian's `chromium`, driven by puppeteer-core, as the
 * WebShop page test does): a tiny EMPO² run trains two iterations, the dashboard serves it, and the
 * page shows the run and its curves, opens an episode and unfolds the tips its steps were shown,
 * follows a step to the memory view's retrieval, and picks up a third iteration the run writes
 * while the page is open.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Browser, Page } from 'puppeteer-core';
import { loadConfig } from '../config/load.ts';
import type { Config } from '../config/schema.ts';
import { initBackend } from '../policy/tfjs/backend.ts';
import { train } from '../trainer/trainer.ts';
import { EpisodeRecordSchema, type EpisodeRecord } from '../trajectory/format.ts';
import { TINY_RUN } from '../../test/support/tiny.ts';
import { chromiumPath, CHROMIUM_ARGS, NO_CHROMIUM } from '../../test/support/chromium.ts';
import { startDashboard, type RunningDashboard } from './server.ts';

if (!chromiumPath) console.warn(`dashboard e2e ${NO_CHROMIUM}`);

const root = mkdtempSync(join(tmpdir(), 'empo2-dashboard-e2e-'));
const runDir = join(root, 'run');

function config(iterations: number): Config {
  return loadConfig(null, [
    `run_dir=${runDir}`,
    ...TINY_RUN,
    'memory.top_k=3',
    'algo.name=empo2',
    'algo.p=1',
    'algo.q=0.5',
    'train.checkpoint_every=1',
    'train.eval_every=1',
    `train.iterations=${iterations}`,
  ]);
}

/** Points the page plotted per curve (the chart container's data-points). */
const plotted = (page: Page) =>
  page.$eval('#curves', (el) => JSON.parse((el as HTMLElement).dataset.points ?? '{}') as Record<string, number>);

describe.skipIf(!chromiumPath)(`dashboard page in headless Chromium${chromiumPath ? '' : ` (${NO_CHROMIUM})`}`, () => {
  let dashboard: RunningDashboard;
  let browser: Browser;
  let page: Page;
  const pageErrors: string[] = [];

  beforeAll(async () => {
    await initBackend();
    await train(config(2), { resume: false, log: () => {} });
    dashboard = await startDashboard({ paths: [runDir], port: 0, cwd: root });
    const puppeteer = (await import('puppeteer-core')).default;
    browser = await puppeteer.launch({ executablePath: chromiumPath, headless: true, args: CHROMIUM_ARGS });
    page = await browser.newPage();
    page.on('pageerror', (e) => pageErrors.push((e as Error).message));
    await page.setViewport({ width: 1400, height: 1000 });
  });
  afterAll(async () => {
    await browser?.close();
    await dashboard?.close();
    rmSync(root, { recursive: true, force: true });
  });

  it('loads the 2-iteration run and draws its learning curves against environment steps', async () => {
    await page.goto(`${dashboard.url}/#runs`, { waitUntil: 'load' });
    await page.waitForSelector('#runs-table tbody tr');
    const row = await page.$eval('#runs-table tbody tr', (tr) => [...tr.querySelectorAll('td')].map((td) => td.textContent));
    expect(row.slice(1, 5)).toEqual(['run', 'empo2', 'finished', '2 / 2']);
    await page.waitForSelector('#curves svg .mark-line path');
    const points = await plotted(page);
    // Evaluations before training and after each iteration; one training line per iteration.
    expect(points['held-out score']).toBe(3);
    expect(points['training score']).toBe(2);
    expect(points['loss']).toBe(2);
    expect(points['entropy (sampled tokens)']).toBe(2);
    expect(await page.$$eval('#curves svg .mark-line path', (paths) => paths.length)).toBeGreaterThanOrEqual(6);
    expect(await page.$eval('#curves svg', (svg) => svg.textContent)).toContain('held-out score');
    expect(await page.$eval('#config-table', (t) => t.textContent)).toContain('algo.name');
    expect(pageErrors).toEqual([]);
  });

  it('opens an episode as a chat and unfolds the tips its steps were shown; a step leads to what the memory retrieves there', async () => {
    await page.goto(`${dashboard.url}/#trajectories?tips=1`, { waitUntil: 'load' });
    await page.waitForSelector('#episodes tbody tr');
    // Tips shown: only iteration 2 has them (the memory is empty during iteration 1).
    const played = await page.$$eval('#episodes tbody tr', (rows) => rows.map((r) => r.children[0].textContent));
    expect(new Set(played)).toEqual(new Set(['iter 2']));
    await page.click('#episodes tbody tr');
    await page.waitForSelector('#episode .step aside.tips details');
    expect(await page.$eval('#episode h2', (h) => h.textContent)).toMatch(/^(fetch|clue) #\d+ tips · (on|off)-policy score /);
    const folded = await page.$eval('#episode aside.tips details', (d) => (d as HTMLDetailsElement).open);
    expect(folded).toBe(false);
    await page.click('#episode aside.tips details summary');
    const tip = await page.$eval('#episode aside.tips details[open] li', (li) => ({
      meta: li.querySelector('.tip-meta')!.textContent,
      text: li.querySelector('.tip-text')!.textContent,
      visible: (li as HTMLElement).offsetHeight > 0,
    }));
    expect(tip.visible).toBe(true);
    expect(tip.meta).toMatch(/^score \d+(\.\d)? · similarity 0\.\d\d · action: .+$/);
    expect(tip.text).toMatch(/The action you took was .+; you finally scored \d+\/100\.$/);
    // Steps whose action a shown tip named carry the mark, and only those.
    const marks = await page.$$eval('#episode .step[data-step]', (steps) =>
      steps.map((s) => ({
        marked: s.classList.contains('followed') && !!s.querySelector('.badge.followed'),
        named: [...s.querySelectorAll('li.tip.named')].length > 0,
      })),
    );
    expect(marks.every((m) => m.marked === m.named)).toBe(true);
    expect(await page.$eval('#reflection', (p) => p.textContent)).toMatch(/steps\./);

    await Promise.all([page.waitForSelector('#retrieved h3'), page.click('#episode aside.tips .retrieve-link')]);
    expect(await page.$eval('#retrieved h3', (h) => h.textContent)).toMatch(/^\d+ tips? retrieved from slot (fetch|clue)/);
    expect(await page.$$eval('#retrieved-tips tbody tr', (rows) => rows.length)).toBeGreaterThan(0);
    expect(await page.$$eval('#memory-entries tbody tr', (rows) => rows.length)).toBeGreaterThan(0);
    expect(pageErrors).toEqual([]);
  });

  /** The trajectories view of train.jsonl (file 0) at an iteration, once its episode list is drawn. */
  async function openIteration(iteration: number, extra = ''): Promise<void> {
    // A new document each time: a change of the hash alone keeps the last table on screen until the page
    // re-renders it, and under load the wait below found those old rows (a click on one of them failed).
    await page.goto('about:blank');
    await page.goto(`${dashboard.url}/#trajectories?source=${dashboard.sources()[0].id}&file=0&iteration=${iteration}${extra}`, {
      waitUntil: 'load',
    });
    await page.waitForSelector('#episodes tbody tr');
  }

  it("shows every column of the episode table, FOLLOWED included, within the list's visible width", async () => {
    await openIteration(2);
    const fit = await page.$eval('#episodes', (table) => {
      const list = table.closest('.episode-list') as HTMLElement;
      const last = table.querySelector('thead th:last-child')!;
      return {
        header: last.textContent,
        right: last.getBoundingClientRect().right,
        visibleRight: list.getBoundingClientRect().left + list.clientLeft + list.clientWidth,
        hidden: list.scrollWidth - list.clientWidth,
      };
    });
    expect(fit.header).toBe('followed');
    expect(fit.right).toBeLessThanOrEqual(fit.visibleRight + 0.5);
    expect(fit.hidden).toBeLessThanOrEqual(0);
    expect(pageErrors).toEqual([]);
  });

  it('keeps "no tips shown" and the "retrieve from memory now" link of a step apart', async () => {
    await openIteration(1);
    await page.click('#episodes tbody tr');
    await page.waitForSelector('#episode aside.tips.none .retrieve-link');
    const boxes = await page.$$eval('#episode aside.tips.none', (asides) =>
      asides.map((a) => {
        const [note, link] = [a.querySelector('span')!, a.querySelector('.retrieve-link')!].map((el) => el.getBoundingClientRect());
        return { noteBottom: note.bottom, linkTop: link.top };
      }),
    );
    expect(boxes.length).toBeGreaterThan(0);
    // The link starts below the note instead of running on from its last word.
    for (const b of boxes) expect(b.linkTop).toBeGreaterThanOrEqual(b.noteBottom);
    expect(pageErrors).toEqual([]);
  });

  it('says that the memory was empty for the tip rollouts of iteration 1, and not for later ones shown tips', async () => {
    await openIteration(1);
    const modes = await page.$$eval('#episodes tbody tr', (rows) =>
      rows.map((r) => [r.children[2].querySelector('.badge')!.textContent, r.children[2].querySelector('.memory-note')?.textContent]),
    );
    expect(modes.length).toBeGreaterThan(0);
    for (const m of modes) expect(m).toEqual([expect.stringMatching(/^tips · (on|off)-policy$/), 'memory was empty']);
    await page.click('#episodes tbody tr');
    await page.waitForSelector('#episode aside.tips.none');
    expect(await page.$eval('#episode .episode-head', (h) => h.textContent)).toContain(
      'The memory was empty when this episode was played (tips are written after each training iteration): no tips to show.',
    );
    expect(await page.$eval('#episode aside.tips.none span', (s) => s.textContent)).toBe('no tips shown: the memory was empty');
    await openIteration(2, '&tips=1');
    const later = await page.$$eval('#episodes tbody tr', (rows) => rows.map((r) => r.children[2].textContent));
    expect(later.length).toBeGreaterThan(0);
    for (const m of later) expect(m).toMatch(/^tips · (on|off)-policy$/);
    expect(pageErrors).toEqual([]);
  });

  it("shows an agent's gateway episode with its tips and without an empty valid-actions fold", async () => {
    // A gateway step as the trainer records it (results/gateway-smollm2): a free-text call, no valid actions, tips shown.
    const tip = { text: 'Say the word itself. The action you took was apple; you finally scored 100/100.', score: 100, similarity: 0.68 };
    const step = (observation: string, action: string, reward: number) => ({
      observation,
      valid_actions: [],
      valid_action_count: 0,
      tips: [{ ...tip, action: 'apple' }],
      action,
      reward,
      score: reward,
      followed_tip: false,
    });
    const record: EpisodeRecord = {
      ...{ type: 'episode', source: 'train', iteration: 2, trial: null, env_steps: 40, checkpoint: null, index: 0, group: 0 },
      ...{ task: 'agent', variation: 5, description: '{"word":"house"}', mode: 'tips-off-policy', slot: 'agent' },
      steps: [step('Say the word "house".', 'Please go ahead', 0), step('No. Say the word "house".', 'A home', 50)],
      ...{ final_observation: 'No. Say the word "house".', score: 50, success: false, outcome: 'ended', reflection: 'Say it.' },
      judge: { score: 0.25, reason: 'Said a synonym, not the word.' },
      time: new Date().toISOString(),
    };
    const file = join(root, 'agent-episodes.jsonl');
    writeFileSync(file, JSON.stringify(EpisodeRecordSchema.parse(record)) + '\n');
    const agentDashboard = await startDashboard({ paths: [file], port: 0, cwd: root });
    try {
      await page.goto(`${agentDashboard.url}/#trajectories`, { waitUntil: 'load' });
      await page.waitForSelector('#episodes tbody tr');
      // The list names the task by its text too: "agent #5" alone does not say which word.
      expect(await page.$eval('#episodes tbody tr td:nth-child(2)', (td) => [td.textContent, td.getAttribute('title')])).toEqual([
        'agent #5{"word":"house"}',
        '{"word":"house"}',
      ]);
      await page.click('#episodes tbody tr');
      await page.waitForSelector('#episode .step aside.tips details');
      expect(await page.$$eval('#episode .step aside.tips details summary', (s) => s.map((x) => x.textContent))).toEqual([
        expect.stringMatching(/^1 tip shown/),
        expect.stringMatching(/^1 tip shown/),
      ]);
      expect(await page.$$eval('#episode details.valid', (d) => d.length)).toBe(0);
      // env.reward: judge: the judge's score and reason under the final observation.
      expect(await page.$eval('#judge', (d) => d.textContent)).toBe(
        'judge · 0.25 of 1, relative to its group (the training reward)Said a synonym, not the word.',
      );
    } finally {
      await agentDashboard.close();
    }
    // A built-in environment's steps keep theirs.
    await openIteration(1);
    // A long task text is the row's tooltip only.
    const [label, title] = await page.$eval('#episodes tbody tr td:nth-child(2)', (td) => [td.textContent, td.getAttribute('title')]);
    expect(label).toMatch(/^\w+ #\d+$/);
    expect(title!.length).toBeGreaterThan(40);
    await page.click('#episodes tbody tr');
    await page.waitForSelector('#episode details.valid');
    expect(await page.$eval('#episode details.valid summary', (s) => s.textContent)).toMatch(/^\d+ valid actions?/);
    expect(pageErrors).toEqual([]);
  });

  it('updates on its own when the run writes another iteration', async () => {
    await page.goto(`${dashboard.url}/#runs`, { waitUntil: 'load' });
    await page.waitForSelector('#curves svg .mark-line path');
    expect((await plotted(page))['training score']).toBe(2);
    await train(config(3), { resume: true, log: () => {} });
    // No reload: the page's poll picks up the new lines.
    // The iteration's train line comes first, its evaluation after it: wait for both.
    await page.waitForFunction(
      () => {
        const points = JSON.parse((document.querySelector('#curves') as HTMLElement | null)?.dataset.points ?? '{}');
        return points['training score'] === 3 && points['held-out score'] === 4;
      },
      { timeout: 30_000 },
    );
    expect(await page.$$eval('#curves svg .mark-line path', (paths) => paths.length)).toBeGreaterThanOrEqual(6);
    await page.waitForFunction(() => document.querySelector('#runs-table tbody tr')?.children[4].textContent === '3 / 3', {
      timeout: 30_000,
    });
    await page.goto(`${dashboard.url}/#trajectories`, { waitUntil: 'load' });
    await page.waitForSelector('#episodes tbody tr');
    expect(await page.$$eval('select[name=iteration] option', (options) => options.map((o) => o.textContent))).toEqual([
      'all',
      '0',
      '1',
      '2',
      '3',
    ]);
    expect(pageErrors).toEqual([]);
  });
});
