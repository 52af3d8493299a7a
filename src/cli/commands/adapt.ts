/**
 * `empo2 adapt`: a frozen checkpoint's memory-only adaptation to a task, by retrieved tips (EMPO²'s
 * memory) or by Reflexion's plans, played here or through an OpenAI-compatible server.
 */
import type { Config } from '../../config/schema.ts';
import type { PolicyEngine } from '../../policy/types.ts';
import type { TrialOptions } from '../../adapt/trials.ts';

export interface AdaptCommandOptions {
  method: 'tips' | 'reflexion';
  /** Whether the config came from the checkpoint's run (config.yaml); if not, an instruct model's directory is its own model.path. */
  modelIsRunConfig: boolean;
  remote?: { baseUrl: string; model?: string };
  trials: TrialOptions;
  reflexion: { window?: number; reflectionMaxTokens?: number };
  /** With tips: the checkpoint whose memory to start from (null: an empty memory). */
  memoryFrom: string | null;
}

export async function adaptCommand(dir: string, cfg: Config, o: AdaptCommandOptions): Promise<void> {
  const { chatTemplateIn } = await import('../../trainer/prompt-style.ts');
  if (!o.modelIsRunConfig && !cfg.model.path && chatTemplateIn(dir)) cfg = { ...cfg, model: { ...cfg.model, path: dir } };
  let engine: PolicyEngine;
  if (o.remote) {
    const { remoteEngineFromDir } = await import('../../policy/remote/index.ts');
    engine = remoteEngineFromDir(dir, o.remote);
  } else {
    const { initBackend } = await import('../../policy/tfjs/backend.ts');
    await initBackend();
    const { createPlayingEngine } = await import('../../policy/engines.ts');
    engine = (await createPlayingEngine(cfg, dir)).engine;
  }
  try {
    if (o.method === 'reflexion') {
      const { reflexion } = await import('../../adapt/reflexion.ts');
      await reflexion(engine, cfg, { ...o.trials, ...o.reflexion });
    } else {
      const { adapt } = await import('../../adapt/tips.ts');
      await adapt(engine, cfg, { ...o.trials, memoryFrom: o.memoryFrom });
    }
  } finally {
    engine.dispose();
  }
}
