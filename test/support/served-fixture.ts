/**
 * For tests: the trainer's default tiny policy (built-in environment corpus, hidden 32, one
 * layer, vocabulary 300), saved as a model directory and served by `empo2 serve`'s code on a
 * free loopback port, next to an in-process engine loaded from the same directory.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadConfig } from '../../src/config/load.ts';
import type { Config } from '../../src/config/schema.ts';
import { initBackend } from '../../src/policy/tfjs/backend.ts';
import type { TfjsEngine } from '../../src/policy/tfjs/engine.ts';
import { createEngine } from '../../src/policy/create-engine.ts';
import { loadServedModel } from '../../src/serve/load.ts';
import { startServer, type RunningServer, type ServeOptions } from '../../src/serve/server.ts';
import { TINY_MODEL } from './tiny.ts';
import { environmentCorpus } from '../../src/envs/index.ts';

export interface ServedFixture {
  cfg: Config;
  modelDir: string;
  /** Loaded from modelDir by the test itself, apart from the server's. */
  local: TfjsEngine;
  server: RunningServer;
  close(): Promise<void>;
}

export function tinyConfig(runDir: string): Config {
  return loadConfig(null, [`run_dir=${runDir}`, 'seed=4', ...TINY_MODEL, 'env.tasks=[fetch]', 'env.eval_variations=2', 'env.max_steps=4']);
}

/** `options` go to startServer as they are (limits, API key, weight updates). */
export async function startServedFixture(modelName = 'tiny', options: Partial<ServeOptions> = {}): Promise<ServedFixture> {
  await initBackend();
  const root = mkdtempSync(join(tmpdir(), 'empo2-serve-'));
  const cfg = tinyConfig(join(root, 'run'));
  const modelDir = join(root, 'model');
  const { engine: built } = await createEngine(cfg, 'fresh', () => environmentCorpus(cfg.env));
  await built.save(modelDir);
  built.dispose();
  const served = await loadServedModel(modelDir);
  const { engine: local } = await createEngine({ ...cfg, model: { ...cfg.model, path: modelDir } }, 'fresh');
  const server = await startServer({
    engine: served.engine,
    modelName,
    port: 0,
    vocabSize: served.vocabSize,
    maxModelLen: served.maxModelLen,
    ...options,
  });
  return {
    cfg,
    modelDir,
    local,
    server,
    close: async () => {
      await server.close();
      server.queue.current.engine.dispose();
      local.dispose();
      rmSync(root, { recursive: true, force: true });
    },
  };
}
