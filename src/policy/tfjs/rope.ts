/**
 * Rotary position embedding frequencies, unscaled or with the context-extension schemes that
 * released Qwen2 / Llama checkpoints ship with: linear position interpolation, Llama 3.1's
 * frequency-band scaling ("llama3") and YaRN. The formulas follow transformers'
 * `modeling_rope_utils.py`; hf.test.ts checks the resulting logits against it.
 *
 * Schemes whose frequencies change with the running sequence length ("dynamic", "longrope") are
 * not offered: they make a cached generation and a later scoring pass see different embeddings.
 */

export type RopeScaling =
  | { rope_type: 'linear'; factor: number }
  | { rope_type: 'llama3'; factor: number; low_freq_factor: number; high_freq_factor: number; original_max_position_embeddings: number }
  | {
      rope_type: 'yarn';
      factor: number;
      original_max_position_embeddings: number;
      attention_factor?: number | null;
      beta_fast?: number | null;
      beta_slow?: number | null;
      mscale?: number | null;
      mscale_all_dim?: number | null;
      truncate?: boolean | null;
    };

export const SCALED_ROPE_TYPES = ['linear', 'llama3', 'yarn'] as const;

export interface RotaryFrequencies {
  /** θ_i for i < headDim/2: the angle of pair i advances by θ_i per position. */
  invFreq: Float32Array;
  /** Multiplies cos and sin (YaRN's attention temperature); 1 for the other schemes. */
  attentionScaling: number;
}

function unscaled(theta: number, headDim: number): Float64Array {
  const freqs = new Float64Array(headDim / 2);
  for (let i = 0; i < headDim / 2; i++) freqs[i] = 1 / Math.pow(theta, (2 * i) / headDim);
  return freqs;
}

export function rotaryFrequencies(theta: number, headDim: number, scaling?: RopeScaling | null): RotaryFrequencies {
  const base = unscaled(theta, headDim);
  if (!scaling) return { invFreq: Float32Array.from(base), attentionScaling: 1 };
  switch (scaling.rope_type) {
    case 'linear':
      // Position interpolation: positions are squeezed by `factor`, i.e. every frequency divided.
      return { invFreq: Float32Array.from(base, (f) => f / scaling.factor), attentionScaling: 1 };
    case 'llama3': {
      const { factor, low_freq_factor: low, high_freq_factor: high, original_max_position_embeddings: context } = scaling;
      const lowFreqWavelength = context / low;
      const highFreqWavelength = context / high;
      const out = Float32Array.from(base, (f) => {
        const wavelength = (2 * Math.PI) / f;
        if (wavelength < highFreqWavelength) return f; // short wavelengths: seen in full during pre-training
        if (wavelength > lowFreqWavelength) return f / factor; // long ones: interpolated
        const smooth = (context / wavelength - low) / (high - low);
        return (1 - smooth) * (f / factor) + smooth * f;
      });
      return { invFreq: out, attentionScaling: 1 };
    }
    case 'yarn': {
      const { factor, original_max_position_embeddings: context } = scaling;
      const mscale = (scale: number, m = 1): number => (scale <= 1 ? 1 : 0.1 * m * Math.log(scale) + 1);
      let attentionScaling = scaling.attention_factor ?? undefined;
      if (attentionScaling === undefined) {
        attentionScaling =
          scaling.mscale && scaling.mscale_all_dim
            ? mscale(factor, scaling.mscale) / mscale(factor, scaling.mscale_all_dim)
            : mscale(factor);
      }
      const betaFast = scaling.beta_fast || 32;
      const betaSlow = scaling.beta_slow || 1;
      // The pair index at which a frequency completes `rotations` turns over the original context.
      const correctionDim = (rotations: number): number =>
        (headDim * Math.log(context / (rotations * 2 * Math.PI))) / (2 * Math.log(theta));
      let lowDim = correctionDim(betaFast);
      let highDim = correctionDim(betaSlow);
      if (scaling.truncate ?? true) {
        lowDim = Math.floor(lowDim);
        highDim = Math.ceil(highDim);
      }
      lowDim = Math.max(lowDim, 0);
      highDim = Math.min(highDim, headDim - 1);
      if (lowDim === highDim) highDim += 0.001;
      const out = Float32Array.from(base, (f, i) => {
        const ramp = Math.min(1, Math.max(0, (i - lowDim) / (highDim - lowDim)));
        const extrapolation = 1 - ramp; // 1: keep the original frequency, 0: interpolate by `factor`
        return (f / factor) * (1 - extrapolation) + f * extrapolation;
      });
      return { invFreq: out, attentionScaling };
    }
  }
}

type Json = Record<string, unknown>;

/**
 * Reads a scaling entry (transformers 4's `rope_scaling` or 5's `rope_parameters`) into a
 * RopeScaling, or null for unscaled. `contextFallback` is what transformers uses when the entry
 * has no original_max_position_embeddings (the config's top-level one, else max_position_embeddings).
 */
export function parseRopeScaling(
  entry: Json,
  key: string,
  where: string,
  contextFallback: number,
  maxPositions: number,
): RopeScaling | null {
  const type = entry.rope_type ?? entry.type ?? 'default';
  if (type === 'default') return null;
  const num = (field: string, fallback?: number): number => {
    const v = entry[field] ?? fallback;
    if (typeof v !== 'number' || !Number.isFinite(v) || !(v > 0))
      throw new Error(
        `${where}: "${key}.${field}" must be a positive number for rope_type ${JSON.stringify(type)} (got ${JSON.stringify(entry[field])})`,
      );
    return v;
  };
  const optionalNum = (field: string): number | undefined => {
    const v = entry[field];
    if (v === undefined || v === null) return undefined;
    return num(field);
  };
  switch (type) {
    case 'linear':
      return { rope_type: 'linear', factor: num('factor') };
    case 'llama3': {
      const scaling = {
        rope_type: 'llama3' as const,
        factor: num('factor'),
        low_freq_factor: num('low_freq_factor'),
        high_freq_factor: num('high_freq_factor'),
        original_max_position_embeddings: num('original_max_position_embeddings', contextFallback),
      };
      if (!(scaling.high_freq_factor > scaling.low_freq_factor))
        throw new Error(
          `${where}: "${key}.high_freq_factor" (${scaling.high_freq_factor}) must be greater than low_freq_factor (${scaling.low_freq_factor})`,
        );
      return scaling;
    }
    case 'yarn': {
      const context = num('original_max_position_embeddings', contextFallback);
      const truncate = entry.truncate;
      if (truncate !== undefined && truncate !== null && typeof truncate !== 'boolean')
        throw new Error(`${where}: "${key}.truncate" must be true or false (got ${JSON.stringify(truncate)})`);
      const scaling: RopeScaling = {
        rope_type: 'yarn',
        // transformers' rule for configs that leave the factor out (DeepSeek-V3 style).
        factor: entry.factor === undefined || entry.factor === null ? maxPositions / context : num('factor'),
        original_max_position_embeddings: context,
      };
      for (const field of ['attention_factor', 'beta_fast', 'beta_slow', 'mscale', 'mscale_all_dim'] as const) {
        const v = optionalNum(field);
        if (v !== undefined) scaling[field] = v;
      }
      if (typeof truncate === 'boolean') scaling.truncate = truncate;
      return scaling;
    }
    default:
      throw new Error(
        `${where}: "${key}" rope_type ${JSON.stringify(type)} is not implemented; supported: "default", ${SCALED_ROPE_TYPES.map((t) => JSON.stringify(t)).join(', ')}` +
          (type === 'dynamic' || type === 'longrope'
            ? ' (its frequencies change with the sequence length, which would make cached generation and scoring disagree)'
            : ''),
      );
  }
}
