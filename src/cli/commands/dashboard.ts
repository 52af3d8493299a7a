/** `empo2 dashboard`: a local web page over run folders (../../dashboard/README.md). */
import type { Command } from 'commander';
import { portOption } from '../options.ts';

export function register(program: Command): void {
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
      const { startDashboard, DEFAULT_DASHBOARD_PORT } = await import('../../dashboard/server.ts');
      const port = opts.port === undefined ? DEFAULT_DASHBOARD_PORT : portOption(opts.port);
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
}
