/**
 * After every update the rollout servers get the policy the update produced, so that the next
 * rollouts are on-policy (rollout.remote.sync):
 *
 * - `lora`: vLLM's runtime LoRA protocol (vLLM started with --enable-lora and
 *   VLLM_ALLOW_RUNTIME_LORA_UPDATING=True; `empo2 serve --allow-weight-updates` speaks it too,
 *   src/serve/lora.ts). Each server is sent POST /v1/unload_lora_adapter {lora_name} (a 404
 *   NotFoundError, the adapter not loaded yet, is fine) and POST /v1/load_lora_adapter {lora_name,
 *   lora_path}, with the PEFT adapter the trainer saved; requests then name the adapter as their
 *   model. Unload-then-load works on every vLLM release with the routes (load_inplace came later).
 * - `load_weights`: `empo2 serve`'s POST /v1/empo2/load_weights {path}, the whole model.
 *
 * Servers are pushed to in parallel, those out of the pool too: one that takes the weights is (back)
 * in it, one that does not leaves it with a line saying why, and a sync that no server takes fails,
 * since rollouts from stale weights would be off-policy without saying so. The path must be one the
 * servers can read (the same machine, or a shared file system).
 *
 * A server's "Success" says only that it read the files. With a probe, each server then scores a fixed
 * sequence under the pushed weights and its log-probs must equal the trainer's within the probe's
 * tolerance (rollout.remote.probe_tolerance): a server still sampling from an older adapter, or reading
 * the adapter differently (target modules, dtypes), fails the sync there like a refused load.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { httpErrorOf, requestJson, requestText, type HttpSettings } from './http.ts';
import type { RemoteEngine } from './engine.ts';
import type { ScoredSequence } from '../types.ts';

export type SyncKind = 'lora' | 'load_weights';

export interface WeightSyncOptions {
  kind: SyncKind;
  /** The name the adapter is loaded under, which requests then name as their model (lora). */
  loraName: string;
  http: HttpSettings;
}

/** Where the PEFT adapter is in what a trainer saved: the folder itself (the PyTorch worker) or its adapter/ (the TensorFlow.js engine). */
export function adapterDirOf(dir: string): string {
  for (const candidate of [dir, join(dir, 'adapter')]) if (existsSync(join(candidate, 'adapter_config.json'))) return candidate;
  throw new Error(
    `rollout.remote.sync lora: ${dir} holds no PEFT adapter (adapter_config.json), so there is nothing to push; the policy must train LoRA adapters (model.lora)`,
  );
}

/** A 404 from vLLM's handler ("cannot be found"), not from a server without the route (FastAPI's {"detail": "Not Found"}). */
function adapterNotLoaded(e: unknown): boolean {
  const answer = httpErrorOf(e);
  return answer?.status === 404 && answer.type === 'NotFoundError';
}

/** What each server must score as the trainer does once it has taken the weights. */
export interface SyncProbe {
  sequence: ScoredSequence;
  /** The trainer's log-probs of sequence.response under the weights being pushed. */
  expected: number[];
  /** Largest absolute difference allowed per token. */
  tolerance: number;
}

export class WeightSync {
  constructor(
    private readonly engine: RemoteEngine,
    private readonly o: WeightSyncOptions,
  ) {}

  /** Pushes what the trainer saved in `dir` to every server; throws when none takes it. */
  async push(dir: string, probe?: SyncProbe): Promise<void> {
    const target = this.o.kind === 'lora' ? adapterDirOf(dir) : dir;
    const servers = this.engine.serverStates();
    const model = this.o.kind === 'lora' ? this.o.loraName : probe ? await this.engine.model() : '';
    const results = await Promise.allSettled(
      servers.map(async (s) => {
        await this.pushTo(s.url.replace(/\/v1$/, ''), target);
        if (probe) await this.check(s.url, model, probe);
      }),
    );
    const failures: string[] = [];
    results.forEach((r, i) => {
      const reason = r.status === 'rejected' ? `weight sync failed: ${(r.reason as Error).message}` : null;
      this.engine.setServerDown(servers[i].url, reason);
      if (reason) failures.push(`${servers[i].url}: ${reason}`);
    });
    if (failures.length === servers.length)
      throw new Error(`rollout.remote: no rollout server took the weights in ${target}:\n  ${failures.join('\n  ')}`);
    if (this.o.kind === 'lora') this.engine.useModel(this.o.loraName);
  }

  private async check(url: string, model: string, probe: SyncProbe): Promise<void> {
    const got = await this.engine.logprobsAt(url, model, probe.sequence, this.o.http);
    if (got.length !== probe.expected.length)
      throw new Error(`the sync probe came back with ${got.length} log-probs for ${probe.expected.length} tokens`);
    let worst = 0;
    let at = 0;
    got.forEach((lp, k) => {
      const d = Math.abs(lp - probe.expected[k]);
      if (!(d <= worst)) [worst, at] = [d, k]; // NaN counts as the worst
    });
    if (!(worst <= probe.tolerance))
      throw new Error(
        `after taking the weights it scores the sync probe differently from the trainer: log-prob ${got[at]} against ${probe.expected[at]} at response token ${at} (difference ${worst}, tolerance ${probe.tolerance}, rollout.remote.probe_tolerance), so its rollouts would come from other weights (a stale or misread adapter)`,
      );
  }

  private async pushTo(base: string, target: string): Promise<void> {
    if (this.o.kind === 'load_weights') {
      await requestJson(`${base}/v1/empo2/load_weights`, { path: target }, this.o.http);
      return;
    }
    const name = this.o.loraName;
    try {
      await requestText(`${base}/v1/unload_lora_adapter`, { lora_name: name }, this.o.http);
    } catch (e) {
      if (!adapterNotLoaded(e)) throw routesHint(e, base);
    }
    await requestText(`${base}/v1/load_lora_adapter`, { lora_name: name, lora_path: target }, this.o.http).catch((e) => {
      throw routesHint(e, base);
    });
  }
}

/** A route 404 means the server has no runtime LoRA routes: say how to turn them on. */
function routesHint(e: unknown, base: string): unknown {
  const answer = httpErrorOf(e);
  if (answer?.status !== 404 || answer.type === 'NotFoundError') return e;
  return new Error(
    `${base} has no runtime LoRA routes (${answer.message}): start vLLM with --enable-lora and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True, or empo2 serve with --allow-weight-updates`,
  );
}
