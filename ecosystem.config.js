// PM2: `npm install && npm run build && npx pm2 start ecosystem.config.js`.
// Every app runs the compiled CLI. Without DATABASE_URL / REDIS_URL, a `servers` app runs local
// Postgres and Redis on fixed ports (the other apps wait for them at start-up), and the apps use
// random secrets and server passwords generated once under the data directory. With real servers nothing is defaulted:
// every app exits 2, naming the variable, until JWT_SECRET (or JWT_JWKS_URL) and ADMIN_TOKEN are set,
// and the API until PAYMENT_WEBHOOK_SECRET is set too; `pm2 status` shows such an app stopped.
const local = !process.env.DATABASE_URL || !process.env.REDIS_URL;

/** The operator's settings passed through as they are: unset stays unset. */
const given = (...names) =>
  Object.fromEntries(names.filter((n) => process.env[n] !== undefined).map((n) => [n, process.env[n]]));
const pgPort = process.env.LOCAL_PG_PORT ?? '54329';
const redisPort = process.env.LOCAL_REDIS_PORT ?? '6389';

const env = {
  NODE_ENV: 'production',
  LOG_LEVEL: process.env.LOG_LEVEL ?? 'info',
  // In the local mode the servers have random passwords (<data dir>/secrets.json): an app given no
  // URL builds it from that file and the ports below (shared/config/index.ts withLocalSecrets).
  ...given('DATABASE_URL', 'REDIS_URL'),
  LOCAL_PG_PORT: pgPort,
  LOCAL_REDIS_PORT: redisPort,
  FLASHSALE_DATA_DIR: process.env.FLASHSALE_DATA_DIR ?? '.data',
  FLASHSALE_LOCAL_STACK: local ? '1' : '0',
  ...given(
    'JWT_SECRET',
    'JWT_JWKS_URL',
    'JWT_ISSUER',
    'JWT_AUDIENCE',
    'ADMIN_TOKEN',
    'PAYMENT_WEBHOOK_SECRET',
    'DIRECT_PAY',
    'DIRECT_PAY_I_UNDERSTAND_BUYERS_PAY_NOTHING',
  ),
  AUTH_MODE: process.env.AUTH_MODE ?? 'jwt',
  HOST: process.env.HOST ?? '127.0.0.1',
  PORT: process.env.PORT ?? '3000',
  REPLAY_INTERVAL_SECONDS: process.env.REPLAY_INTERVAL_SECONDS ?? '5',
  // The ops ports stay on loopback (shared/config/index.ts OPS_HOST) whatever HOST the API takes: a
  // Prometheus on this host scrapes 127.0.0.1 (deploy/prometheus/prometheus.yml).
  ...given('OPS_HOST'),
};

const opsPortBase = Number(process.env.OPS_PORT_BASE ?? 9100);
/** The API's instances take OPS_PORT_BASE + 10, + 11, ... (shared/config/index.ts adds NODE_APP_INSTANCE). */
const API_OPS_OFFSET = 10;

const daemon = (name, args, opsOffset, extra = {}) => ({
  name: `flashsale-${name}`,
  script: 'dist/daemons/cli.js',
  args,
  exec_mode: 'fork',
  instances: 1,
  wait_ready: true,
  listen_timeout: 40_000,
  kill_timeout: 5_000,
  // 2 is a bad setting: restarting cannot fix it, and `pm2 logs --err` says what to set. No
  // restart_delay: with one, PM2 shows such an app as "waiting restart" though it schedules none
  // (pm2 7 God.handleExit); without, it shows "stopped". A start waits up to STARTUP_TIMEOUT_MS for
  // its servers before it exits 1, which paces the restarts of an app whose servers are away.
  stop_exit_codes: [2],
  env: { ...env, OPS_PORT: String(opsPortBase + opsOffset), ...extra },
});

export const apps = [
  ...(local ? [{ ...daemon('servers', 'servers', 0), env: { ...env } }] : []),
  {
    ...daemon('api', 'api', 0),
    // Cluster mode: the instances share PORT, whose /metrics answers for whichever instance takes
    // the request; instance N also serves its own on OPS_PORT_BASE + 10 + N (deploy/prometheus).
    exec_mode: 'cluster',
    instances: Number(process.env.API_INSTANCES ?? 2),
    env: { ...env, OPS_PORT: String(opsPortBase + API_OPS_OFFSET) },
  },
  daemon('order-writer', 'order-writer', 1),
  daemon('expiry-listener', 'expiry-listener', 2),
  daemon('replay', 'replay', 3),
  daemon('admission', 'admission', 4),
  daemon('events', 'events', 5),
];
