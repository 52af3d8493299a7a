/**
 * The `empo2` command line: train, eval, play. Options come from a YAML/JSON config plus
 * `--set key.path=value` overrides; `empo2 train --help` lists every option with its default.
 */
import { Command, Option } from 'commander';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { loadConfig, describeOptions, ConfigError } from '../config/load.ts';
import { API_KEY_ENV } from '../policy/remote/http.ts';
import { DEFAULT_MAX_REQUEST_TOKENS } from '../serve/limits.ts';
import { checkOutputDir, checkOutputFile } from './output-paths.ts';

const program = new Command();
program.name('empo2').description('Train LLM agents to explore with EMPO² (memory-augmented hybrid on/off-policy RL)').showHelpAfterError();

const collect = (value: string, previous: string[]) => [...previous, value];
const optionsHelp = () => '\nConfig options (file keys, or --set key=value):\n' + describeOptions().join('\n') + '\n';

/** What every config-driven command shares: a config file, `--set` overrides, and the option list in --help. */
function withConfig(cmd: Command, configHelp: string): Command {
  return cmd
    .option('-c, --config <file>', configHelp)
    .option('-s, --set <key=value>', 'override one config option (repeatable), e.g. memory.top_k=3', collect, [])
    .addHelpText('after', optionsHelp);
}

/** An optional count option: undefined when not given, else a positive integer or an error naming the option. */
function positiveInteger(raw: string | undefined, flag: string): number | undefined {
  if (raw === undefined) return undefined;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 1) throw new ConfigError(`${flag} must be a positive integer, got "${raw}"`);
  return n;
}

/** A model argument as a directory: a .gguf file becomes its cached import (made on first use). */
async function modelArgument(path: string): Promise<string> {
  const { resolveModelPath } = await import('../policy/gguf/model-path.ts');
  return resolveModelPath(path);
}

function configFrom(
  opts: { config?: string; set: string[]; runDir?: string; seed?: string; iterations?: string },
  base?: string,
): ReturnType<typeof loadConfig> {
  const overrides = [...opts.set];
  if (opts.runDir) overrides.push(`run_dir=${opts.runDir}`);
  if (opts.seed !== undefined) overrides.push(`seed=${opts.seed}`);
  if (opts.iterations !== undefined) overrides.push(`train.iterations=${opts.iterations}`);
  return loadConfig(opts.config ?? base ?? null, overrides);
}

withConfig(
  program.command('train').description('train a policy (default: the tiny built-in model on the built-in environment)'),
  'YAML or JSON config file',
)
  .option('--run-dir <dir>', 'shortcut for --set run_dir=<dir>')
  .option('--seed <n>', 'shortcut for --set seed=<n>')
  .option('--iterations <n>', 'shortcut for --set train.iterations=<n>')
  .option('--resume', 'continue the run in run_dir from its latest checkpoint (uses the saved config.yaml unless --config is given)')
  .action(async (opts) => {
    let cfg = configFrom(opts);
    if (opts.resume && !opts.config) {
      const saved = join(cfg.run_dir, 'config.yaml');
      if (existsSync(saved)) cfg = configFrom(opts, saved);
    }
    const { train } = await import('../trainer/trainer.ts');
    const result = await train(cfg, { resume: !!opts.resume, handleSignals: true, progress: true });
    if (result.interrupted) {
      console.log(
        result.iterations === 0
          ? `stopped before iteration 1, with no checkpoint; start again with: empo2 train --run-dir ${cfg.run_dir}`
          : `stopped at iteration ${result.iterations}; continue with: empo2 train --run-dir ${cfg.run_dir} --resume`,
      );
      process.exitCode = 130;
    }
  });

withConfig(
  program.command('eval').description('evaluate a checkpoint or model directory on held-out variations'),
  "YAML or JSON config (default: the run's config.yaml when present)",
)
  .argument('<path>', 'a run directory (its latest checkpoint), a model directory or a .gguf file')
  .option(
    '--remote <url>',
    'generate through this OpenAI-compatible server (empo2 serve, vLLM...); <path> then only supplies tokenizer.json',
  )
  .option('--remote-model <name>', 'with --remote: the model name to request (default: the first one the server lists)')
  .option('--remote-timeout <seconds>', 'with --remote: time limit per request attempt', '120')
  .option('--json <file>', 'also write the result (with the checkpoint name and evaluation settings) to this JSON file')
  .option(
    '--trajectories <file>',
    "record the episodes played as JSON lines in this file (default: <run>/trajectories/eval-<checkpoint>.jsonl for a run's checkpoint; none for a bare model directory)",
  )
  .action(async (given: string, opts) => {
    if (opts.json) checkOutputFile(opts.json, '--json');
    if (opts.trajectories) checkOutputFile(opts.trajectories, '--trajectories');
    const { latestCheckpoint } = await import('../run/checkpoint.ts');
    const path = await modelArgument(given);
    const runConfig = join(path, 'config.yaml');
    const cfg = configFrom(opts, existsSync(runConfig) ? runConfig : undefined);
    const modelDir = existsSync(join(path, 'checkpoints')) ? latestCheckpoint(path) : path;
    if (!modelDir) throw new Error(`${path} has no checkpoint`);
    const { defaultEvalTrajectories } = await import('../adapt/checkpoint-eval.ts');
    const trajectories: string | undefined = opts.trajectories ?? defaultEvalTrajectories(modelDir) ?? undefined;
    if (opts.remote) {
      const timeout = Number(opts.remoteTimeout);
      if (!(timeout > 0)) throw new ConfigError(`--remote-timeout must be a positive number of seconds, got "${opts.remoteTimeout}"`);
      const { evaluateRemote } = await import('./commands/eval.ts');
      await evaluateRemote(modelDir, { baseUrl: opts.remote, model: opts.remoteModel, timeoutMs: timeout * 1000 }, cfg, {
        json: opts.json,
        trajectories,
      });
      return;
    }
    const { evaluateModelDir } = await import('./commands/eval.ts');
    await evaluateModelDir(modelDir, cfg, { json: opts.json, trajectories });
  });

program
  .command('import-gguf')
  .description(
    'convert a Llama- or Qwen2-architecture GGUF file (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K-Q6_K) to a Hugging Face model directory usable as model.path',
  )
  .argument('<file>', 'the .gguf file')
  .requiredOption(
    '--out <dir>',
    'the model directory to write (config.json, model.safetensors, tokenizer.json, tokenizer_config.json, generation_config.json)',
  )
  .option('--replace', 'replace --out when it already exists')
  .action(async (file: string, opts) => {
    const { importGguf } = await import('../policy/gguf/import.ts');
    const started = Date.now();
    const result = await importGguf(file, opts.out, { replace: !!opts.replace, log: (l) => console.log(l) });
    const types = Object.entries(result.types)
      .map(([t, n]) => `${n} ${t}`)
      .join(', ');
    console.log(
      `imported ${file} (${result.architecture}, ${result.parameters.toLocaleString()} parameters; tensors: ${types}) into ${result.dir} in ${((Date.now() - started) / 1000).toFixed(1)} s`,
    );
  });

program
  .command('play')
  .description('play an environment yourself in the terminal')
  .addOption(new Option('--env <name>', 'environment family: builtin, scienceworld or webshop').default('builtin'))
  .option('--task <name>', 'task name (default: the first task)')
  .option('--variation <n>', 'variation index (default: the first test variation)')
  .action(async (opts) => {
    const { createEnv } = await import('../envs/index.ts');
    const { play } = await import('./play.ts');
    const env = await createEnv({ name: opts.env, tasks: null, max_steps: null, options: {} });
    const task = opts.task ?? env.tasks()[0];
    if (!env.tasks().includes(task)) {
      await env.close();
      throw new ConfigError(`unknown task "${task}" (tasks: ${env.tasks().join(', ')})`);
    }
    const variation = opts.variation !== undefined ? Number(opts.variation) : env.variations(task, 'test')[0];
    if (!Number.isInteger(variation) || variation < 0) {
      await env.close();
      throw new ConfigError(`--variation must be a non-negative integer, got "${opts.variation}"`);
    }
    try {
      await play({ env, task, variation });
    } finally {
      // ScienceWorld runs a simulator process per env; it must not outlive an error.
      await env.close();
    }
  });

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
    'accept POST /v1/empo2/load_weights {"path": dir} so a trainer (rollout.remote) can push its policy; needs --api-key and --weights-root',
  )
  .option(
    '--weights-root <dir>',
    'with --allow-weight-updates: load_weights loads only directories under this one (repeatable)',
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
    const port = Number(opts.port);
    if (!Number.isInteger(port) || port < 0 || port > 65535)
      throw new ConfigError(`--port must be an integer from 0 to 65535, got "${opts.port}"`);
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
    const { loadServedModel, defaultModelName } = await import('../serve/load.ts');
    const { startServer } = await import('../serve/server.ts');
    const served = await loadServedModel(path);
    const modelName = opts.servedModelName ?? defaultModelName(path);
    const server = await startServer({
      engine: served.engine,
      modelName,
      host: opts.host,
      port,
      vocabSize: served.vocabSize,
      maxModelLen: served.maxModelLen,
      maxRequestTokens,
      apiKey,
      allowedHosts: opts.allowedHost,
      log: (l) => console.error(l),
      loadWeights: opts.allowWeightUpdates ? { roots: opts.weightsRoot, load: loadServedModel } : undefined,
    });
    if (!apiKey && !/^(127\.|::1$|localhost$)/.test(server.host))
      console.error(`warning: ${server.host} is reachable from other machines and no API key is set (--api-key or $${API_KEY_ENV})`);
    console.log(`serving ${served.modelDir} as "${modelName}" at ${server.url}/v1 (Ctrl-C to stop)`);
    process.on('SIGINT', () => void server.close().then(() => process.exit(0)));
  });

program
  .command('compare')
  .description(
    'train configs x seeds (each run a child process) into <out>/<label>/seed<k>, then write results.md/.csv and learning_curve.png/.svg',
  )
  .option('-c, --config <file>', 'config to compare (repeatable)', collect, [])
  .option('--label <name>', 'name of each config in the table, in --config order; the file name when left out', collect, [])
  .option('--seeds <list>', 'seeds, e.g. 0,1,2 or 0-4', '0,1,2')
  .option('--out <dir>', 'folder for the runs and the report')
  .option('--jobs <n>', 'runs trained at the same time', '1')
  .option('-s, --set <key=value>', 'override one config option in every config (repeatable)', collect, [])
  .option('--resume', 'continue runs that stopped midway from their latest checkpoint')
  .option('--report-only', 'only re-aggregate the runs already in --out')
  .option('--at-steps <list>', 'env-step counts for the equal-steps score columns (default: the largest every run reached)')
  .option('--include-unfinished', 'count runs that stopped early, using their last evaluation')
  .option(
    '--final-eval <n>',
    "after training, evaluate each run's last checkpoint once more on n variations per task (less noisy than the evaluations during training); finished runs without it get it too",
  )
  .option(
    '--equal-steps-eval <n>',
    'after training, evaluate on n variations per task the kept checkpoints just before and after each equal-steps point, and report the score interpolated between them',
  )
  .action(async (opts) => {
    if (opts.out && !opts.reportOnly) checkOutputDir(opts.out, '--out');
    const { compareCommand } = await import('../compare/command.ts');
    process.exitCode = await compareCommand(opts);
  });

withConfig(
  program
    .command('adapt')
    .description(
      "memory-only adaptation: frozen weights, K trials on a task (e.g. one never trained on) with the tip memory or Reflexion's plans; score per trial printed and saved",
    ),
  "YAML or JSON config (default: the run's config.yaml when present)",
)
  .requiredOption('--checkpoint <path>', 'a run directory (its latest checkpoint), a checkpoint / model directory or a .gguf file')
  .requiredOption('--task <name>', 'task to adapt to')
  .addOption(
    new Option(
      '--method <name>',
      "tips: EMPO²'s tip memory, retrieved at every step and written after every trial; reflexion: after a failed trial the policy writes a plan, and a variation's last plans open its next trial's prompts (Shinn et al., 2023)",
    )
      .choices(['tips', 'reflexion'])
      .default('tips'),
  )
  .option('--trials <k>', 'trials (memory grows after each)', '5')
  .option('--variations <n>', 'held-out variations played in each trial', '10')
  .option('--split <name>', 'split the variations come from (train, dev, test)', 'test')
  .option(
    '--out <dir>',
    'where adapt.json, adapt.md (and memory.json for tips) go (default: <checkpoint>/adapt-<task>, or reflexion-<task>)',
  )
  .option('--fresh-memory', "start from an empty memory instead of the checkpoint's")
  .option(
    '--new-draw-each-trial',
    'sample each trial with its own seed (default: the same seed, so only the memory differs between trials)',
  )
  .option(
    '--resume',
    'go on after the last trial an interrupted adaptation in --out finished (started with the same options); with none there, start',
  )
  .option('--remote <url>', 'generate through this OpenAI-compatible server; the checkpoint then only supplies tokenizer.json')
  .option('--remote-model <name>', 'with --remote: the model name to request')
  .option('--reflections <k>', 'with --method reflexion: plans of a variation shown in its next trial (default 3, as Reflexion)')
  .option('--reflection-max-tokens <n>', 'with --method reflexion: most tokens of one plan (default 256, as Reflexion)')
  .action(async (opts) => {
    const { latestCheckpoint } = await import('../run/checkpoint.ts');
    const path = await modelArgument(opts.checkpoint);
    const isRun = existsSync(join(path, 'checkpoints'));
    const runConfig = isRun ? join(path, 'config.yaml') : join(path, '..', '..', 'config.yaml');
    const cfg = configFrom(opts, existsSync(runConfig) ? runConfig : undefined);
    const dir = isRun ? latestCheckpoint(path) : path;
    if (!dir || !existsSync(dir)) throw new ConfigError(`--checkpoint ${path}: no checkpoint there`);
    if (!['train', 'dev', 'test'].includes(opts.split)) throw new ConfigError(`--split must be train, dev or test, got "${opts.split}"`);
    const reflexion = opts.method === 'reflexion';
    if (!reflexion) {
      for (const [given, flag] of [
        [opts.reflections, '--reflections'],
        [opts.reflectionMaxTokens, '--reflection-max-tokens'],
      ]) {
        if (given !== undefined) throw new ConfigError(`${flag} is for --method reflexion (this is --method ${opts.method})`);
      }
    }
    if (reflexion && opts.freshMemory)
      throw new ConfigError('--fresh-memory is for --method tips: Reflexion keeps no tip memory and starts every variation with no plans');
    const reflexionSettings = {
      window: positiveInteger(opts.reflections, '--reflections'),
      reflectionMaxTokens: positiveInteger(opts.reflectionMaxTokens, '--reflection-max-tokens'),
    };
    if (opts.out) checkOutputDir(opts.out, '--out');
    const { adaptCommand } = await import('./commands/adapt.ts');
    await adaptCommand(dir, cfg, {
      method: reflexion ? 'reflexion' : 'tips',
      modelIsRunConfig: existsSync(runConfig),
      remote: opts.remote ? { baseUrl: opts.remote, model: opts.remoteModel } : undefined,
      trials: {
        task: opts.task,
        trials: Number(opts.trials),
        variations: Number(opts.variations),
        split: opts.split,
        sameSeed: !opts.newDrawEachTrial,
        resume: !!opts.resume,
        source: dir,
        outDir: opts.out ?? join(dir, `${reflexion ? 'reflexion' : 'adapt'}-${opts.task}`),
      },
      reflexion: reflexionSettings,
      memoryFrom: opts.freshMemory ? null : dir,
    });
  });

withConfig(
  program
    .command('warmup')
    .description(
      'tiny model: build it and teach it to read tips (supervised, on synthetic prompts) before RL; saves a model directory for model.path',
    ),
  'YAML or JSON config file (env, model, prompt and memory settings are used)',
)
  .option('--seed <n>', 'shortcut for --set seed=<n>')
  .requiredOption('--out <dir>', 'directory to write the model to (config.json, model.safetensors, tokenizer.json, warmup.json)')
  .option('--examples <n>', 'synthetic prompts (default: experimental.tip_warmup_examples, or 6000 when that is 0)')
  .action(async (opts) => {
    const cfg = configFrom(opts);
    const examples = opts.examples !== undefined ? Number(opts.examples) : cfg.experimental.tip_warmup_examples || 6000;
    if (!Number.isInteger(examples) || examples <= 0)
      throw new ConfigError(`--examples: expected a positive integer, got "${opts.examples}"`);
    checkOutputDir(opts.out, '--out');
    const { warmupModelDir } = await import('./commands/warmup.ts');
    await warmupModelDir({ ...cfg, experimental: { ...cfg.experimental, tip_warmup_examples: examples } }, opts.out);
  });

const memoryCommand = program.command('memory').description('inspect a tip memory');
memoryCommand
  .command('show')
  .description("print a run's tip memory: entries per slot, newest first")
  .argument('<path>', 'a run directory (its latest checkpoint), a checkpoint directory, or a memory.json file')
  .option('--task <name>', 'only this slot (a task, or task#variation with per-variation slots)')
  .option('--limit <n>', 'entries shown per slot', '10')
  .option('--json', 'print the entries as JSON')
  .action(async (path: string, opts) => {
    const { showMemory } = await import('./commands/memory-show.ts');
    console.log(showMemory(path, { task: opts.task, limit: Number(opts.limit), json: !!opts.json }));
  });

program
  .command('dashboard')
  .description(
    'a local web page: runs and their configs side by side, learning curves (live), the episodes recorded with the tips each step was shown, the tip memory, and compare outputs; see src/dashboard/README.md',
  )
  .argument(
    '[dirs...]',
    'run folders, compare or adapt outputs, folders holding them (searched 4 levels down), or trajectory .jsonl files (default: ./runs)',
  )
  .option('--port <port>', 'port (default 8765; 0 picks a free one)')
  .option(
    '--host <host>',
    'loopback address to listen on: 127.0.0.1 (default), ::1 or localhost; the page has no login, so other interfaces are refused',
  )
  .action(async (dirs: string[], opts) => {
    const { startDashboard, DEFAULT_DASHBOARD_PORT } = await import('../dashboard/server.ts');
    const port = opts.port === undefined ? DEFAULT_DASHBOARD_PORT : Number(opts.port);
    if (!Number.isInteger(port) || port < 0 || port > 65535)
      throw new ConfigError(`--port must be an integer from 0 to 65535, got "${opts.port}"`);
    const dashboard = await startDashboard({ paths: dirs, host: opts.host, port, log: (l) => console.error(l) });
    const counts = new Map<string, number>();
    for (const s of dashboard.sources()) counts.set(s.kind, (counts.get(s.kind) ?? 0) + 1);
    const names: Record<string, [string, string]> = {
      run: ['run', 'runs'],
      compare: ['compare output', 'compare outputs'],
      adapt: ['adapt output', 'adapt outputs'],
      records: ['folder of records', 'folders of records'],
    };
    console.log(
      `dashboard at ${dashboard.url} (${[...counts].map(([kind, n]) => `${n} ${names[kind][n === 1 ? 0 : 1]}`).join(', ')}; Ctrl-C to stop)`,
    );
    process.on('SIGINT', () => void dashboard.close().then(() => process.exit(0)));
  });

const webshop = program.command('webshop').description('the WebShop environment');
webshop
  .command('serve')
  .description('start a local shop page to pick a goal, search, click and buy, showing the reward and its parts')
  .option('--host <host>', 'interface to listen on', '127.0.0.1')
  .option('--port <port>', 'port (0 picks a free one)', '3000')
  .option('--data <dir>', 'directory with the WebShop data files (default: $EMPO2_WEBSHOP_DATA, else ../shared/data/webshop)')
  .action(async (opts) => {
    const { startWebShopServer } = await import('../envs/webshop/index.ts');
    const server = await startWebShopServer({ host: opts.host, port: Number(opts.port), ...(opts.data ? { dataDir: opts.data } : {}) });
    console.log(`WebShop is open at ${server.url} (Ctrl-C to stop)`);
    process.on('SIGINT', () => void server.close().then(() => process.exit(0)));
  });

program.parseAsync(process.argv).catch((e: unknown) => {
  const err = e as Error;
  console.error(`empo2: ${err instanceof ConfigError ? '' : 'error: '}${err.message}`);
  if (process.env.EMPO2_DEBUG) console.error(err.stack);
  process.exit(1);
});
