/**
 * The system Chromium that the browser tests drive with puppeteer-core (`npm run setup:test`
 * installs Debian's `chromium`): the first of $PUPPETEER_EXECUTABLE_PATH, $CHROMIUM_PATH and the
 * usual paths that exists, else undefined with the reason the tests give for skipping.
 */
import { existsSync } from 'node:fs';

const CANDIDATES = [process.env.PUPPETEER_EXECUTABLE_PATH, process.env.CHROMIUM_PATH, '/usr/bin/chromium', '/usr/bin/chromium-browser'];

export const chromiumPath: string | undefined = CANDIDATES.find((p): p is string => typeof p === 'string' && existsSync(p));

export const NO_CHROMIUM =
  'skipped: no Chromium found (looked at $PUPPETEER_EXECUTABLE_PATH, $CHROMIUM_PATH, /usr/bin/chromium); install it with `apt-get install -y chromium`';

/** Launch options for headless Chromium in a container (no sandbox, no GPU). */
export const CHROMIUM_ARGS = ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'];
