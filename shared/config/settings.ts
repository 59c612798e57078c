// Every setting, declared once: its environment variable, its CLI flag (if any), its parser with
// the default and the validation, and its line in the settings table of docs/settings.md. The
// Config type, loadConfig and that table (`npm run docs:settings`) all derive from this list, in
// this order. Docs may link to the other docs/ pages: the table is rendered there.
import { hostname } from 'node:os';
import {
  allowedHosts,
  bool,
  developmentMode,
  hostPorts,
  int,
  oneOf,
  onOff,
  opsPort,
  replayInterval,
  serverUrl,
  text,
  yes,
  type Parser,
} from './values.js';

export interface Setting<T> {
  /** The environment variable; also the name every error message gives. */
  env: string;
  /** The CLI flag that overrides it, without the dashes. */
  flag?: string;
  parse: Parser<T>;
  /** The default as the table shows it, where the parser's own would mislead (filled in elsewhere, or off). */
  shown?: string;
  /** Its line in the table: what it does and what setting it changes. */
  doc: string;
}

const localStack = '(local stack)';
const generated = 'none (local stack: generated)';

export const SETTINGS = {
  databaseUrl: {
    env: 'DATABASE_URL',
    flag: 'database-url',
    parse: serverUrl(['postgres:', 'postgresql:'], 'postgres://user:password@host:5432/database'),
    shown: localStack,
    doc: 'Postgres (`postgres://user:password@host:5432/database`; a password with `@`, `:`, `/`, `?` or `#` percent-encoded). Required outside `dev`; a malformed URL stops any command at once, exit 2, saying what is wrong.',
  },
  redisUrl: {
    env: 'REDIS_URL',
    flag: 'redis-url',
    parse: serverUrl(['redis:', 'rediss:'], 'redis://:password@host:6379 (rediss:// for TLS)'),
    shown: localStack,
    doc: 'one Redis (`redis://user:pass@host:6379`, `rediss://` for TLS). Outside `dev`, exactly one of `REDIS_URL`, `REDIS_CLUSTER_NODES`, `REDIS_SENTINELS` is required (see [Scale-out](scale-out.md))',
  },
  redisClusterNodes: {
    env: 'REDIS_CLUSTER_NODES',
    parse: hostPorts,
    doc: 'Redis Cluster: seed nodes `host:port,host:port,...`',
  },
  redisSentinels: {
    env: 'REDIS_SENTINELS',
    parse: hostPorts,
    doc: 'Sentinel: the sentinels `host:port,...`, with `REDIS_SENTINEL_NAME`',
  },
  redisSentinelName: {
    env: 'REDIS_SENTINEL_NAME',
    parse: text(),
    doc: "Sentinel: the master's name in the sentinels' configuration",
  },
  redisSentinelPassword: {
    env: 'REDIS_SENTINEL_PASSWORD',
    parse: text(),
    doc: 'Sentinel: the password of the sentinels themselves, if they have one',
  },
  redisUsername: {
    env: 'REDIS_USERNAME',
    parse: text(),
    doc: 'ACL user of the Cluster and Sentinel forms (`REDIS_URL` carries its own)',
  },
  redisPassword: {
    env: 'REDIS_PASSWORD',
    parse: text(),
    doc: 'password of the Cluster and Sentinel forms (`REDIS_URL` carries its own)',
  },
  redisTls: {
    env: 'REDIS_TLS',
    parse: bool(false),
    doc: 'TLS of the Cluster and Sentinel forms (`REDIS_URL` carries its own). Under Sentinel, `REDIS_TLS=true` reaches the sentinels over TLS too, so `REDIS_SENTINEL_PASSWORD` never travels in clear; a sentinel without TLS fails the start (exit 1)',
  },
  redisSentinelAllowedHosts: {
    env: 'REDIS_SENTINEL_ALLOWED_HOSTS',
    parse: allowedHosts,
    doc: 'Sentinel: the masters the sentinels may name, `host` or `host:port`, comma-separated; a master outside the list is never connected to (logged at error with `alert: SENTINEL_MASTER_REFUSED`; commands answer `503`)',
  },
  redisMinReplicasAck: {
    env: 'REDIS_MIN_REPLICAS_ACK',
    parse: int(0, 0),
    doc: 'answer a purchase `202` only once `WAIT` says this many replicas have it; otherwise `503 unavailable` (see [Scale-out](scale-out.md)). A master with fewer replicas online answers its purchases `503` reserving nothing and has what it holds written unconfirmed ([the degraded mode](how-it-works.md#a-redis-master-without-its-replicas-the-degraded-mode))',
  },
  redisWaitTimeoutMs: { env: 'REDIS_WAIT_TIMEOUT_MS', parse: int(1000, 1), doc: 'how long that `WAIT` may take' },
  port: { env: 'PORT', flag: 'port', parse: int(3000, 0), doc: 'API listen port' },
  host: { env: 'HOST', flag: 'host', parse: text('127.0.0.1'), doc: 'API listen address' },
  jwtSecret: {
    env: 'JWT_SECRET',
    flag: 'jwt-secret',
    parse: text(),
    shown: generated,
    doc: 'HS256 key of buyer tokens, at least 16 characters; with `AUTH_MODE=jwt`, this or `JWT_JWKS_URL` is required (see [Security](security.md))',
  },
  jwtJwksUrl: {
    env: 'JWT_JWKS_URL',
    parse: text(),
    doc: "https URL of the identity provider's JWKS (http only on loopback), for RS256/ES256 tokens; instead of `JWT_SECRET`",
  },
  jwtIssuer: { env: 'JWT_ISSUER', parse: text(), doc: "when set, a token's `iss` must equal it" },
  jwtAudience: { env: 'JWT_AUDIENCE', parse: text(), doc: "when set, a token's `aud` must include it" },
  jwtClockToleranceSeconds: {
    env: 'JWT_CLOCK_TOLERANCE_SECONDS',
    parse: int(5, 0),
    doc: 'clock skew allowed on `exp` and `nbf`',
  },
  jwtRequireExp: {
    env: 'JWT_REQUIRE_EXP',
    parse: bool(({ development }) => !development, '`true` (`false` in development)'),
    doc: 'refuse tokens without `exp`',
  },
  authMode: {
    env: 'AUTH_MODE',
    flag: 'auth-mode',
    parse: oneOf(['jwt', 'trusted-header']),
    doc: '`jwt` or `trusted-header` (`X-User-Id`)',
  },
  adminToken: {
    env: 'ADMIN_TOKEN',
    flag: 'admin-token',
    parse: text(),
    shown: generated,
    doc: 'bearer token of the admin routes (`POST /api/sales`, `GET /api/sales`, `POST /api/sales/:saleId/end`, pause, resume and end-time, `GET /api/audit`, `POST /api/payments/:paymentId/refund`), at least 16 characters; required (see [Security](security.md)). The bootstrap operator, recorded as `admin-token` in the audit; named operators get secrets of their own (`flashsale operator add`)',
  },
  paymentWebhookSecret: {
    env: 'PAYMENT_WEBHOOK_SECRET',
    parse: text(),
    shown: generated,
    doc: 'HMAC-SHA256 key the payment provider signs webhook events with, at least 16 characters; the API requires it (see [Security](security.md))',
  },
  directPay: {
    env: 'DIRECT_PAY',
    parse: onOff(false),
    shown: '`off` (`on` under `dev`)',
    doc: '`on`: `POST /api/orders/:id/pay` exists (development and demos): the API signs a `payment.succeeded` event of price x qty itself and takes it through the webhook path, so any buyer can pay without paying. Outside `dev` every command refuses to start with it (exit 2) unless `DIRECT_PAY_I_UNDERSTAND_BUYERS_PAY_NOTHING=yes`, and the API then logs a warning at each start',
  },
  directPayUnderstood: {
    env: 'DIRECT_PAY_I_UNDERSTAND_BUYERS_PAY_NOTHING',
    parse: yes,
    doc: '`yes`: allow `DIRECT_PAY=on` outside `flashsale dev` (any other value is refused)',
  },
  logLevel: {
    env: 'LOG_LEVEL',
    flag: 'log-level',
    parse: text('info'),
    doc: 'pino level; JSON on stdout, pretty when `NODE_ENV=development` or under `dev`',
  },
  development: {
    env: 'NODE_ENV',
    parse: developmentMode,
    doc: '`development`: pretty logs, `JWT_REQUIRE_EXP` off by default and `POST /api/dev/token` (with `JWT_SECRET`), as under `dev`; secrets are still required',
  },
  soldOutCacheMs: {
    env: 'SOLD_OUT_CACHE_MS',
    parse: int(200, 0),
    doc: 'how long an API process answers sold_out from memory',
  },
  maxInflight: {
    env: 'MAX_INFLIGHT',
    parse: int(1000, 1),
    doc: 'requests one API process holds at once; past it, `429 busy`',
  },
  requestTimeoutMs: {
    env: 'REQUEST_TIMEOUT_MS',
    parse: int(10_000, 100),
    doc: 'how long a client may take to send a whole request; past it, `408 request_timeout` and the connection is closed',
  },
  bodyTimeoutMs: {
    env: 'BODY_TIMEOUT_MS',
    parse: int(2_000, 50),
    doc: 'how long a client may take to send a body once its headers are in; past it, `408 request_timeout` and the connection is closed',
  },
  maxConnectionsPerClient: {
    env: 'MAX_CONNECTIONS_PER_CLIENT',
    parse: int(1024, 0),
    doc: 'open connections one client address may hold; more are answered `429 busy` and closed (`0`: no cap). Behind a proxy or gateway every buyer shares its address: set `0` there and cap at the proxy',
  },
  buyCountTtlSeconds: {
    env: 'BUY_COUNT_TTL_SECONDS',
    parse: int(86_400, 60),
    doc: "margin on a buyer's count: it lives until the sale's end + payment window + this; for a sale without end it never expires",
  },
  legacyBuyCounts: {
    env: 'LEGACY_BUY_COUNTS',
    parse: bool(false),
    doc: "`true`: sales created by this process keep each buyer's count in a key of its own, as the previous release did, instead of one hash per sale; for a rolling upgrade, while APIs of that release still run (see [Operations](operations.md#upgrading-from-the-previous-release))",
  },
  maxCancelsPerSale: {
    env: 'MAX_CANCELS_PER_SALE',
    parse: int(3, 1),
    doc: 'orders one buyer may cancel in one sale (at least 1); the next cancel is `409 cancel_limit`',
  },
  maxUnpaidPerSale: {
    env: 'MAX_UNPAID_PER_SALE',
    parse: int(2, 0),
    doc: 'orders one buyer may let expire unpaid in one sale; past it, their purchases in that sale are `409 unpaid_limit` (0: no bound)',
  },
  writerId: {
    env: 'WRITER_ID',
    flag: 'writer-id',
    parse: text(({ env }) => `${hostname()}:${env.pm_id ?? process.pid}`, '`<hostname>:<pm2 id or pid>`'),
    doc: "a writer's identity; keep it stable across restarts",
  },
  writerBatchSize: {
    env: 'WRITER_BATCH_SIZE',
    flag: 'batch-size',
    parse: int(1000, 1),
    doc: 'winners per Postgres round trip',
  },
  writerConcurrency: {
    env: 'WRITER_CONCURRENCY',
    parse: int(2, 1),
    doc: "batches one writer process has in flight at once, each under its own writer id (`WRITER_ID`, `WRITER_ID/1`, ...): one batch's insert overlaps another's Redis work",
  },
  writerLeaseMs: {
    env: 'WRITER_LEASE_MS',
    parse: int(15_000, 100),
    doc: 'a writer silent this long is presumed dead and its batch re-driven',
  },
  writerIdleMs: { env: 'WRITER_IDLE_MS', parse: int(20, 1), doc: 'writer poll delay when every list is empty' },
  expiryNudgeMs: { env: 'EXPIRY_NUDGE_MS', parse: int(100, 10), doc: 'how often the listener touches due expiry keys' },
  replayIntervalSeconds: {
    env: 'REPLAY_INTERVAL_SECONDS',
    flag: 'interval',
    parse: replayInterval,
    doc: 'replay cadence (1-59 s, or whole minutes)',
  },
  eventsRetryHorizonSeconds: {
    env: 'EVENTS_RETRY_HORIZON_SECONDS',
    parse: int(259_200, 1),
    doc: 'how long `flashsale events` retries a delivery (3 days); an endpoint failing for this long is disabled ([Events](events.md))',
  },
  eventsRetryBaseMs: {
    env: 'EVENTS_RETRY_BASE_MS',
    parse: int(10_000, 1),
    doc: 'the first retry of a failed delivery waits about this long, each next one twice as long (jittered, at most an hour)',
  },
  eventsTimeoutMs: {
    env: 'EVENTS_TIMEOUT_MS',
    parse: int(10_000, 100),
    doc: 'a delivery not answered within this is a failure, retried',
  },
  eventsConcurrency: {
    env: 'EVENTS_CONCURRENCY',
    parse: int(4, 1),
    doc: 'deliveries one `flashsale events` process has in flight to one endpoint at once',
  },
  eventsPollMs: {
    env: 'EVENTS_POLL_MS',
    parse: int(250, 10),
    doc: '`flashsale events` looks for new events and due retries this often when idle',
  },
  eventsRotationOverlapSeconds: {
    env: 'EVENTS_ROTATION_OVERLAP_SECONDS',
    parse: int(86_400, 0),
    doc: "after an endpoint's secret is rotated, deliveries carry the old secret's signature too for this long",
  },
  eventsAttemptsRetentionDays: {
    env: 'EVENTS_ATTEMPTS_RETENTION_DAYS',
    parse: int(30, 1),
    doc: "`flashsale events` deletes delivery attempts older than this, except a delivery's still pending ([Events](events.md))",
  },
  eventsAllowPrivateEndpoints: {
    env: 'EVENTS_ALLOW_PRIVATE_ENDPOINTS',
    parse: bool(false),
    doc: 'accept endpoints on loopback, link-local or private addresses (development only: otherwise refused, as a request forgery risk)',
  },
  sseMaxStreams: {
    env: 'SSE_MAX_STREAMS',
    parse: int(10_000, 1),
    doc: 'order event streams one API process keeps open; more get `429 busy` (they can poll `GET /api/orders/:orderId`)',
  },
  sseMaxStreamsPerBuyer: {
    env: 'SSE_MAX_STREAMS_PER_BUYER',
    parse: int(5, 1),
    doc: 'order event streams one buyer may hold open in one API process; more get `429 busy`',
  },
  purchaseRatePerBuyer: {
    env: 'PURCHASE_RATE_PER_BUYER',
    parse: int(10, 0),
    doc: 'purchase attempts one buyer may make at one sale per `PURCHASE_RATE_WINDOW_MS`, counted by the purchase script in Redis across every API process; more get `429 rate_limited` with `Retry-After` (`0`: no limit). Only authenticated, valid attempts count, and none while the API process knows the sale is sold out',
  },
  purchaseRatePerIp: {
    env: 'PURCHASE_RATE_PER_IP',
    parse: int(0, 0),
    shown: '`0` (off)',
    doc: 'the same per client address (an IPv6 /64 counts as one), counted on arrival, before the token is verified. The API has no trust-proxy setting: behind a proxy or gateway every buyer shares its address, so keep `0` there and limit at the proxy; facing buyers directly, `100` is a reasonable value',
  },
  purchaseRateWindowMs: {
    env: 'PURCHASE_RATE_WINDOW_MS',
    parse: int(1000, 100),
    doc: 'the fixed window both purchase limits count over (at least 100)',
  },
  challengeRatePerBuyer: {
    env: 'CHALLENGE_RATE_PER_BUYER',
    parse: int(5, 0),
    doc: 'proof-of-work challenges one buyer may fetch per `CHALLENGE_RATE_WINDOW_MS`, and, counted apart, solutions one buyer may exchange for purchase tokens, across every API process (counted in Redis); more get `429 rate_limited` with `Retry-After` (`0`: no limit)',
  },
  challengeRateWindowMs: {
    env: 'CHALLENGE_RATE_WINDOW_MS',
    parse: int(10_000, 100),
    doc: 'the fixed window both challenge limits count over (at least 100)',
  },
  opsPort: {
    env: 'OPS_PORT',
    flag: 'ops-port',
    parse: opsPort,
    doc: "a process's `/healthz`, `/readyz`, `/metrics` port; under PM2 each instance adds its `NODE_APP_INSTANCE` (0, 1, ...), so the API's cluster instances, which share `PORT`, each answer for themselves",
  },
  opsHost: {
    env: 'OPS_HOST',
    parse: text('127.0.0.1'),
    doc: 'address the ops port listens on, whatever `HOST` the API takes (Prometheus on the same host scrapes 127.0.0.1); one address may hold `MAX_CONNECTIONS_PER_CLIENT` connections there too',
  },
  startupTimeoutMs: {
    env: 'STARTUP_TIMEOUT_MS',
    parse: int(30_000, 0),
    doc: 'how long a starting process waits for Redis and Postgres; every 5 s it logs what it waits for (`waiting for Postgres at host:port, 5 of 30 s`) and the last error',
  },
  dataDir: {
    env: 'FLASHSALE_DATA_DIR',
    flag: 'data-dir',
    parse: text('.data'),
    doc: 'local stack data, its generated `secrets.json`, and its `stack.pid`, by which one-shot commands given no servers find a running local stack',
  },
  localStack: {
    env: 'FLASHSALE_LOCAL_STACK',
    parse: bool(false, '`0`'),
    doc: '`1`: this process belongs to the local stack (set by `ecosystem.config.js` when it starts `servers`); missing secrets are read from, or generated once into, `<data dir>/secrets.json`. Refused with servers that are not on this machine',
  },
  localPgPort: {
    env: 'LOCAL_PG_PORT',
    parse: int(54329, 1),
    doc: 'local stack Postgres port (`flashsale servers`, `flashsale dev`)',
  },
  localRedisPort: {
    env: 'LOCAL_REDIS_PORT',
    parse: int(6389, 1),
    doc: 'local stack Redis port (`flashsale servers`, `flashsale dev`)',
  },
} satisfies Record<string, Setting<unknown>>;
