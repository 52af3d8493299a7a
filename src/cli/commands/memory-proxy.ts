/** `empo2 memory-proxy`: EMPO²'s tip memory in front of an OpenAI-compatible model that is not trained (docs/EXTERNAL.md). */
import type { Command } from 'commander';
import { ConfigError } from '../../config/load.ts';
import { portOption } from '../options.ts';

function number(raw: string, flag: string, o: { integer?: boolean; min?: number; max?: number } = {}): number {
  const n = Number(raw);
  if (
    !Number.isFinite(n) ||
    (o.integer && !Number.isInteger(n)) ||
    (o.min !== undefined && n < o.min) ||
    (o.max !== undefined && n > o.max)
  )
    throw new ConfigError(
      `${flag} must be ${o.integer ? 'an integer' : 'a number'}${o.min !== undefined ? ` from ${o.min}` : ''}${o.max !== undefined ? ` to ${o.max}` : ''}, got "${raw}"`,
    );
  return n;
}

export function register(program: Command): void {
  program
    .command('memory-proxy')
    .description(
      "an OpenAI-compatible endpoint in front of any model, with EMPO²'s tip memory: tips put into each call, a tip written at each episode's end (docs/EXTERNAL.md)",
    )
    .requiredOption('--upstream <url>', 'the model server, e.g. http://127.0.0.1:8080/v1')
    .requiredOption('--model <name>', 'the model name the tip writer asks the upstream for')
    .requiredOption('--memory <file>', 'the SQLite database of tips (created when missing)')
    .option('--upstream-key-env <name>', "the environment variable that holds the upstream's key (default: none sent)")
    .option(
      '--reflector <who>',
      'who writes the tips: upstream, summary (no model), or openai (--reflector-url, --reflector-model)',
      'upstream',
    )
    .option('--reflector-url <url>', 'with --reflector openai: the tip writer server')
    .option('--reflector-model <name>', 'with --reflector openai: the tip writer model')
    .option('--reflector-key-env <name>', "with --reflector openai: the environment variable that holds the writer's key")
    .option('--api-key-env <name>', 'the environment variable holding the key POST /episodes asks for (default: none)')
    .option('--host <host>', 'interface to listen on (default loopback only)', '127.0.0.1')
    .option('--port <port>', 'port (0 picks a free one)', '8100')
    .option('--top-k <n>', 'tips shown per call', '10')
    .option('--threshold <x>', 'show tips whose state is more similar than this (cosine)', '0.5')
    .option('--capacity <n>', 'tips kept per task; the oldest go first', '1000')
    .option('--dim <n>', "hashed embedder dimensions (a training run's memory.dim, to seed it with memory.init_from)", '1024')
    .option(
      '--per-episode',
      "one tip per episode keyed by its last observation, instead of one per call with its action (the trainer's default)",
    )
    .option('--tip-order <order>', 'best_first or best_last (the best tip next to the answer)', 'best_first')
    .option('--upstream-timeout <s>', 'how long a call waits for the upstream', '600')
    .action(async (opts) => {
      const { withMemory } = await import('../../memory-proxy/server.ts');
      const reflector =
        opts.reflector === 'upstream' || opts.reflector === 'summary'
          ? opts.reflector
          : opts.reflector === 'openai'
            ? { baseURL: opts.reflectorUrl, model: opts.reflectorModel, apiKeyEnv: opts.reflectorKeyEnv ?? null }
            : null;
      if (reflector === null) throw new ConfigError(`--reflector must be upstream, summary or openai, got "${opts.reflector}"`);
      if (typeof reflector === 'object' && (!opts.reflectorUrl || !opts.reflectorModel))
        throw new ConfigError('--reflector openai needs --reflector-url and --reflector-model');
      if (opts.tipOrder !== 'best_first' && opts.tipOrder !== 'best_last')
        throw new ConfigError(`--tip-order must be best_first or best_last, got "${opts.tipOrder}"`);
      const proxy = await withMemory({
        upstream: { baseURL: opts.upstream, model: opts.model, apiKeyEnv: opts.upstreamKeyEnv ?? null },
        memory: opts.memory,
        reflector,
        apiKeyEnv: opts.apiKeyEnv ?? null,
        host: opts.host,
        port: portOption(opts.port),
        settings: {
          topK: number(opts.topK, '--top-k', { integer: true, min: 1 }),
          threshold: number(opts.threshold, '--threshold', { min: -1, max: 1 }),
          capacity: number(opts.capacity, '--capacity', { integer: true, min: 1 }),
        },
        dim: number(opts.dim, '--dim', { integer: true, min: 1, max: 16384 }),
        perStepEntries: !opts.perEpisode,
        tipOrder: opts.tipOrder,
        upstreamTimeoutS: number(opts.upstreamTimeout, '--upstream-timeout', { min: 0.001 }),
        log: (line) => console.error(line),
      });
      console.log(`memory proxy at ${proxy.url}: POST ${proxy.url}/episodes for an episode's base URL and key (Ctrl-C to stop)`);
      const stop = () => {
        void proxy.close().then(() => process.exit(0));
      };
      process.once('SIGINT', stop);
      process.once('SIGTERM', stop);
    });
}
