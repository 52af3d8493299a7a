/** Memory-only adaptation with a remote engine alone: the same trials through empo2 serve as in process. */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startServedFixture, type ServedFixture } from '../../../test/support/served-fixture.ts';
import { adapt } from '../../adapt/tips.ts';
import { remoteEngineFromDir } from './index.ts';

let fx: ServedFixture;
const out = mkdtempSync(join(tmpdir(), 'empo2-remote-adapt-'));
beforeAll(async () => {
  fx = await startServedFixture();
});
afterAll(async () => {
  await fx?.close();
  rmSync(out, { recursive: true, force: true });
});

describe('empo2 adapt through a remote server', () => {
  it('gives the same trial scores and memory as the in-process engine', async () => {
    const cfg = { ...fx.cfg, memory: { ...fx.cfg.memory, top_k: 2 } };
    const opts = { task: 'fetch', trials: 3, variations: 2, split: 'test' as const, memoryFrom: null, log: () => {} };
    const local = await adapt(fx.local, cfg, { ...opts, outDir: join(out, 'local') });
    const remote = remoteEngineFromDir(fx.modelDir, { baseUrl: fx.server.url });
    const viaServer = await adapt(remote, cfg, { ...opts, outDir: join(out, 'remote') });
    remote.dispose();
    expect(viaServer).toEqual(local);
    expect(local[2].tips_shown_per_step).toBeGreaterThan(0);
  });
});
