// A test file's environment with the API in this process: started before its first test, stopped after its last.
import { after, before } from 'node:test';
import { startApi } from '../../daemons/api.js';
import type { ConfigOverrides } from '../../shared/config/index.js';
import { testEnv, type TestEnv } from './env.js';

export interface ApiEnv {
  env: TestEnv;
  api: Awaited<ReturnType<typeof startApi>>;
}

/** `started` gets them in the same hook (root-level `before` hooks do not wait for each other). */
export function apiEnv(started: (s: ApiEnv) => void, overrides: ConfigOverrides = {}): void {
  const s = {} as ApiEnv;
  before(async () => {
    s.env = await testEnv(overrides);
    s.api = await startApi(s.env.config, s.env.logger);
    started(s);
  });
  after(() => (s.api ? s.api.stop() : Promise.resolve()).then(() => s.env?.close()));
}
