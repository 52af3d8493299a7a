/**
 * Rotary frequencies on hand-computed cases (head dim 4, θ = 10000: unscaled frequencies 1 and
 * 0.01, wavelengths 2π and 200π). Tolerance 1e-6 relative (the values are stored as float32).
 * hf.test.ts checks the same schemes end to end against transformers' logits.
 */
import { describe, expect, it } from 'vitest';
import { parseRopeScaling, rotaryFrequencies } from './rope.ts';

const close = (got: ArrayLike<number>, want: number[]) =>
  want.forEach((w, i) => expect(Math.abs(got[i] - w) / Math.abs(w)).toBeLessThan(1e-6));

describe('rotary frequencies', () => {
  it('unscaled and linear: θ^(−2i/d), divided by the factor', () => {
    close(rotaryFrequencies(10000, 4).invFreq, [1, 0.01]);
    const linear = rotaryFrequencies(10000, 4, { rope_type: 'linear', factor: 2 });
    close(linear.invFreq, [0.5, 0.005]);
    expect(linear.attentionScaling).toBe(1);
  });

  it('llama3: short wavelengths kept, long ones divided, the band between smoothed', () => {
    const scaling = {
      rope_type: 'llama3' as const,
      factor: 8,
      low_freq_factor: 1,
      high_freq_factor: 4,
      original_max_position_embeddings: 100,
    };
    // Bands: wavelength < 100/4 = 25 kept; > 100/1 = 100 divided by 8.
    close(rotaryFrequencies(10000, 4, scaling).invFreq, [1, 0.00125]);
    // With a context of 1000 the 200π wavelength lies in the band: s = (1000/200π − 1)/3 = 0.197183,
    // (1 − s)·0.01/8 + s·0.01 = 0.00297535.
    close(rotaryFrequencies(10000, 4, { ...scaling, original_max_position_embeddings: 1000 }).invFreq, [1, 0.0029753525]);
  });

  it('YaRN: dimensions below the correction range extrapolate, above interpolate; cos/sin scaled by 0.1·ln(s) + 1', () => {
    // Correction range over a context of 32: β_fast = 32 → −0.399 → 0; β_slow = 1 → 0.353 → 1.
    const yarn = rotaryFrequencies(10000, 4, { rope_type: 'yarn', factor: 4, original_max_position_embeddings: 32 });
    close(yarn.invFreq, [1, 0.0025]);
    expect(yarn.attentionScaling).toBeCloseTo(1.138629, 6);
    expect(
      rotaryFrequencies(10000, 4, { rope_type: 'yarn', factor: 4, original_max_position_embeddings: 32, attention_factor: 0.9 })
        .attentionScaling,
    ).toBe(0.9);
  });
});

describe('parseRopeScaling', () => {
  const parse = (entry: Record<string, unknown>) => parseRopeScaling(entry, 'rope_scaling', '/m/config.json', 4096, 131072);
  it("reads both spellings of the type and fills transformers' defaults", () => {
    expect(parse({ type: 'default' })).toBeNull();
    expect(parse({ type: 'linear', factor: 2 })).toEqual({ rope_type: 'linear', factor: 2 });
    expect(parse({ rope_type: 'llama3', factor: 8, low_freq_factor: 1, high_freq_factor: 4 })).toMatchObject({
      original_max_position_embeddings: 4096,
    });
    expect(parse({ rope_type: 'yarn', original_max_position_embeddings: 32768 })).toMatchObject({ factor: 4 });
  });
  const refusals: [string, Record<string, unknown>, string][] = [
    ['dynamic NTK', { type: 'dynamic', factor: 2 }, '"rope_scaling" rope_type "dynamic" is not implemented'],
    ['LongRoPE', { rope_type: 'longrope', short_factor: [1], long_factor: [2] }, '"rope_scaling" rope_type "longrope" is not implemented'],
    ['a llama3 entry without its band', { rope_type: 'llama3', factor: 8 }, '"rope_scaling.low_freq_factor" must be a positive number'],
    [
      'an inverted band',
      { rope_type: 'llama3', factor: 8, low_freq_factor: 4, high_freq_factor: 1 },
      '"rope_scaling.high_freq_factor" (1) must be greater than low_freq_factor (4)',
    ],
    ['a text factor', { rope_type: 'linear', factor: '2' }, '"rope_scaling.factor" must be a positive number'],
  ];
  for (const [what, entry, message] of refusals) {
    it(`refuses ${what}, naming the field`, () => expect(() => parse(entry)).toThrow(`/m/config.json: ${message}`));
  }
});
