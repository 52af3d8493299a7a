import type { AddressInfo, Server } from 'node:net';

/** Whether `port` can be listened on: a whole number from 0 (any free port) to 65535. */
export function isPort(port: number): boolean {
  return Number.isInteger(port) && port >= 0 && port <= 65535;
}

/** Starts `server` listening on `host`:`port` (0: any free port) and gives the address it got; a failure to bind rejects. */
export async function listenOn(server: Server, host: string, port: number): Promise<AddressInfo> {
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  return server.address() as AddressInfo;
}
