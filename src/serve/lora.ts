/**
 * Runtime LoRA adapters as vLLM serves them (with VLLM_ALLOW_RUNTIME_LORA_UPDATING set):
 *
 *   POST /v1/load_lora_adapter   {"lora_name": n, "lora_path": dir, "load_inplace": false}
 *   POST /v1/unload_lora_adapter {"lora_name": n}
 *
 * after which a request whose `model` is n runs on the base model plus that adapter, and answers with
 * `model: n`; /v1/models lists it with its `root` (the path given) and `parent` (the base). A trainer
 * pushes the PEFT adapter it saves after every update this way (src/policy/remote/sync.ts), to
 * vLLM and to `empo2 serve` alike.
 *
 * Requests, answers and messages are vLLM's, read from vllm-project/vllm at 00153c8b
 * (vllm/entrypoints/openai/models/serving.py: OpenAIServingModels.load_lora_adapter,
 * unload_lora_adapter and their checks; vllm/entrypoints/serve/lora/protocol.py; the router answers
 * success as a 200 plain-text body, errors as {"error": {message, type, param, code}} with the HTTP
 * status as `code`):
 * - success: 200, "Success: LoRA adapter 'n' added successfully." / "... removed successfully.";
 * - a name or path missing or empty: 400 InvalidUserInput "Both 'lora_name' and 'lora_path' must be
 *   provided." (unload: "'lora_name' needs to be provided to unload a LoRA adapter.");
 * - a name already loaded without load_inplace: 400 InvalidUserInput "The lora adapter 'n' has
 *   already been loaded. If you want to load the adapter in place, set 'load_inplace' to True.";
 *   with load_inplace: true the adapter is read again and replaces the loaded one under the same name;
 * - no adapter at the path: 404 NotFoundError "Loading lora n failed: No adapter found for <path>";
 * - unloading a name not loaded: 404 NotFoundError "The lora adapter 'n' cannot be found."
 * Where this server differs, on purpose: it loads only from under its weight roots (vLLM loads any
 * path the server can read), and answers a path outside them as "No adapter found" so a client learns
 * nothing about the file system (the log says why); an adapter that exists but does not fit the base
 * is 400 BadRequestError with the reason (vLLM at 00153c8b: 500 InternalServerError); a name that is
 * the base model's is refused; unknown body fields are refused, as in every route of this server.
 *
 * Loads and unloads run through the engine queue between engine calls, so a request queued before
 * a load runs without the new adapter and one queued after runs with it.
 */
import { realpathSync } from 'node:fs';
import { isAbsolute, relative, resolve, sep } from 'node:path';
import type { EngineQueue, ServedEngine } from './queue.ts';
import { RequestError } from './protocol.ts';

/** An adapter read for the served engine: put on it for a request and taken off after. */
export interface LoadedAdapter {
  attach(served: ServedEngine): void;
  detach(served: ServedEngine): void;
  dispose(): void;
}

/** Reads the PEFT adapter in `dir` for the engine being served; throws with the reason it does not fit. */
export type AdapterReader = (dir: string, served: ServedEngine) => LoadedAdapter;

/** A 200 answer whose body is text, as vLLM's LoRA routes answer. */
export class PlainText {
  constructor(readonly text: string) {}
}

const invalid = (message: string, param: string | null) => new RequestError(400, message, param, 'InvalidUserInput', 400);
const notFound = (message: string, param: string) => new RequestError(404, message, param, 'NotFoundError', 404);

/** Whether `dir` is `root` or inside it (both real paths). */
export function isUnder(root: string, dir: string): boolean {
  const rel = relative(root, dir);
  return rel === '' || (rel !== '..' && !rel.startsWith(`..${sep}`) && !isAbsolute(rel));
}

/** The body as an object with only `allowed` fields, or a 400 naming what is wrong. */
function fieldsOf(body: unknown, allowed: readonly string[]): Record<string, unknown> {
  if (typeof body !== 'object' || body === null || Array.isArray(body))
    throw new RequestError(400, 'the request body must be a JSON object', null);
  const unknown = Object.keys(body).find((k) => !allowed.includes(k));
  if (unknown !== undefined)
    throw new RequestError(400, `unknown field "${unknown}" (empo2 serve refuses fields it would otherwise ignore)`, unknown);
  return body as Record<string, unknown>;
}

const filled = (v: unknown): v is string => typeof v === 'string' && v.length > 0;

export class AdapterRegistry {
  private readonly loaded = new Map<string, { path: string; adapter: LoadedAdapter }>();
  /** Loads of each name since the start, kept across unloads: the adapter's policy version (./turn.ts). */
  private readonly loads = new Map<string, number>();
  private attached: string | null = null;

  constructor(
    private readonly o: {
      baseName: string;
      /** Real paths; adapters load only from under these. */
      roots: readonly string[];
      read: AdapterReader;
      queue: () => EngineQueue;
      log?: (line: string) => void;
    },
  ) {}

  has(name: string): boolean {
    return this.loaded.has(name);
  }

  /** How many times an adapter was loaded under `name` (0: never). */
  loadsOf(name: string): number {
    return this.loads.get(name) ?? 0;
  }

  /** Loaded adapters in load order, with the path each was loaded from as the client gave it. */
  list(): { name: string; path: string }[] {
    return [...this.loaded].map(([name, { path }]) => ({ name, path }));
  }

  /** The queue's hook: the named adapter on the engine (null: none) for the call about to run. */
  use(name: string | null, served: ServedEngine): void {
    if (name === this.attached) return;
    const next = name === null ? null : this.loaded.get(name);
    if (next === undefined) throw notFound(`The model \`${name}\` does not exist.`, 'model');
    if (this.attached !== null) this.loaded.get(this.attached)?.adapter.detach(served);
    this.attached = null;
    next?.adapter.attach(served);
    this.attached = name;
  }

  /** Drops every adapter: the base weights they were read for are being replaced (load_weights). */
  clear(): void {
    for (const [name, { adapter }] of this.loaded) {
      adapter.dispose();
      this.o.log?.(`unloaded LoRA adapter "${name}": the base weights were replaced`);
    }
    this.loaded.clear();
    this.attached = null;
  }

  async load(body: unknown): Promise<PlainText> {
    const b = fieldsOf(body, ['lora_name', 'lora_path', 'load_inplace']);
    for (const key of ['lora_name', 'lora_path'])
      if (!filled(b[key])) throw invalid("Both 'lora_name' and 'lora_path' must be provided.", key);
    const name = b.lora_name as string;
    const path = b.lora_path as string;
    if (b.load_inplace !== undefined && b.load_inplace !== null && typeof b.load_inplace !== 'boolean')
      throw new RequestError(400, `"load_inplace" must be true or false (got ${JSON.stringify(b.load_inplace)})`, 'load_inplace');
    const inPlace = b.load_inplace === true;
    if (name === this.o.baseName) throw invalid(`"${name}" is the base model's name; give the adapter another lora_name`, 'lora_name');
    return this.o.queue().exclusive(async (served) => {
      if (this.loaded.has(name) && !inPlace)
        throw invalid(
          `The lora adapter '${name}' has already been loaded. If you want to load the adapter in place, set 'load_inplace' to True.`,
          'lora_name',
        );
      const dir = this.resolveUnderRoots(name, path);
      // The reader wants the bare base model; the adapter of the last request goes back on at the next one that names it.
      if (this.attached !== null) {
        this.loaded.get(this.attached)?.adapter.detach(served);
        this.attached = null;
      }
      let adapter: LoadedAdapter;
      try {
        adapter = this.o.read(dir, served);
      } catch (e) {
        throw new RequestError(400, `Loading lora ${name} failed: ${(e as Error).message}`, 'lora_path', 'BadRequestError', 400);
      }
      const previous = this.loaded.get(name);
      if (previous) {
        if (this.attached === name) {
          previous.adapter.detach(served);
          this.attached = null;
        }
        previous.adapter.dispose();
      }
      this.loaded.set(name, { path, adapter });
      this.loads.set(name, this.loadsOf(name) + 1);
      this.o.log?.(`loaded LoRA adapter "${name}" from ${dir}${previous ? ' (in place)' : ''}`);
      return new PlainText(`Success: LoRA adapter '${name}' added successfully.`);
    });
  }

  async unload(body: unknown): Promise<PlainText> {
    const b = fieldsOf(body, ['lora_name', 'lora_int_id']);
    if (!filled(b.lora_name)) throw invalid("'lora_name' needs to be provided to unload a LoRA adapter.", 'lora_name');
    if (b.lora_int_id !== undefined && b.lora_int_id !== null && !Number.isInteger(b.lora_int_id))
      throw new RequestError(400, `"lora_int_id" must be an integer or null (got ${JSON.stringify(b.lora_int_id)})`, 'lora_int_id');
    const name = b.lora_name;
    return this.o.queue().exclusive(async (served) => {
      const entry = this.loaded.get(name);
      if (!entry) throw notFound(`The lora adapter '${name}' cannot be found.`, 'lora_name');
      if (this.attached === name) {
        entry.adapter.detach(served);
        this.attached = null;
      }
      entry.adapter.dispose();
      this.loaded.delete(name);
      this.o.log?.(`unloaded LoRA adapter "${name}"`);
      return new PlainText(`Success: LoRA adapter '${name}' removed successfully.`);
    });
  }

  private resolveUnderRoots(name: string, path: string): string {
    const missing = (why: string) => {
      this.o.log?.(`load_lora_adapter ${JSON.stringify(name)} from ${JSON.stringify(path)} refused: ${why}`);
      return notFound(`Loading lora ${name} failed: No adapter found for ${path}`, 'lora_path');
    };
    let dir: string;
    try {
      dir = realpathSync(resolve(path));
    } catch (e) {
      throw missing((e as Error).message);
    }
    if (!this.o.roots.some((root) => isUnder(root, dir))) throw missing(`${dir} is not under a weight root (${this.o.roots.join(', ')})`);
    return dir;
  }
}
