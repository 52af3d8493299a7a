// Public surface of the WebShop environment for the CLI, trainer and config code.
export { WebShopEnv, createWebShopEnv, WEBSHOP_TASK, DEFAULT_MAX_STEPS, type WebShopEnvOptions } from './env.ts';
export { startWebShopServer, type WebShopServerOptions, type RunningWebShopServer } from './server.ts';
export { loadWorld, type World, type WorldOptions } from './world.ts';
export {
  computeReward,
  REWARD_REVISIONS,
  DEFAULT_REWARD_REVISION,
  type RewardInfo,
  type RewardResult,
  type RewardRevision,
} from './reward.ts';
export { runOracle, type OracleResult } from './oracle.ts';
export { SEARCH_ACTION_TEMPLATE } from './shop.ts';
export { DATA_ENV_VAR, WHERE_TO_GET_DATA } from './data.ts';
export type { Goal, GoalSource } from './goals.ts';
