/**
 * Screenshots of the dashboard's three main views, for docs/: the runs given with their curves
 * overlaid, one training episode of the first run with its tips unfolded (a short one in which a
 * step followed a tip), and that run's memory with what the episode's first tipped state
 * retrieves. Drives the system Chromium.
 *
 *   npx tsx scripts/dashboard-screenshots.ts <run-dir> [<run-dir> ...] [--out docs]
 */
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { startDashboard } from '../src/index.ts';
import { chromiumPath, CHROMIUM_ARGS, NO_CHROMIUM } from '../test/support/chromium.ts';

const { positionals, values } = parseArgs({ allowPositionals: true, options: { out: { type: 'string', default: 'docs' } } });
if (positionals.length === 0) throw new Error('usage: npx tsx scripts/dashboard-screenshots.ts <run-dir> [<run-dir> ...] [--out docs]');
if (!chromiumPath) throw new Error(NO_CHROMIUM);
const out = values.out!;
mkdirSync(out, { recursive: true });

const dashboard = await startDashboard({ paths: positionals, port: 0 });
const run = dashboard.sources().find((s) => s.kind === 'run');
if (!run) throw new Error(`${positionals[0]} is not a training run`);
const api = async <T>(path: string): Promise<T> => (await fetch(`${dashboard.url}${path}`)).json() as Promise<T>;

interface Listed {
  file: number;
  line: number;
  steps: number;
  tipped_steps: number;
  followed_steps: number;
}
const trainFile = (await api<{ files: { name: string; index: number }[] }>(`/api/sources/${run.id}`)).files.find(
  (f) => f.name === 'train.jsonl',
);
if (!trainFile) throw new Error(`${run.path} has no trajectories/train.jsonl`);
const listed = await api<{ episodes: Listed[] }>(`/api/sources/${run.id}/trajectories?file=${trainFile.index}&tips=1&limit=500`);
// An episode of about 8 steps reads best on one screen; among those, the one that followed the most tips.
const best = [...listed.episodes].sort(
  (a, b) =>
    Number(b.followed_steps > 0) - Number(a.followed_steps > 0) ||
    Math.abs(a.steps - 8) - Math.abs(b.steps - 8) ||
    b.followed_steps - a.followed_steps,
)[0];
if (!best) throw new Error(`${run.path}: no recorded training episode was shown tips; train longer or with a larger algo.p`);
const { episode } = await api<{
  episode: { slot: string; steps: { observation: string; action: string; tips: unknown[]; valid_actions: string[]; score: number }[] };
}>(`/api/sources/${run.id}/episodes/${best.file}/${best.line}`);
const tippedAt = episode.steps.findIndex((s) => s.tips.length > 0);

const puppeteer = (await import('puppeteer-core')).default;
const browser = await puppeteer.launch({ executablePath: chromiumPath, headless: true, args: CHROMIUM_ARGS });
try {
  const page = await browser.newPage();
  await page.setViewport({ width: 1440, height: 1000 });

  await page.goto(`${dashboard.url}/#runs`, { waitUntil: 'load' });
  await page.waitForSelector('#curves svg .mark-line');
  await page.screenshot({ path: join(out, 'dashboard-runs.png'), fullPage: true });

  await page.goto(`${dashboard.url}/#trajectories?source=${run.id}&file=${best.file}&episode=${best.file}:${best.line}`, {
    waitUntil: 'load',
  });
  await page.waitForSelector('#episode .step');
  // Unfold the tips of the first tipped step and of the steps that followed one, as a reader would.
  await page.$$eval('#episode .step', (steps) => {
    const tipped = steps.filter((s) => s.querySelector('aside.tips details'));
    const chosen = [tipped[0], ...tipped.filter((s) => s.classList.contains('followed'))].slice(0, 3);
    for (const s of chosen) if (s) (s.querySelector('aside.tips details') as HTMLDetailsElement).open = true;
  });
  // Long episodes run to thousands of pixels: the picture keeps the top of the page.
  const height = await page.evaluate(() => document.documentElement.scrollHeight);
  await page.screenshot({
    path: join(out, 'dashboard-trajectory.png'),
    clip: { x: 0, y: 0, width: 1440, height: Math.min(height, 2000) },
    captureBeyondViewport: true,
  });

  const step = episode.steps[Math.max(0, tippedAt)];
  const taken = episode.steps.slice(0, Math.max(0, tippedAt)).map((s) => s.action);
  const before = tippedAt > 0 ? episode.steps[tippedAt - 1].score : 0;
  const query = new URLSearchParams({
    source: run.id,
    slot: episode.slot,
    state: step.observation,
    taken: taken.join('\n'),
    score: String(before),
    valid: step.valid_actions.join('\n'),
  });
  await page.goto(`${dashboard.url}/#memory?${query}`, { waitUntil: 'load' });
  await page.waitForSelector('#memory-entries tbody tr');
  await page.waitForSelector('#retrieved h3');
  await page.screenshot({ path: join(out, 'dashboard-memory.png'), fullPage: true });
  console.log(
    `wrote ${['runs', 'trajectory', 'memory'].map((v) => join(out, `dashboard-${v}.png`)).join(', ')} (episode ${trainFile.name}:${best.line}, ${best.followed_steps} of ${best.tipped_steps} tipped steps followed a tip)`,
  );
} finally {
  await browser.close();
  await dashboard.close();
}
