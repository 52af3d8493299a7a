/**
 * Test fixtures shared by the HTTP environment's tests: servers started by a test and envs opened
 * on them are all closed after each test, so one failing test leaves nothing open for the next.
 */
import { afterEach } from 'vitest';
import type { HttpEnv } from '../../src/envs/http/index.ts';
import { TestEnvServer } from './http-env-server.ts';

export function useTestServers(): {
  serve: (options?: Parameters<typeof TestEnvServer.start>[0]) => Promise<TestEnvServer>;
  envs: HttpEnv[];
} {
  const servers: TestEnvServer[] = [];
  const envs: HttpEnv[] = [];
  afterEach(async () => {
    await Promise.all(envs.splice(0).map((e) => e.close()));
    await Promise.all(servers.splice(0).map((s) => s.stop()));
  });
  const serve = async (options: Parameters<typeof TestEnvServer.start>[0] = {}): Promise<TestEnvServer> => {
    const server = await TestEnvServer.start(options);
    servers.push(server);
    return server;
  };
  return { serve, envs };
}
