/**
 * LoRA (Hu et al., 2021) for the Qwen2/Llama model: each targeted Linear y = x·Wᵀ gains
 * scaling·(dropout(x)·Aᵀ)·Bᵀ with A [r, in], B [out, r], scaling = lora_alpha / r. While adapters
 * are attached only A and B train; the base weights are frozen.
 *
 * Adapters are saved and loaded in PEFT's layout so either side can use the other's:
 * `adapter_config.json` (PEFT's LoraConfig keys) and `adapter_model.safetensors` with tensor names
 * `base_model.model.<module>.lora_A.weight` / `.lora_B.weight`. Initialisation follows PEFT's
 * default: A uniform in ±1/√in (Kaiming-uniform with a = √5), B zero, so attaching changes nothing.
 */
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { tf } from './backend.ts';
import { readSafetensors, toFloat32, writeSafetensors, type TensorToWrite } from '../safetensors.ts';
import { writeJsonAtomic } from '../../util/atomic-write.ts';

/**
 * What LoRA needs of the model it adapts (Qwen2Model is one): its layer count, its weights by name
 * and its adapter slot. Named here so that the model imports LoRA and not the other way round.
 */
export interface LoraBase {
  readonly config: { readonly num_hidden_layers: number };
  readonly params: ReadonlyMap<string, tf.Variable>;
  readonly lora: LoraAdapters | null;
  setLora(adapters: LoraAdapters | null): void;
}

/**
 * LoRA settings. The same shape as the PyTorch worker's LoraSettings, so one config object serves
 * both engines; saved to adapter_config.json under PEFT's names (r, lora_alpha, lora_dropout,
 * target_modules, use_rslora).
 */
export interface LoraConfig {
  r: number;
  /** Scaling numerator: the update is (alpha / r)·B·A. */
  alpha: number;
  /** Dropout on the adapter input, in training only. */
  dropout: number;
  /**
   * Module names matched as PEFT does: a name matches a module when it equals its path or its last
   * component (e.g. "q_proj"). The single entry "all-linear" targets every projection (never the
   * output layer).
   */
  targetModules: string[];
  /** Instead of targetModules: a regular expression that must match a module's whole path (PEFT's string form). */
  targetRegex?: string;
  /** Rank-stabilised scaling alpha / √r instead of alpha / r. */
  useRslora?: boolean;
}

export interface LoraModule {
  /** [r, in] */
  A: tf.Variable;
  /** [out, r] */
  B: tf.Variable;
}

export const ADAPTER_CONFIG_FILE = 'adapter_config.json';
export const ADAPTER_WEIGHTS_FILE = 'adapter_model.safetensors';
/** PEFT's prefix: PeftModel.base_model (LoraModel) .model (the transformers model). */
const PEFT_PREFIX = 'base_model.model.';
const LINEAR_SUFFIXES = [
  'self_attn.q_proj',
  'self_attn.k_proj',
  'self_attn.v_proj',
  'self_attn.o_proj',
  'mlp.gate_proj',
  'mlp.up_proj',
  'mlp.down_proj',
];

export function validateLoraConfig(c: LoraConfig, where = 'lora'): void {
  if (typeof c !== 'object' || c === null) throw new Error(`${where}: expected an object with r, alpha, dropout, targetModules`);
  if (!Number.isInteger(c.r) || c.r <= 0) throw new Error(`${where}: "r" must be a positive integer (got ${JSON.stringify(c.r)})`);
  if (typeof c.alpha !== 'number' || !(c.alpha > 0))
    throw new Error(`${where}: "alpha" must be a positive number (got ${JSON.stringify(c.alpha)})`);
  if (typeof c.dropout !== 'number' || !(c.dropout >= 0 && c.dropout < 1))
    throw new Error(`${where}: "dropout" must be in [0, 1) (got ${JSON.stringify(c.dropout)})`);
  const t = c.targetModules;
  if (c.targetRegex !== undefined) {
    if (typeof c.targetRegex !== 'string' || c.targetRegex === '')
      throw new Error(`${where}: "targetRegex" must be a non-empty regular expression`);
    if (t !== undefined && !(Array.isArray(t) && t.length === 0))
      throw new Error(`${where}: give "targetModules" or "targetRegex", not both`);
  } else if (!Array.isArray(t) || t.length === 0 || !t.every((x) => typeof x === 'string' && x.length > 0)) {
    throw new Error(`${where}: "targetModules" must be a non-empty list of module names (got ${JSON.stringify(t)})`);
  } else if (t.includes('all-linear') && t.length > 1) throw new Error(`${where}: "all-linear" must be the only entry of "targetModules"`);
  if (c.useRslora !== undefined && typeof c.useRslora !== 'boolean') throw new Error(`${where}: "useRslora" must be true or false`);
}

export function loraScaling(c: LoraConfig): number {
  return c.useRslora ? c.alpha / Math.sqrt(c.r) : c.alpha / c.r;
}

/** The model's Linear modules (by path, e.g. "model.layers.0.self_attn.q_proj") that `c` selects. */
export function matchTargetModules(model: LoraBase, c: Pick<LoraConfig, 'targetModules' | 'targetRegex'>, where = 'lora'): string[] {
  const linear: string[] = [];
  for (let i = 0; i < model.config.num_hidden_layers; i++) for (const s of LINEAR_SUFFIXES) linear.push(`model.layers.${i}.${s}`);
  if (c.targetRegex !== undefined) {
    let re: RegExp;
    try {
      re = new RegExp(`^(?:${c.targetRegex})$`);
    } catch (e) {
      throw new Error(
        `${where}: "targetRegex" ${JSON.stringify(c.targetRegex)} is not a valid regular expression: ${(e as Error).message}`,
      );
    }
    const hit = linear.filter((m) => re.test(m));
    if (hit.length === 0)
      throw new Error(
        `${where}: "targetRegex" ${JSON.stringify(c.targetRegex)} matches none of the model's projections (e.g. ${linear[0]})`,
      );
    return hit;
  }
  const targets = c.targetModules;
  if (targets.length === 1 && targets[0] === 'all-linear') return linear;
  const known = new Set(LINEAR_SUFFIXES.map((s) => s.split('.').pop()!));
  for (const t of targets) {
    if (!linear.some((m) => m === t || m.endsWith('.' + t))) {
      throw new Error(`${where}: target module ${JSON.stringify(t)} is not a projection of this model (known: ${[...known].join(', ')})`);
    }
  }
  return linear.filter((m) => targets.some((t) => m === t || m.endsWith('.' + t)));
}

export class LoraAdapters {
  readonly scaling: number;
  /**
   * Dropout masks drawn so far; each call seeds its mask from it. A checkpointed layer sets it back
   * to replay its forward pass's masks when the backward pass recomputes the layer.
   */
  dropoutCalls = 0;
  private named: Map<string, tf.Variable> | null = null;

  constructor(
    readonly config: LoraConfig,
    /** By module path, e.g. "model.layers.0.self_attn.q_proj". */
    readonly modules: Map<string, LoraModule>,
    private readonly dropoutSeed: number,
  ) {
    validateLoraConfig(config);
    this.scaling = loraScaling(config);
  }

  static create(model: LoraBase, config: LoraConfig, seed: number): LoraAdapters {
    validateLoraConfig(config);
    const modules = new Map<string, LoraModule>();
    matchTargetModules(model, config).forEach((module, k) => {
      const [out, inp] = model.params.get(module + '.weight')!.shape;
      const bound = 1 / Math.sqrt(inp);
      const initialA = tf.randomUniform([config.r, inp], -bound, bound, 'float32', seed * 100_003 + k + 1 /* 0 would mean unseeded */);
      const initialB = tf.zeros([out, config.r]);
      modules.set(module, { A: tf.variable(initialA, true), B: tf.variable(initialB, true) });
      // Variables share these buffers; disposing them here keeps a stale copy from outliving the first update.
      tf.dispose([initialA, initialB]);
    });
    return new LoraAdapters(config, modules, seed);
  }

  /** scaling·(dropout(x)·Aᵀ)·Bᵀ for x [n, in]; dropout only when training. */
  delta(x: tf.Tensor, m: LoraModule, training: boolean): tf.Tensor {
    const rate = this.config.dropout;
    // A fresh seed per call: every layer and step draws its own mask, reproducibly.
    const input = training && rate > 0 ? tf.dropout(x, rate, undefined, this.dropoutSeed * 1_000_003 + ++this.dropoutCalls) : x;
    // Scaled while still [n, r]: scaling the [n, out] result would hold one more activation of that size.
    return tf.matMul(tf.matMul(input, m.A, false, true).mul(this.scaling), m.B, false, true);
  }

  /** Adapter matrices by their PEFT name without the PeftModel prefix (".lora_A.weight" etc.). */
  variables(): Map<string, tf.Variable> {
    if (!this.named) {
      this.named = new Map();
      for (const [module, { A, B }] of this.modules) {
        this.named.set(`${module}.lora_A.weight`, A);
        this.named.set(`${module}.lora_B.weight`, B);
      }
    }
    return this.named;
  }

  dispose(): void {
    for (const { A, B } of this.modules.values()) tf.dispose([A, B]);
    this.modules.clear();
    this.named = null;
  }
}

export interface SaveAdapterOptions {
  /** Recorded in adapter_config.json for tools that reload the base by name. */
  baseModelNameOrPath?: string | null;
}

/** Writes the model's adapters as a PEFT adapter directory. */
export async function saveLoraAdapter(dir: string, model: LoraBase, opts: SaveAdapterOptions = {}): Promise<void> {
  const lora = model.lora;
  if (!lora) throw new Error('saveLoraAdapter: the model has no LoRA adapters');
  mkdirSync(dir, { recursive: true });
  const tensors = new Map<string, TensorToWrite>();
  for (const [name, v] of lora.variables())
    tensors.set(PEFT_PREFIX + name, { dtype: 'F32', shape: v.shape, data: (await v.data()) as Float32Array });
  writeSafetensors(join(dir, ADAPTER_WEIGHTS_FILE), tensors, { format: 'pt' });
  const c = lora.config;
  // Module names as PEFT records them: the last path component of every adapted Linear.
  const targets = c.targetRegex ?? [...new Set([...lora.modules.keys()].map((m) => m.split('.').pop()!))].sort();
  writeJsonAtomic(join(dir, ADAPTER_CONFIG_FILE), {
    peft_type: 'LORA',
    task_type: 'CAUSAL_LM',
    base_model_name_or_path: opts.baseModelNameOrPath ?? null,
    r: c.r,
    lora_alpha: c.alpha,
    lora_dropout: c.dropout,
    target_modules: targets,
    use_rslora: !!c.useRslora,
    use_dora: false,
    bias: 'none',
    fan_in_fan_out: false,
    init_lora_weights: true,
    inference_mode: true,
    modules_to_save: null,
    layers_to_transform: null,
    layers_pattern: null,
    rank_pattern: {},
    alpha_pattern: {},
  });
}

/** Options of adapter_config.json that change the computation and that we do not implement. */
function refuseUnsupported(raw: Record<string, unknown>, where: string): void {
  const empty = (v: unknown) =>
    v === undefined ||
    v === null ||
    v === false ||
    (Array.isArray(v) && v.length === 0) ||
    (typeof v === 'object' && v !== null && Object.keys(v).length === 0);
  if (raw.peft_type !== undefined && raw.peft_type !== 'LORA')
    throw new Error(`${where}: "peft_type" ${JSON.stringify(raw.peft_type)} is not LORA`);
  for (const key of [
    'use_dora',
    'fan_in_fan_out',
    'modules_to_save',
    'layers_to_transform',
    'rank_pattern',
    'alpha_pattern',
    'lora_bias',
    'target_parameters',
    'trainable_token_indices',
    'exclude_modules',
  ]) {
    if (!empty(raw[key])) throw new Error(`${where}: "${key}" ${JSON.stringify(raw[key])} is not implemented`);
  }
  if (raw.bias !== undefined && raw.bias !== 'none')
    throw new Error(`${where}: "bias" ${JSON.stringify(raw.bias)} is not implemented (only "none")`);
}

/**
 * Reads a PEFT LoRA adapter directory for `model` (which must be the base it was trained on) and
 * attaches it, replacing any adapters the model had. `dropoutSeed` seeds later training dropout.
 */
export function loadLoraAdapter(dir: string, model: LoraBase, dropoutSeed = 0): LoraAdapters {
  const adapters = readLoraAdapter(dir, model, dropoutSeed);
  model.setLora(adapters);
  return adapters;
}

/** Reads a PEFT LoRA adapter directory for `model` without attaching it (Qwen2Model.swapLora does). */
export function readLoraAdapter(dir: string, model: LoraBase, dropoutSeed = 0): LoraAdapters {
  const configPath = join(dir, ADAPTER_CONFIG_FILE);
  const weightsPath = join(dir, ADAPTER_WEIGHTS_FILE);
  if (!existsSync(configPath))
    throw new Error(`${configPath} is missing (a PEFT adapter directory needs ${ADAPTER_CONFIG_FILE} and ${ADAPTER_WEIGHTS_FILE})`);
  if (!existsSync(weightsPath)) throw new Error(`${weightsPath} is missing`);
  let raw: Record<string, unknown>;
  try {
    raw = JSON.parse(readFileSync(configPath, 'utf8'));
  } catch (e) {
    throw new Error(`${configPath} is not valid JSON: ${(e as Error).message}`);
  }
  refuseUnsupported(raw, configPath);
  const targets = raw.target_modules;
  const config: LoraConfig = {
    r: raw.r as number,
    alpha: (raw.lora_alpha ?? 8) as number, // PEFT's default
    dropout: (raw.lora_dropout ?? 0) as number,
    // PEFT stores a list of names, or one string: "all-linear" or a regular expression.
    targetModules: typeof targets === 'string' ? (targets === 'all-linear' ? ['all-linear'] : []) : (targets as string[]),
    useRslora: (raw.use_rslora ?? false) as boolean,
  };
  if (typeof targets === 'string' && targets !== 'all-linear') config.targetRegex = targets;
  validateLoraConfig(config, configPath);
  const modulesWanted = matchTargetModules(model, config, configPath);
  const { tensors } = readSafetensors(weightsPath);
  const modules = new Map<string, LoraModule>();
  const used = new Set<string>();
  try {
    for (const module of modulesWanted) {
      const [out, inp] = model.params.get(module + '.weight')!.shape;
      const load = (part: 'lora_A' | 'lora_B', shape: number[]): tf.Variable => {
        const name = `${PEFT_PREFIX}${module}.${part}.weight`;
        const t = tensors.get(name);
        if (!t) throw new Error(`${weightsPath}: no tensor "${name}" (${configPath} targets ${module})`);
        if (t.dtype !== 'F32' && t.dtype !== 'F16' && t.dtype !== 'BF16')
          throw new Error(`${weightsPath}: tensor "${name}" has dtype ${t.dtype}; only F32, F16 and BF16 load`);
        if (t.shape.join(',') !== shape.join(','))
          throw new Error(`${weightsPath}: tensor "${name}" has shape [${t.shape}] but r=${config.r} and the base model imply [${shape}]`);
        used.add(name);
        const initial = tf.tensor(toFloat32(t), shape);
        const variable = tf.variable(initial, true);
        initial.dispose();
        return variable;
      };
      const A = load('lora_A', [config.r, inp]);
      modules.set(module, { A, B: load('lora_B', [out, config.r]) });
    }
    const extra = [...tensors.keys()].filter((n) => !used.has(n));
    if (extra.length > 0)
      throw new Error(
        `${weightsPath}: tensor "${extra[0]}" belongs to no module that ${configPath} targets${extra.length > 1 ? ` (and ${extra.length - 1} more)` : ''}`,
      );
  } catch (e) {
    for (const { A, B } of modules.values()) tf.dispose([A, B]);
    throw e;
  }
  return new LoraAdapters(config, modules, dropoutSeed);
}
