/** A port free on 127.0.0.1 now, for a server a bench starts as a child process (vLLM) that takes its port as a flag. */
import { createServer } from 'node:net';

export async function freePort(): Promise<number> {
  return new Promise((ok, fail) => {
    const s = createServer();
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => ok(port));
    });
    s.on('error', fail);
  });
}
