/**
 * End-to-end: a real headless Chromium (Debian's `chromium` package, driven by puppeteer-core) shops
 * on the local page: picks a test goal, searches with its instruction, opens the goal product,
 * chooses the goal's options and buys; the page must show the same reward the environment gives
 * for those actions. Saves a screenshot of the result page.
 */
import { existsSync, mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WEBSHOP_TASK, WebShopEnv } from './env.ts';
import { startWebShopServer, type RunningWebShopServer } from './server.ts';
import { goalOptionValues } from './reward.ts';

const CANDIDATES = [process.env.PUPPETEER_EXECUTABLE_PATH, process.env.CHROMIUM_PATH, '/usr/bin/chromium', '/usr/bin/chromium-browser'];
const chromium = CANDIDATES.find((p): p is string => typeof p === 'string' && existsSync(p));
const SKIP_REASON =
  'skipped: no Chromium found (looked at $PUPPETEER_EXECUTABLE_PATH, $CHROMIUM_PATH, /usr/bin/chromium); install it with `apt-get install -y chromium`';
if (!chromium) console.warn(`webshop e2e ${SKIP_REASON}`);

describe.skipIf(!chromium)(`webshop page in headless Chromium${chromium ? '' : ` (${SKIP_REASON})`}`, () => {
  let server: RunningWebShopServer;
  const env = new WebShopEnv();
  const outDir = process.env.EMPO2_TEST_OUT ?? join(tmpdir(), 'empo2-webshop-e2e');

  beforeAll(async () => {
    server = await startWebShopServer({ port: 0 });
  });
  afterAll(async () => {
    await server?.close();
  });

  it('shops a test goal to reward 1 and shows the reward parts', async () => {
    // A test goal with options whose product is on the first results page for its instruction.
    const goals = env.world.goals;
    const goalIndex = env.variations(WEBSHOP_TASK, 'test').find((i) => {
      const g = goals[i];
      return goalOptionValues(g).length >= 2 && env.world.search.search(g.instruction_text, 10).some((h) => h.asin === g.asin);
    })!;
    expect(goalIndex).toBeDefined();
    const goal = goals[goalIndex];

    const puppeteer = (await import('puppeteer-core')).default;
    const browser = await puppeteer.launch({ executablePath: chromium, headless: true, args: ['--no-sandbox', '--disable-gpu'] });
    try {
      const page = await browser.newPage();
      await page.setViewport({ width: 1200, height: 900 });
      await page.goto(server.url, { waitUntil: 'load' });
      expect(await page.$eval('h1', (e) => e.textContent)).toBe('Pick a goal');
      await page.$eval('#goal-form input[name=goal]', (e, v) => ((e as HTMLInputElement).value = v), String(goalIndex));
      await Promise.all([page.waitForNavigation(), page.click('#goal-form button')]);
      expect(await page.$eval('#instruction', (e) => e.textContent)).toContain(goal.instruction_text);

      await page.type('#search_input', goal.instruction_text);
      await Promise.all([page.waitForNavigation(), page.click('#search-form button')]);
      expect(await page.$eval('#results-heading', (e) => e.textContent)).toMatch(/^Page 1 \(Total results: \d+\)/);

      const clickAction = async (action: string) => {
        const selector = `button[data-action=${JSON.stringify(action)}]`;
        await Promise.all([page.waitForNavigation(), page.click(selector)]);
      };
      await clickAction(`click[${goal.asin.toLowerCase()}]`);
      expect(await page.$eval('#product-title', (e) => e.textContent)).toBe(env.world.catalogue.byAsin.get(goal.asin)!.Title);
      for (const value of goalOptionValues(goal)) {
        await clickAction(`click[${value}]`);
        const selected = await page.$$eval('button.option.selected', (bs) => bs.map((b) => b.textContent));
        expect(selected).toContain(value);
      }
      await clickAction('click[buy now]');
      const shown = await page.$eval('#reward', (e) => e.textContent);
      const parts = await page.$eval('#reward-parts', (e) => e.textContent ?? '');
      mkdirSync(outDir, { recursive: true });
      await page.screenshot({ path: join(outDir, 'webshop-done.png'), fullPage: true });

      // The environment, given the same actions, gives the same reward.
      await env.reset(WEBSHOP_TASK, goalIndex);
      await env.step(`search[${goal.instruction_text}]`);
      await env.step(`click[${goal.asin.toLowerCase()}]`);
      for (const value of goalOptionValues(goal)) await env.step(`click[${value}]`);
      const final = await env.step('click[buy now]');
      expect(final.done).toBe(true);
      expect(Number(shown)).toBeCloseTo(final.info!.webshopReward as number, 4);
      expect(final.info!.webshopReward).toBe(1);
      expect(parts).toContain('type match r_type');
      expect(parts).toContain(goal.asin);
      expect(existsSync(join(outDir, 'webshop-done.png'))).toBe(true);
    } finally {
      await browser.close();
    }
  }, 90_000);
});
