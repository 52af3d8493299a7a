/**
 * empo2 as a library: `import { train, loadConfig, registerEnv, type Env } from 'empo2'`. This is the
 * package's public entry (package.json `exports`, docs/API.md lists every name and test/public-api.test.ts
 * keeps the two in step); what is not exported here or in ./internals.ts is not part of the package's API.
 */
export { loadConfig, type ConfigInput, type ConfigSource, type LoadConfigOptions } from './api/config.ts';
export { train, type TrainOptions, type TrainResult } from './api/train.ts';
export { judge, type JudgeReward } from './api/judge.ts';
export { trainAgent, type Agent, type AgentInput, type AgentOutcome, type TrainAgentOptions } from './api/train-agent.ts';
export { ConfigError, configReference } from './config/load.ts';
export type { Config } from './config/schema.ts';
export {
  createEnv,
  environmentCorpus,
  envNames,
  registerEnv,
  type EnvDefinition,
  type EnvFactory,
  type EnvSettings,
} from './envs/index.ts';
export {
  registerToolParser,
  toolParserNames,
  type ParsedAnswer,
  type ParsedToolCall,
  type ToolParser,
} from './openai/tool-parsers/index.ts';
export { SUCCESS_SCORE, type Env, type ResetResult, type Split, type StepResult } from './envs/types.ts';
export type { TrainLine } from './run/metrics-log.ts';
export type { EvalResult, TaskResult } from './run/records.ts';
export { AllEpisodesFailedError } from './run/failure-streak.ts';
export { readRunMetrics, type RunMetrics } from './compare/metrics.ts';
export { formatPairedDifference, pairedDifference, summarize, type PairedDifference, type Summary } from './compare/stats.ts';
export { startDashboard, type DashboardOptions, type RunningDashboard } from './dashboard/server.ts';
export {
  withMemory,
  type EpisodeEnd,
  type MemoryProxy,
  type MemoryProxyOptions,
  type ProxyEpisodeHandle,
  type ProxyModel,
  type ProxyStats,
} from './memory-proxy/server.ts';
export { Rng } from './util/rng.ts';
