/**
 * `empo2/internals`: the pieces below the library's API that this repository's benchmarks and scripts
 * (bench/, scripts/) measure or drive directly: the TensorFlow.js backend and its native matrix
 * product, the engines themselves, the rollout loop, the environments' own classes. Declared (package.json
 * `exports`) so that nothing reaches into src/ by path, but not part of the API: names and signatures
 * here change with the code they come from, without notice. Programs use the public entry (./index.ts).
 */
export type { ObjectiveConfig } from './algo/objective.ts';
export type { TrialResult } from './adapt/tips.ts';
export { parseSeeds, runChild } from './compare/runner.ts';
export { applyOverride, validateConfig } from './config/load.ts';
export { ConfigSchema } from './config/schema.ts';
export { Game, createBuiltinEnv, generateWorld, oracleAct, randomAct, Rng as BuiltinRng } from './envs/builtin/index.ts';
export { ScienceWorldEnv, ScienceWorldPool, checkScienceWorldSetup, splitVariations, taskNames } from './envs/scienceworld/index.ts';
export { goldReplayOptions, replayGold, type GoldReplay } from './envs/scienceworld/gold.ts';
export { GOLD_SAMPLE } from './envs/scienceworld/goldSample.ts';
export { WebShopEnv, runOracle } from './envs/webshop/index.ts';
export { PyRandom } from './envs/webshop/pyrandom.ts';
export { HashedNgramEmbedder } from './memory/hashed.ts';
export { MiniLmEmbedder, findMiniLmDir, projectPython } from './memory/minilm.ts';
export { createEngine, createPlayingEngine, createTrainingEngine } from './policy/create-engine.ts';
export { jsonFormatConstraint, toolCallConstraint } from './policy/json-constraint.ts';
export { RemoteEngine, remoteEngineFromDir } from './policy/remote/index.ts';
export { initBackend, tf } from './policy/tfjs/backend.ts';
export { loadModelDir, saveModelDir } from './policy/tfjs/checkpoint.ts';
export { TfjsEngine } from './policy/tfjs/engine.ts';
export { nativeMatMulStatus, registerNativeMatMul, setBlasThreads, unregisterNativeMatMul } from './policy/tfjs/native-matmul.ts';
export { countParameters } from './policy/tfjs/qwen2.ts';
export { Tokenizer } from './policy/tokenizer.ts';
export { TorchEngine } from './policy/torch/engine.ts';
export type { PolicyEngine, TrainSequence, TrainStats } from './policy/types.ts';
export { latestCheckpoint } from './run/checkpoint.ts';
export { environmentCount } from './run/env-pool.ts';
export { EpisodeProgress } from './run/progress.ts';
export type { Episode, RolloutJob } from './run/records.ts';
export { packEpisodeBranches, sequenceTokens } from './trainer/packing.ts';
export { promptSettings } from './trainer/prompt-style.ts';
export { rolloutSettings, runEpisodes, runEpisodesInChunks } from './trainer/rollout.ts';
export type { EpisodeRecord } from './trajectory/format.ts';
export { TrajectoryFile } from './trajectory/reader.ts';
