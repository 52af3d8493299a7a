// Public surface of the HTTP environment client (AgentGym's environment-server protocol).
import { HttpEnv, type HttpEnvHooks } from './env.ts';
import { sampleHttpCorpus } from './corpus.ts';
import { parseHttpEnvOptions, type EnvOverrides } from './options.ts';
import { checkReachable } from './transport.ts';

export { HttpEnv, type HttpEnvHooks, type HttpEnvStats, type HttpEpisodeOutcome } from './env.ts';
export {
  parseHttpEnvOptions,
  parseIndices,
  PRESETS,
  type HttpEnvConfig,
  type Protocol,
  type PresetName,
  type EnvOverrides,
} from './options.ts';
export { ServerProtocol, actionsInObservation, SEARCH_ACTION, type InstanceId, type Answer } from './protocol.ts';
export { EnvServerError, type FailureKind } from './transport.ts';
export { openInstanceCount } from './instances.ts';

/** Checks the options and that the server answers, then returns an env (instances are created at reset). */
export async function createHttpEnv(options: unknown, overrides: EnvOverrides = {}, hooks: HttpEnvHooks = {}): Promise<HttpEnv> {
  const config = parseHttpEnvOptions(options, overrides);
  // GET / is answered at once by a live server; a long step deadline would only delay the verdict.
  await checkReachable(
    {
      baseUrl: config.baseUrl,
      timeoutMs: Math.min(config.timeoutMs, 10_000),
      retries: config.retries,
      backoffMs: config.retryBackoffMs,
      maxResponseBytes: config.maxResponseBytes,
    },
    (m) => (hooks.warn ?? ((line: string) => process.stderr.write(`${line}\n`)))(`http env: ${m}`),
  );
  return new HttpEnv(config, hooks);
}

/** The tokenizer text of the default tiny model, read from the server (./corpus.ts). */
export async function httpEnvironmentCorpus(options: unknown, overrides: EnvOverrides = {}): Promise<string[]> {
  const env = await createHttpEnv(options, overrides);
  try {
    if (env.config.corpusEpisodes === 0) {
      throw new Error(
        'env.options.corpus_episodes is 0, so there is no text to build the default tiny tokenizer from; raise it or give model.path',
      );
    }
    return await sampleHttpCorpus(env, env.config.corpusEpisodes);
  } finally {
    await env.close();
  }
}
