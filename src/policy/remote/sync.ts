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
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { httpErrorOf, requestJson, requestText, type HttpSettings } from './http.ts';
import type { RemoteEngine } from './engine.ts';

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

export class WeightSync {
  constructor(
    private readonly engine: RemoteEngine,
    private readonly o: WeightSyncOptions,
  ) {}

  /** Pushes what the trainer saved in `dir` to every server; throws when none takes it. */
  async push(dir: string): Promise<void> {
    const target = this.o.kind === 'lora' ? adapterDirOf(dir) : dir;
    const servers = this.engine.serverStates();
    const results = await Promise.allSettled(servers.map((s) => this.pushTo(s.url.replace(/\/v1$/, ''), target)));
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
