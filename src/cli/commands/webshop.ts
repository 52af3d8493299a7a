/** `empo2 webshop serve`: the WebShop environment's shop page, to play by hand. */
import type { Command } from 'commander';
import { collect } from '../options.ts';

export function register(program: Command): void {
  const webshop = program.command('webshop').description('the WebShop environment');
  webshop
    .command('serve')
    .description('start a local shop page to pick a goal, search, click and buy, showing the reward and its parts')
    .option('--host <host>', 'interface to listen on', '127.0.0.1')
    .option('--port <port>', 'port (0 picks a free one)', '3000')
    .option('--data <dir>', 'directory with the WebShop data files (default: $EMPO2_WEBSHOP_DATA, else ../shared/data/webshop)')
    .option(
      '--allowed-host <name>',
      'a host name the page is opened under (repeatable); its IP addresses, and localhost on loopback, are always accepted',
      collect,
      [],
    )
    .action(async (opts) => {
      const { startWebShopServer } = await import('../../envs/webshop/index.ts');
      const server = await startWebShopServer({
        host: opts.host,
        port: Number(opts.port),
        allowedHosts: opts.allowedHost,
        ...(opts.data ? { dataDir: opts.data } : {}),
      });
      console.log(`WebShop is open at ${server.url} (Ctrl-C to stop)`);
      process.on('SIGINT', () => void server.close().then(() => process.exit(0)));
    });
}
