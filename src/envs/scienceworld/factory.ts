/**
 * Building a ScienceWorld env from configuration (parsed YAML/JSON), with errors that name the
 * offending field. `maxSteps`, when given, replaces the per-task reference limits for every task.
 */
import { z } from 'zod';
import { taskNames } from './catalog.ts';
import { ScienceWorldEnv, type ScienceWorldEnvOptions } from './env.ts';

const positiveInt = z.number().int().positive();
const positiveMs = z.number().positive();

export const scienceWorldConfigSchema = z
  .object({
    tasks: z.array(z.string()).min(1).optional(),
    maxSteps: positiveInt.optional(),
    simplification: z.string().optional(),
    goldPath: z.boolean().optional(),
    stepLimits: z.record(z.string(), positiveInt).optional(),
    defaultStepLimit: positiveInt.optional(),
    moveLimit: positiveInt.optional(),
    actionCorrection: z
      .object({ enabled: z.boolean().optional(), history: z.enum(['original', 'corrected']).optional() })
      .strict()
      .optional(),
    python: z.string().min(1).optional(),
    startTimeoutMs: positiveMs.optional(),
    resetTimeoutMs: positiveMs.optional(),
    stepTimeoutMs: positiveMs.optional(),
    resetAttempts: positiveInt.optional(),
    deterministic: z.boolean().optional(),
    jvmOptions: z.array(z.string()).optional(),
  })
  .strict();

export type ScienceWorldConfig = z.infer<typeof scienceWorldConfigSchema>;

export function scienceWorldOptionsFromConfig(config: unknown, where = 'scienceworld env options'): ScienceWorldEnvOptions {
  const parsed = scienceWorldConfigSchema.safeParse(config ?? {});
  if (!parsed.success) throw new Error(`invalid ${where}:\n${z.prettifyError(parsed.error)}`);
  const { maxSteps, ...options } = parsed.data;
  if (maxSteps === undefined) return options;
  return {
    ...options,
    stepLimits: { ...Object.fromEntries(taskNames().map((task) => [task, maxSteps])), ...(options.stepLimits ?? {}) },
    defaultStepLimit: maxSteps,
  };
}

export function createScienceWorldEnv(config: unknown = {}): ScienceWorldEnv {
  return new ScienceWorldEnv(scienceWorldOptionsFromConfig(config));
}
