// The hello-world ceiling run as ecosystem.config.js runs the API: PM2 cluster mode, API_INSTANCES
// instances sharing PORT, wait_ready. The script is bench/baselines/hello.ts under tsx, as the
// purchase bench runs it (`npm run bench -- --only machine`).
import { fileURLToPath } from 'node:url';

export const apps = [
  {
    name: 'bench-hello',
    script: fileURLToPath(new URL('./hello.ts', import.meta.url)),
    cwd: fileURLToPath(new URL('../..', import.meta.url)),
    // Node itself, with tsx loading the .ts (PM2 maps .ts to bun or native type stripping, which Node 20 lacks).
    interpreter: 'node',
    node_args: ['--import', import.meta.resolve('tsx')],
    exec_mode: 'cluster',
    instances: Number(process.env.API_INSTANCES ?? 2),
    wait_ready: true,
    listen_timeout: 40_000,
    kill_timeout: 5_000,
    env: { PORT: process.env.PORT ?? '3000' },
  },
];
