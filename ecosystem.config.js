// PM2: `npm install && npm run build && npx pm2 start ecosystem.config.js`.
// Every app runs the compiled CLI. Without DATABASE_URL / REDIS_URL, a `servers` app runs local
// Postgres and Redis on fixed ports (the other apps wait for them at start-up).
const local = !process.env.DATABASE_URL || !process.env.REDIS_URL;
const pgPort = process.env.LOCAL_PG_PORT ?? '54329';
const redisPort = process.env.LOCAL_REDIS_PORT ?? '6389';

const env = {
  NODE_ENV: 'production',
  LOG_LEVEL: process.env.LOG_LEVEL ?? 'info',
  DATABASE_URL: process.env.DATABASE_URL ?? `postgres://postgres:flashsale@127.0.0.1:${pgPort}/postgres`,
  REDIS_URL: process.env.REDIS_URL ?? `redis://127.0.0.1:${redisPort}`,
  LOCAL_PG_PORT: pgPort,
  LOCAL_REDIS_PORT: redisPort,
  FLASHSALE_DATA_DIR: process.env.FLASHSALE_DATA_DIR ?? '.data',
  // Local defaults so a fresh clone runs; set real secrets in production.
  JWT_SECRET: process.env.JWT_SECRET ?? 'flashsale-local-secret-change-me',
  ADMIN_TOKEN: process.env.ADMIN_TOKEN ?? 'local-admin-change-me',
  AUTH_MODE: process.env.AUTH_MODE ?? 'jwt',
  HOST: process.env.HOST ?? '127.0.0.1',
  PORT: process.env.PORT ?? '3000',
  REPLAY_INTERVAL_SECONDS: process.env.REPLAY_INTERVAL_SECONDS ?? '5',
};

const opsPortBase = Number(process.env.OPS_PORT_BASE ?? 9100);

const daemon = (name, args, opsOffset, extra = {}) => ({
  name: `flashsale-${name}`,
  script: 'dist/daemons/cli.js',
  args,
  exec_mode: 'fork',
  instances: 1,
  wait_ready: true,
  listen_timeout: 40_000,
  kill_timeout: 5_000,
  restart_delay: 1_000,
  env: { ...env, OPS_PORT: String(opsPortBase + opsOffset), ...extra },
});

export const apps = [
  ...(local ? [{ ...daemon('servers', 'servers', 0), env: { ...env } }] : []),
  {
    ...daemon('api', 'api', 0),
    // Cluster mode: the instances share PORT; /metrics answers for the instance that takes the request.
    exec_mode: 'cluster',
    instances: Number(process.env.API_INSTANCES ?? 2),
    env: { ...env },
  },
  daemon('order-writer', 'order-writer', 1),
  daemon('expiry-listener', 'expiry-listener', 2),
  daemon('replay', 'replay', 3),
];
