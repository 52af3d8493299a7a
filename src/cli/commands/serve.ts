/** `empo2 serve`: a policy behind an OpenAI-compatible API (../../serve/README.md). */
import type { Command } from 'commander';
import { ConfigError } from '../../config/load.ts';
import { API_KEY_ENV } from '../../policy/remote/http.ts';
import { DEFAULT_MAX_REQUEST_TOKENS } from '../../serve/limits.ts';
import { collect, portOption } from '../options.ts';

export function register(program: Command): void {
  program
    .command('serve')
    .description(
      'serve a policy as an OpenAI-compatible API (/v1/models, /v1/completions, /v1/chat/completions) with log-probs and token ids; see src/serve/README.md',
    )
    .argument('<path>', 'a run directory (its latest checkpoint), a model directory or a .gguf file')
    .option('--host <host>', 'interface to listen on (default loopback only; 0.0.0.0 exposes it to the network)', '127.0.0.1')
    .option('--port <port>', 'port (0 picks a free one)', '8000')
    .option('--served-model-name <name>', 'model id to list and accept (default: the directory name)')
    .option(
      '--allow-weight-updates',
      'accept POST /v1/empo2/load_weights {"path": dir} and vLLM\'s /v1/load_lora_adapter, /v1/unload_lora_adapter so a trainer (rollout.remote) can push its policy; needs --api-key and --weights-root',
    )
    .option(
      '--weights-root <dir>',
      'with --allow-weight-updates: weights and adapters load only from directories under this one (repeatable)',
      collect,
      [],
    )
    .option(
      '--api-key <key>',
      'require "Authorization: Bearer <key>" on every request (default: $EMPO2_API_KEY, which keeps the key out of the process list)',
    )
    .option(
      '--allowed-host <name>',
      'a host name clients reach the server under (repeatable); IP addresses, and localhost on loopback, are always accepted',
      collect,
      [],
    )
    .option(
      '--max-request-tokens <n>',
      'the most work one request may ask for: prompts × (longest prompt + max_tokens) tokens',
      String(DEFAULT_MAX_REQUEST_TOKENS),
    )
    .action(async (path: string, opts) => {
      const port = portOption(opts.port);
      const maxRequestTokens = Number(opts.maxRequestTokens);
      if (!Number.isInteger(maxRequestTokens) || maxRequestTokens < 1)
        throw new ConfigError(`--max-request-tokens must be a positive integer, got "${opts.maxRequestTokens}"`);
      const apiKey: string | undefined = opts.apiKey ?? (process.env[API_KEY_ENV] || undefined);
      if (opts.allowWeightUpdates && !apiKey)
        throw new ConfigError(
          `--allow-weight-updates needs an API key (--api-key, or $${API_KEY_ENV}): any program that can reach the server could otherwise swap its weights`,
        );
      if (opts.allowWeightUpdates && opts.weightsRoot.length === 0)
        throw new ConfigError(
          '--allow-weight-updates needs --weights-root <dir>: the folder the trainer writes its policy to (e.g. its run directory)',
        );
      if (!opts.allowWeightUpdates && opts.weightsRoot.length > 0)
        throw new ConfigError('--weights-root is for --allow-weight-updates, which is not given');
      const { loadServedModel, defaultModelName, readServedAdapter } = await import('../../serve/load.ts');
      const { startServer } = await import('../../serve/server.ts');
      const served = await loadServedModel(path);
      const modelName = opts.servedModelName ?? defaultModelName(path);
      const server = await startServer({
        engine: served.engine,
        modelName,
        host: opts.host,
        port,
        vocabSize: served.vocabSize,
        maxModelLen: served.maxModelLen,
        toolTemplate: served.toolTemplate,
        maxRequestTokens,
        apiKey,
        allowedHosts: opts.allowedHost,
        log: (l) => console.error(l),
        loadWeights: opts.allowWeightUpdates
          ? { roots: opts.weightsRoot, load: loadServedModel, readAdapter: readServedAdapter }
          : undefined,
      });
      if (!apiKey && !/^(127\.|::1$|localhost$)/.test(server.host))
        console.error(`warning: ${server.host} is reachable from other machines and no API key is set (--api-key or $${API_KEY_ENV})`);
      console.log(`serving ${served.modelDir} as "${modelName}" at ${server.url}/v1 (Ctrl-C to stop)`);
      process.on('SIGINT', () => void server.close().then(() => process.exit(0)));
    });
}
