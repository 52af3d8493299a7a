/**
 * The policy's public entry: with ./types.ts, all that trainer/, run/ and adapt/ may import from policy/
 * (test/architecture.test.ts). Engines are built here (the TensorFlow.js engine or the PyTorch worker:
 * ./engine-choice.ts), so which one runs, and how it saves itself, stays behind this file. What builds
 * an engine or starts the compute backend is loaded on first use: reading a prompt's chat tokens
 * must not cost the half second TensorFlow.js takes to load.
 */
import type * as Engines from './create-engine.ts';

export type { TinyCorpus, TrainingEngine } from './create-engine.ts';
export { IM_END, IM_START, endTokenIds, requireEndTokenIds } from './chat-tokens.ts';
export { ChatTemplate, type ChatMessage } from './chat-template.ts';
export { ggufCacheDir, isGgufPath, resolveModelPath } from './gguf/model-path.ts';
export {
  JsonSchemaError,
  canonicalJson,
  checkConstrainableSchema,
  jsonFormatConstraint,
  toolCallConstraint,
  type ConstraintTokenizer,
  type JsonFormat,
  type JsonSchemaObject,
  type JsonTokenConstraint,
  type ToolCallConstraintOptions,
  type ToolCallFormat,
  type ToolSpec,
} from './json-constraint.ts';

/** The TensorFlow.js engine (weights and optimiser in this process): ./create-engine.ts createEngine. */
export async function createEngine(...args: Parameters<typeof Engines.createEngine>): ReturnType<typeof Engines.createEngine> {
  return (await import('./create-engine.ts')).createEngine(...args);
}

/** The engine a run trains, fresh or from a checkpoint: ./create-engine.ts createTrainingEngine. */
export async function createTrainingEngine(
  ...args: Parameters<typeof Engines.createTrainingEngine>
): ReturnType<typeof Engines.createTrainingEngine> {
  return (await import('./create-engine.ts')).createTrainingEngine(...args);
}

/** An engine that only plays (evaluation, adaptation): ./create-engine.ts createPlayingEngine. */
export async function createPlayingEngine(
  ...args: Parameters<typeof Engines.createPlayingEngine>
): ReturnType<typeof Engines.createPlayingEngine> {
  return (await import('./create-engine.ts')).createPlayingEngine(...args);
}

/** Rollouts through an OpenAI-compatible server: ./create-engine.ts createRemoteRollouts. */
export async function createRemoteRollouts(
  ...args: Parameters<typeof Engines.createRemoteRollouts>
): ReturnType<typeof Engines.createRemoteRollouts> {
  return (await import('./create-engine.ts')).createRemoteRollouts(...args);
}

/** Starts the fastest TensorFlow.js backend (once per process) and names it: ./tfjs/backend.ts initBackend. */
export async function initBackend(): Promise<string> {
  return (await import('./tfjs/backend.ts')).initBackend();
}

/** Where the backend's matrix products run, in a few words, for a run's first line. */
export async function matMulDescription(): Promise<string> {
  return (await import('./tfjs/native-matmul.ts')).nativeMatMulStatus().reason;
}
