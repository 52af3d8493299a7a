/**
 * The dashboard on a run an agent played through the gateway (results/gateway-smollm2/README.md): the run with its curves, its
 * iteration-2 training episodes with one opened (tips folded, then its first step's unfolded), the iteration-1
 * episode list (memory empty, tips written after it), and the run's memory with what that step's state
 * retrieves. Drives the system Chromium as scripts/dashboard-screenshots.ts does; small viewports so the
 * PNGs stay small.
 *
 *   npx tsx results/gateway-smollm2/screenshots.ts <run-dir> <prefix> [--out results/gateway-smollm2]
 */
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { startDashboard } from '../../src/index.ts';
import { chromiumPath, CHROMIUM_ARGS, NO_CHROMIUM } from '../../test/support/chromium.ts';

const { positionals, values } = parseArgs({
  allowPositionals: true,
  options: { out: { type: 'string', default: 'results/gateway-smollm2' } },
});
const [runDir, prefix] = positionals;
if (!runDir || !prefix) throw new Error('usage: npx tsx results/gateway-smollm2/screenshots.ts <run-dir> <prefix> [--out dir]');
if (!chromiumPath) throw new Error(NO_CHROMIUM);
const out = values.out!;
mkdirSync(out, { recursive: true });

const dashboard = await startDashboard({ paths: [runDir], port: 0 });
const run = dashboard.sources().find((s) => s.kind === 'run');
if (!run) throw new Error(`${runDir} is not a training run`);
const api = async <T>(path: string): Promise<T> => (await fetch(`${dashboard.url}${path}`)).json() as Promise<T>;

const files = (await api<{ files: { name: string; index: number }[] }>(`/api/sources/${run.id}`)).files;
const trainFile = files.find((f) => f.name === 'train.jsonl');
if (!trainFile) throw new Error(`${runDir} has no trajectories/train.jsonl`);
interface Listed {
  file: number;
  line: number;
  steps: number;
  tipped_steps: number;
}
const listed = await api<{ episodes: Listed[] }>(`/api/sources/${run.id}/trajectories?file=${trainFile.index}&iteration=2&limit=500`);
const tipped = listed.episodes.find((e) => e.tipped_steps > 0);
if (!tipped) throw new Error(`${runDir}: no iteration-2 training episode was shown tips`);
const { episode } = await api<{ episode: { slot: string; steps: { observation: string; tips: unknown[]; valid_actions: string[] }[] } }>(
  `/api/sources/${run.id}/episodes/${tipped.file}/${tipped.line}`,
);
const shots: string[] = [];
const shot = (name: string) => {
  const path = join(out, `${prefix}-${name}.png`);
  shots.push(path);
  return path;
};

const puppeteer = (await import('puppeteer-core')).default;
const browser = await puppeteer.launch({ executablePath: chromiumPath, headless: true, args: CHROMIUM_ARGS });
try {
  const page = await browser.newPage();
  await page.setViewport({ width: 1280, height: 900 });

  await page.goto(`${dashboard.url}/#runs`, { waitUntil: 'load' });
  await page.waitForSelector('#curves svg .mark-line');
  await page.screenshot({ path: shot('runs') });

  // Iteration 1: memory rollouts with an empty memory (the page says so), then iteration 2 with tips.
  const trajectories = (iteration: number, extra = '') =>
    `${dashboard.url}/#trajectories?source=${run.id}&file=${trainFile.index}&iteration=${iteration}${extra}`;
  await page.goto(trajectories(1), { waitUntil: 'load' });
  await page.waitForSelector('#episodes tbody tr');
  await page.click('#episodes tbody tr');
  await page.waitForSelector('#episode .step');
  await page.screenshot({ path: shot('iteration-1') });

  // Iteration 2: the episode with every step's tips folded, then its first step's tips unfolded.
  await page.goto(trajectories(2, `&episode=${tipped.file}:${tipped.line}`), { waitUntil: 'load' });
  await page.waitForSelector('#episode .step aside.tips details');
  await page.screenshot({ path: shot('iteration-2'), fullPage: true });
  await page.$eval('#episode aside.tips details', (d) => ((d as HTMLDetailsElement).open = true));
  await page.screenshot({ path: shot('iteration-2-tips'), clip: { x: 0, y: 0, width: 1280, height: 1400 }, captureBeyondViewport: true });

  const step = episode.steps.find((s) => s.tips.length > 0)!;
  const query = new URLSearchParams({ source: run.id, slot: episode.slot, state: step.observation, valid: step.valid_actions.join('\n') });
  await page.goto(`${dashboard.url}/#memory?${query}`, { waitUntil: 'load' });
  await page.waitForSelector('#memory-entries tbody tr');
  await page.waitForSelector('#retrieved h3');
  await page.screenshot({ path: shot('memory') });
  console.log(`wrote ${shots.join(', ')} (iteration-2 episode ${trainFile.name}:${tipped.line}, ${tipped.tipped_steps} tipped steps)`);
} finally {
  await browser.close();
  await dashboard.close();
}
