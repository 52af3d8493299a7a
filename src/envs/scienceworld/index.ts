export { ScienceWorldEnv, SIMPLIFICATIONS, validateSimplification, type EpisodeOutcome, type ScienceWorldEnvOptions } from './env.ts';
export { ScienceWorldPool } from './pool.ts';
export {
  correctAction,
  normalizeAction,
  jaccardSimilarity,
  DEFAULT_ACTION_CORRECTION,
  type ActionCorrectionOptions,
  type Correction,
  type HistoryText,
} from './actionCorrection.ts';
export { loadCatalog, getTask, splitVariations, taskNames, type ScienceWorldCatalog, type ScienceWorldTask } from './catalog.ts';
export { REFERENCE_STEP_LIMITS, REFERENCE_DEFAULT_STEP_LIMIT, REFERENCE_MOVE_LIMIT, resolveStepLimit } from './stepLimits.ts';
export { checkScienceWorldSetup, defaultPython, type SetupStatus } from './setup.ts';
export { Simulator, SimulatorError, SimulatorRequestError } from './simulator.ts';
export { createScienceWorldEnv, scienceWorldOptionsFromConfig, scienceWorldConfigSchema, type ScienceWorldConfig } from './factory.ts';
export { scienceWorldCorpus, loadCorpus, CORPUS_PATH, type ScienceWorldCorpus } from './corpus.ts';
