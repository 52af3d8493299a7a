/**
 * Runs the shop page until interrupted: `npx tsx src/envs/webshop/serve.ts [--port 3000] [--host 127.0.0.1]
 * [--data DIR] [--goals synthetic|human] [--max-steps 15]`. The CLI's `empo2 webshop serve` calls
 * startWebShopServer the same way.
 */
import { parseArgs } from 'node:util';
import { startWebShopServer } from './server.ts';

const { values } = parseArgs({
  options: {
    port: { type: 'string', default: '3000' },
    host: { type: 'string', default: '127.0.0.1' },
    data: { type: 'string' },
    goals: { type: 'string', default: 'synthetic' },
    'max-steps': { type: 'string', default: '15' },
  },
});
const goals = values.goals;
if (goals !== 'synthetic' && goals !== 'human') throw new Error(`--goals must be synthetic or human, got "${goals}"`);
const running = await startWebShopServer({
  port: Number(values.port),
  host: values.host,
  dataDir: values.data,
  goals,
  maxSteps: Number(values['max-steps']),
});
console.log(`WebShop is open at ${running.url} (Ctrl-C to stop)`);
process.on('SIGINT', () => void running.close().then(() => process.exit(0)));
