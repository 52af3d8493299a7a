/** `empo2 train`: a run in run_dir, fresh or resumed from its latest checkpoint; Ctrl-C stops it with a checkpoint saved. */
import type { Command } from 'commander';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { ConfigError } from '../../config/load.ts';
import type { Config } from '../../config/schema.ts';
import { configFrom, positiveInteger, withConfig } from '../options.ts';

export function register(program: Command): void {
  withConfig(
    program.command('train').description('train a policy (default: the tiny built-in model on the built-in environment)'),
    'YAML or JSON config file',
  )
    .option('--run-dir <dir>', 'shortcut for --set run_dir=<dir>')
    .option('--seed <n>', 'shortcut for --set seed=<n>')
    .option('--iterations <n>', 'shortcut for --set train.iterations=<n>')
    .option('--resume', 'continue the run in run_dir from its latest checkpoint (uses the saved config.yaml unless --config is given)')
    .option(
      '--agent <command>',
      'train the model behind your own agent: a shell command run once per episode, talking to the gateway with any OpenAI client (docs/AGENTS.md); needs --tasks',
    )
    .option('--tasks <file>', '--agent: the training tasks, one JSON value per line')
    .option('--eval-tasks <file>', '--agent: held-out tasks for the evaluations (default: the training tasks)')
    .option('--tasks-as-text', '--agent: read each line of --tasks and --eval-tasks as a text task (a string), not as JSON')
    .option(
      '--task-name <field>',
      "--agent: the field of a task (a JSON object) that names it: tasks of the same name get one row in the evaluation tables (default: one row, 'agent')",
    )
    .option(
      '--agent-timeout <seconds>',
      '--agent: seconds of its own time an episode may run before its process group is killed; time its calls wait for the model is not counted (default 300)',
    )
    .option('--agent-max-calls <n>', '--agent: calls an episode may make when env.max_steps is not set (default 50)')
    .option(
      '--agent-max-concurrent-calls <n>',
      '--agent: calls an episode may have in flight at once; one more is answered 429 (default 8)',
    )
    .action(async (opts) => {
      if (opts.agent || opts.tasks) await import('../../gateway/tasks-env.ts').then((m) => m.registerAgentEnv());
      let cfg = configFrom(opts);
      if (opts.resume && !opts.config) {
        const saved = join(cfg.run_dir, 'config.yaml');
        if (existsSync(saved)) cfg = configFrom(opts, saved);
      }
      const { train } = await import('../../trainer/trainer.ts');
      const agent = opts.agent ? await agentRun(cfg, opts) : null;
      if (agent) cfg = agent.cfg;
      let result;
      try {
        result = await train(cfg, {
          resume: !!opts.resume,
          handleSignals: true,
          progress: true,
          player: agent?.player,
          agentProcesses: agent !== null,
          onPhase: agent?.onPhase,
        });
      } finally {
        await agent?.close();
      }
      if (result.interrupted) {
        console.log(
          result.iterations === 0
            ? `stopped before iteration 1, with no checkpoint; start again with: empo2 train --run-dir ${cfg.run_dir}`
            : `stopped at iteration ${result.iterations}; continue with: empo2 train --run-dir ${cfg.run_dir} --resume`,
        );
        process.exitCode = 130;
        return;
      }
      // The run said what failed (its last lines); its result is not one to rely on.
      if (result.failedIterations.length > 0 || result.finalEval?.invalid) {
        console.error(
          `empo2: the run finished, but ${result.failedIterations.length > 0 ? `every episode of iteration ${result.failedIterations.join(', ')} failed` : 'its final evaluation is invalid'} (see above); exiting with status 1`,
        );
        process.exitCode = 1;
      }
    });
}

/** `--task-name <field>`: a task's name is that field of the task (a task that is not an object, or lacks it, has none). */
function nameField(field: string): (task: unknown) => string | undefined {
  return (task) => {
    const v = typeof task === 'object' && task !== null && !Array.isArray(task) ? (task as Record<string, unknown>)[field] : undefined;
    if (v === undefined || v === null) return undefined;
    if (typeof v !== 'string') throw new ConfigError(`--task-name ${field}: a task's "${field}" is ${JSON.stringify(v)}, not a string`);
    return v;
  };
}

/** The gateway and the player that runs `opts.agent` per episode, over the tasks of `--tasks`. */
async function agentRun(
  base: Config,
  opts: {
    agent: string;
    tasks?: string;
    evalTasks?: string;
    tasksAsText?: boolean;
    taskName?: string;
    agentTimeout?: string;
    agentMaxCalls?: string;
    agentMaxConcurrentCalls?: string;
  },
) {
  if (!opts.tasks) throw new ConfigError('--agent needs --tasks <file>: the tasks your agent plays, one per line');
  const [{ agentConfig }, { openAgentPlay, runAgentProcess }, { readTasksFile }] = await Promise.all([
    import('../../gateway/tasks-env.ts'),
    import('../../gateway/index.ts'),
    import('../../gateway/tasks-file.ts'),
  ]);
  const asText = opts.tasksAsText ?? false;
  const tasks = readTasksFile(opts.tasks, { flag: '--tasks', asText });
  const evalTasks = opts.evalTasks ? readTasksFile(opts.evalTasks, { flag: '--eval-tasks', asText }) : [];
  const cfg = agentConfig(base, { tasks, evalTasks, taskName: opts.taskName === undefined ? undefined : nameField(opts.taskName) });
  const log = (l: string) => console.log(l);
  const play = await openAgentPlay<unknown>(cfg, {
    agent: (input) => runAgentProcess({ command: opts.agent, log: (l) => console.error(l) }, input),
    taskOf: (job) => (job.variation < tasks.length ? tasks[job.variation] : evalTasks[job.variation - tasks.length]),
    timeoutSeconds: positiveInteger(opts.agentTimeout, '--agent-timeout'),
    maxCalls: positiveInteger(opts.agentMaxCalls, '--agent-max-calls'),
    maxConcurrentCalls: positiveInteger(opts.agentMaxConcurrentCalls, '--agent-max-concurrent-calls'),
    log,
  });
  return { cfg, player: play.player, onPhase: play.onPhase, close: play.close };
}
