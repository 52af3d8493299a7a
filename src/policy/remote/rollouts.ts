/**
 * Training rollouts through OpenAI-compatible servers while the update runs in the trainer
 * (rollout.remote): the remote engine over the configured servers, whose lost rows end their episodes
 * instead of the run, and the weight sync after every update (./sync.ts). The trainer writes its
 * policy to <run>/rollout-policy and the servers load it from there.
 */
import { basename, resolve } from 'node:path';
import type { Config } from '../../config/schema.ts';
import { endTokenIds } from '../chat-tokens.ts';
import type { PolicyEngine } from '../types.ts';
import { RemoteEngine } from './engine.ts';
import { WeightSync } from './sync.ts';

export interface RemoteRollouts {
  engine: RemoteEngine;
  /** Writes the trainer's policy and pushes it to the servers (nothing with sync: none). */
  sync: () => Promise<void>;
  /** One line for the run's banner. */
  description: string;
}

export function remoteRollouts(cfg: Config, trainer: PolicyEngine, log: (line: string) => void): RemoteRollouts {
  const r = cfg.rollout.remote;
  if (!r) throw new Error('remoteRollouts: rollout.remote is null');
  const urls = typeof r.base_url === 'string' ? [r.base_url] : r.base_url;
  const loraName = r.lora_name ?? `empo2-${basename(resolve(cfg.run_dir))}`;
  const http = { timeoutMs: r.timeout_s * 1000, retries: r.retries, backoffMs: 500 };
  const engine = new RemoteEngine({
    baseUrl: urls,
    model: r.model ?? undefined,
    tokenizer: trainer.tokenizer,
    endTokens: endTokenIds(trainer.tokenizer),
    timeoutMs: http.timeoutMs,
    retries: r.retries,
    concurrency: r.concurrency,
    onServerLoss: 'error',
    warn: log,
  });
  const weights = r.sync === 'none' ? null : new WeightSync(engine, { kind: r.sync, loraName, http });
  const dir = resolve(cfg.run_dir, 'rollout-policy');
  const pushed = {
    none: 'not pushed (sync: none)',
    load_weights: 'the whole model pushed',
    lora: `the LoRA adapter pushed as "${loraName}"`,
  };
  return {
    engine,
    sync: async () => {
      if (!weights) return;
      await trainer.save(dir);
      await weights.push(dir);
    },
    description: `rollouts through ${urls.join(', ')} (weights after every update: ${pushed[r.sync]})`,
  };
}
