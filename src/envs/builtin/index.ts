/**
 * The built-in text environment: procedurally generated rooms, doors, containers, objects and
 * devices; six task families (fetch, power, boil, clue, unlock, sort). See README.md here.
 */
export { BuiltinEnv, createBuiltinEnv, BUILTIN_TASKS, SPLIT_RANGES, VARIATIONS_PER_TASK, type BuiltinEnvOptions } from './env.ts';
export { oracleAct, oracleActions, randomAct } from './oracle.ts';
export { sampleCorpus } from './corpus.ts';
export { Game, generateWorld, ORACLE_STEP_CAP } from './game.ts';
export { Rng } from './rng.ts';
