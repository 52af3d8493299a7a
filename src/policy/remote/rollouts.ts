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
import { WeightSync, type SyncProbe } from './sync.ts';

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
    constraint: r.constraint,
    rescoreConstrained: r.rescore_constrained,
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
      await weights.push(dir, r.probe_tolerance === null ? undefined : await syncProbe(trainer, r.probe_tolerance));
    },
    description: `rollouts through ${urls.join(', ')} (weights after every update: ${pushed[r.sync]})`,
  };
}

/** Plain text any tokenizer encodes, so the probe needs no chat template; its first tokens are the prompt. */
const PROBE_TEXT =
  'You are in the kitchen. There is a red box on the table and a door to the north. > open red box\nThe red box is open. Inside is a key.';

/** The fixed sequence every server scores after a sync, with the trainer's log-probs for it now. */
async function syncProbe(trainer: PolicyEngine, tolerance: number): Promise<SyncProbe> {
  const ids = trainer.tokenizer.encode(PROBE_TEXT);
  const cut = Math.max(1, Math.floor(ids.length / 3));
  const sequence = { prompt: ids.slice(0, cut), response: ids.slice(cut) };
  const [expected] = await trainer.logprobs([sequence]);
  return { sequence, expected, tolerance };
}
