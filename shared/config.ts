// The one place that reads the environment. CLI flags override it; everything is validated here.
import { createHmac, randomBytes } from 'node:crypto';
import { linkSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { ClientError } from './errors.js';

export type AuthMode = 'jwt' | 'trusted-header';

export interface Config {
  databaseUrl: string | undefined;
  redisUrl: string | undefined;
  /** Redis Cluster: seed nodes (instead of REDIS_URL). */
  redisClusterNodes: HostPort[] | undefined;
  /** Sentinel: the sentinels to ask and the master's name in their configuration (instead of REDIS_URL). */
  redisSentinels: HostPort[] | undefined;
  redisSentinelName: string | undefined;
  /** Password of the sentinels themselves, where they have one. */
  redisSentinelPassword: string | undefined;
  /** Credentials and TLS of the Cluster and Sentinel forms (REDIS_URL carries its own). */
  redisUsername: string | undefined;
  redisPassword: string | undefined;
  redisTls: boolean;
  /** A purchase is answered 202 only once WAIT confirms it reached this many replicas (0: no wait). */
  redisMinReplicasAck: number;
  redisWaitTimeoutMs: number;
  host: string;
  port: number;
  jwtSecret: string | undefined;
  /** RS256/ES256 buyer tokens: the identity provider's JWKS (instead of JWT_SECRET). */
  jwtJwksUrl: string | undefined;
  jwtIssuer: string | undefined;
  jwtAudience: string | undefined;
  /** Seconds of clock skew tolerated on exp/nbf. */
  jwtClockToleranceSeconds: number;
  /** Refuse tokens without exp (on by default outside development). */
  jwtRequireExp: boolean;
  adminToken: string | undefined;
  /** HMAC-SHA256 key the payment provider signs webhook events with (the API requires it). */
  paymentWebhookSecret: string | undefined;
  /** POST /api/orders/:id/pay, for development and demos: a signed event made by the API itself. */
  directPay: boolean;
  /** DIRECT_PAY_I_UNDERSTAND_BUYERS_PAY_NOTHING=yes: DIRECT_PAY may run outside `flashsale dev`. */
  directPayUnderstood: boolean;
  authMode: AuthMode;
  /**
   * The local stack (flashsale dev, or PM2 with its own `servers` app): missing secrets are
   * generated once and kept under the data directory; nowhere else is a secret ever defaulted.
   */
  localStack: boolean;
  logLevel: string;
  development: boolean;
  /** How long an API process answers sold_out from memory before asking Redis again. */
  soldOutCacheMs: number;
  /** Requests one API process serves at once; beyond it new requests get 429 busy at once. */
  maxInflight: number;
  /** How long a client may take to send a whole request (headers and body) before it gets 408. */
  requestTimeoutMs: number;
  /** How long a client may take to send a request body once its headers are in (408 after). */
  bodyTimeoutMs: number;
  /** Open connections one client address may hold; more are refused at once (0: no cap). */
  maxConnectionsPerClient: number;
  /** Order event streams (GET /api/orders/:id/events) one API process keeps open at once; more get 429 busy. */
  sseMaxStreams: number;
  /** Order event streams one buyer may hold open in one API process (tabs, reloads); more get 429 busy. */
  sseMaxStreamsPerBuyer: number;
  /** Purchases one buyer may attempt per window, across every API process (counted in Redis); 0: no limit. */
  purchaseRatePerBuyer: number;
  /** Purchases one client address may attempt per window, across every API process; 0: no limit (behind a proxy every buyer shares its address). */
  purchaseRatePerIp: number;
  /** The window both purchase rate limits count over. */
  purchaseRateWindowMs: number;
  /** Challenges one buyer may fetch, and solutions one buyer may exchange, per window (each counted apart, in Redis); 0: no limit. */
  challengeRatePerBuyer: number;
  /** The window the challenge limits count over. */
  challengeRateWindowMs: number;
  /** Margin on a buyer's count: it lives until the sale's end + payment window + this (no expiry without an end). */
  buyCountTtlSeconds: number;
  /**
   * New sales keep each buyer's count in a key of its own, as the previous release did, instead of
   * one hash per sale: on during a rolling upgrade, while APIs of that release (which read only
   * those keys) still run.
   */
  legacyBuyCounts: boolean;
  /** Orders one buyer may cancel in one sale; the next cancel is refused 409 cancel_limit. */
  maxCancelsPerSale: number;
  writerId: string;
  writerBatchSize: number;
  /** Batches one writer process has in flight at once, each under a writer id of its own (WRITER_ID, WRITER_ID/1, ...). */
  writerConcurrency: number;
  /** A writer that has not renewed its lease for this long is presumed dead; its batch is re-driven. */
  writerLeaseMs: number;
  writerIdleMs: number;
  replayIntervalSeconds: number;
  /** How often the listener touches due expiry keys so Redis expires them on time. */
  expiryNudgeMs: number;
  dataDir: string;
  /**
   * Port of a process's /healthz, /readyz and /metrics; 0 turns it off. Under PM2 each instance
   * adds its NODE_APP_INSTANCE (0, 1, ...), so the API's instances in cluster mode, which share
   * PORT, each answer /metrics for themselves on OPS_PORT, OPS_PORT + 1, ...
   */
  opsPort: number;
  /** How long a starting process waits for Redis and Postgres before giving up. */
  startupTimeoutMs: number;
  /** Fixed ports of the local servers (`flashsale servers`, `flashsale dev`). */
  localPgPort: number;
  localRedisPort: number;
  // --- exposure: where the ops port listens, which masters a sentinel may name ---
  /** Address of the ops port (OPS_PORT); loopback by default: /metrics and /readyz are for this host's Prometheus and probes. */
  opsHost: string;
  /** Sentinel: the only master addresses the client may be sent to (host or host:port); unset: whatever the sentinels name. */
  redisSentinelAllowedHosts: AllowedHost[] | undefined;
}

/** A bad or missing setting: the message names the variable and what to set (exit 2). */
export class ConfigError extends ClientError {
  override readonly code = 'config';
}

export type ConfigOverrides = Partial<Record<keyof Config, unknown>>;

const env = process.env;

function int(name: string, raw: unknown, fallback: number, min: number): number {
  if (raw === undefined || raw === '') return fallback;
  const n = Number(raw);
  if (!Number.isSafeInteger(n) || n < min) {
    throw new ConfigError(`${name} must be an integer >= ${min}, got ${JSON.stringify(raw)}`);
  }
  return n;
}

function str(raw: unknown): string | undefined {
  return raw === undefined || raw === '' ? undefined : String(raw);
}

function bool(name: string, raw: unknown, fallback: boolean): boolean {
  if (raw === undefined || raw === '') return fallback;
  if (raw === true || raw === 'true' || raw === '1') return true;
  if (raw === false || raw === 'false' || raw === '0') return false;
  throw new ConfigError(`${name} must be true or false, got ${JSON.stringify(raw)}`);
}

function onOff(name: string, raw: unknown, fallback: boolean): boolean {
  if (raw === 'on' || raw === true) return true;
  if (raw === 'off' || raw === false) return false;
  if (raw === undefined || raw === '') return fallback;
  throw new ConfigError(`${name} must be on or off, got ${JSON.stringify(raw)}`);
}

/** A consent: exactly `yes`, or unset. Anything else is a typo that must not pass for consent or for refusal. */
function yes(name: string, raw: unknown): boolean {
  if (raw === undefined || raw === '') return false;
  if (raw === 'yes' || raw === true) return true;
  throw new ConfigError(`${name} must be yes or unset, got ${JSON.stringify(raw)}`);
}

export function loadConfig(overrides: ConfigOverrides = {}): Config {
  const pick = (key: keyof Config, envName: string): unknown => overrides[key] ?? env[envName];
  const authMode = str(pick('authMode', 'AUTH_MODE')) ?? 'jwt';
  if (authMode !== 'jwt' && authMode !== 'trusted-header') {
    throw new ConfigError(`AUTH_MODE must be "jwt" or "trusted-header", got ${JSON.stringify(authMode)}`);
  }
  const development = (overrides.development as boolean | undefined) ?? env.NODE_ENV === 'development';
  return {
    databaseUrl: str(pick('databaseUrl', 'DATABASE_URL')),
    redisUrl: str(pick('redisUrl', 'REDIS_URL')),
    redisClusterNodes: hostPorts('REDIS_CLUSTER_NODES', pick('redisClusterNodes', 'REDIS_CLUSTER_NODES')),
    redisSentinels: hostPorts('REDIS_SENTINELS', pick('redisSentinels', 'REDIS_SENTINELS')),
    redisSentinelName: str(pick('redisSentinelName', 'REDIS_SENTINEL_NAME')),
    redisSentinelPassword: str(pick('redisSentinelPassword', 'REDIS_SENTINEL_PASSWORD')),
    redisUsername: str(pick('redisUsername', 'REDIS_USERNAME')),
    redisPassword: str(pick('redisPassword', 'REDIS_PASSWORD')),
    redisTls: bool('REDIS_TLS', pick('redisTls', 'REDIS_TLS'), false),
    redisMinReplicasAck: int('REDIS_MIN_REPLICAS_ACK', pick('redisMinReplicasAck', 'REDIS_MIN_REPLICAS_ACK'), 0, 0),
    redisWaitTimeoutMs: int('REDIS_WAIT_TIMEOUT_MS', pick('redisWaitTimeoutMs', 'REDIS_WAIT_TIMEOUT_MS'), 1000, 1),
    host: str(pick('host', 'HOST')) ?? '127.0.0.1',
    port: int('PORT', pick('port', 'PORT'), 3000, 0),
    jwtSecret: str(pick('jwtSecret', 'JWT_SECRET')),
    jwtJwksUrl: str(pick('jwtJwksUrl', 'JWT_JWKS_URL')),
    jwtIssuer: str(pick('jwtIssuer', 'JWT_ISSUER')),
    jwtAudience: str(pick('jwtAudience', 'JWT_AUDIENCE')),
    jwtClockToleranceSeconds: int('JWT_CLOCK_TOLERANCE_SECONDS', pick('jwtClockToleranceSeconds', 'JWT_CLOCK_TOLERANCE_SECONDS'), 5, 0),
    jwtRequireExp: bool('JWT_REQUIRE_EXP', pick('jwtRequireExp', 'JWT_REQUIRE_EXP'), !development),
    adminToken: str(pick('adminToken', 'ADMIN_TOKEN')),
    paymentWebhookSecret: str(pick('paymentWebhookSecret', 'PAYMENT_WEBHOOK_SECRET')),
    directPay: onOff('DIRECT_PAY', pick('directPay', 'DIRECT_PAY'), false),
    directPayUnderstood: yes('DIRECT_PAY_I_UNDERSTAND_BUYERS_PAY_NOTHING', pick('directPayUnderstood', 'DIRECT_PAY_I_UNDERSTAND_BUYERS_PAY_NOTHING')),
    authMode,
    localStack: bool('FLASHSALE_LOCAL_STACK', pick('localStack', 'FLASHSALE_LOCAL_STACK'), false),
    logLevel: str(pick('logLevel', 'LOG_LEVEL')) ?? 'info',
    development,
    soldOutCacheMs: int('SOLD_OUT_CACHE_MS', pick('soldOutCacheMs', 'SOLD_OUT_CACHE_MS'), 200, 0),
    maxInflight: int('MAX_INFLIGHT', pick('maxInflight', 'MAX_INFLIGHT'), 1000, 1),
    requestTimeoutMs: int('REQUEST_TIMEOUT_MS', pick('requestTimeoutMs', 'REQUEST_TIMEOUT_MS'), 10_000, 100),
    bodyTimeoutMs: int('BODY_TIMEOUT_MS', pick('bodyTimeoutMs', 'BODY_TIMEOUT_MS'), 2_000, 50),
    maxConnectionsPerClient: int('MAX_CONNECTIONS_PER_CLIENT', pick('maxConnectionsPerClient', 'MAX_CONNECTIONS_PER_CLIENT'), 1024, 0),
    sseMaxStreams: int('SSE_MAX_STREAMS', pick('sseMaxStreams', 'SSE_MAX_STREAMS'), 10_000, 1),
    sseMaxStreamsPerBuyer: int('SSE_MAX_STREAMS_PER_BUYER', pick('sseMaxStreamsPerBuyer', 'SSE_MAX_STREAMS_PER_BUYER'), 5, 1),
    purchaseRatePerBuyer: int('PURCHASE_RATE_PER_BUYER', pick('purchaseRatePerBuyer', 'PURCHASE_RATE_PER_BUYER'), 10, 0),
    purchaseRatePerIp: int('PURCHASE_RATE_PER_IP', pick('purchaseRatePerIp', 'PURCHASE_RATE_PER_IP'), 0, 0),
    purchaseRateWindowMs: int('PURCHASE_RATE_WINDOW_MS', pick('purchaseRateWindowMs', 'PURCHASE_RATE_WINDOW_MS'), 1000, 100),
    challengeRatePerBuyer: int('CHALLENGE_RATE_PER_BUYER', pick('challengeRatePerBuyer', 'CHALLENGE_RATE_PER_BUYER'), 5, 0),
    challengeRateWindowMs: int('CHALLENGE_RATE_WINDOW_MS', pick('challengeRateWindowMs', 'CHALLENGE_RATE_WINDOW_MS'), 10_000, 100),
    buyCountTtlSeconds: int('BUY_COUNT_TTL_SECONDS', pick('buyCountTtlSeconds', 'BUY_COUNT_TTL_SECONDS'), 86_400, 60),
    legacyBuyCounts: bool('LEGACY_BUY_COUNTS', pick('legacyBuyCounts', 'LEGACY_BUY_COUNTS'), false),
    maxCancelsPerSale: int('MAX_CANCELS_PER_SALE', pick('maxCancelsPerSale', 'MAX_CANCELS_PER_SALE'), 3, 1),
    writerId: str(pick('writerId', 'WRITER_ID')) ?? `${hostname()}:${env.pm_id ?? process.pid}`,
    writerBatchSize: int('WRITER_BATCH_SIZE', pick('writerBatchSize', 'WRITER_BATCH_SIZE'), 1000, 1),
    writerConcurrency: int('WRITER_CONCURRENCY', pick('writerConcurrency', 'WRITER_CONCURRENCY'), 2, 1),
    writerLeaseMs: int('WRITER_LEASE_MS', pick('writerLeaseMs', 'WRITER_LEASE_MS'), 15_000, 100),
    writerIdleMs: int('WRITER_IDLE_MS', pick('writerIdleMs', 'WRITER_IDLE_MS'), 20, 1),
    replayIntervalSeconds: replayInterval(pick('replayIntervalSeconds', 'REPLAY_INTERVAL_SECONDS')),
    expiryNudgeMs: int('EXPIRY_NUDGE_MS', pick('expiryNudgeMs', 'EXPIRY_NUDGE_MS'), 100, 10),
    dataDir: str(pick('dataDir', 'FLASHSALE_DATA_DIR')) ?? '.data',
    opsPort: opsPort(int('OPS_PORT', pick('opsPort', 'OPS_PORT'), 0, 0)),
    startupTimeoutMs: int('STARTUP_TIMEOUT_MS', pick('startupTimeoutMs', 'STARTUP_TIMEOUT_MS'), 30_000, 0),
    localPgPort: int('LOCAL_PG_PORT', pick('localPgPort', 'LOCAL_PG_PORT'), 54329, 1),
    localRedisPort: int('LOCAL_REDIS_PORT', pick('localRedisPort', 'LOCAL_REDIS_PORT'), 6389, 1),
    ...exposureSettings(pick),
  };
}

// --- exposure settings (OPS_HOST, REDIS_SENTINEL_ALLOWED_HOSTS) ---

/** A master a sentinel may name: a host, on any port unless one is given. */
export interface AllowedHost { host: string; port?: number }

function exposureSettings(pick: (key: keyof Config, envName: string) => unknown): Pick<Config, 'opsHost' | 'redisSentinelAllowedHosts'> {
  return {
    opsHost: str(pick('opsHost', 'OPS_HOST')) ?? '127.0.0.1',
    redisSentinelAllowedHosts: allowedHosts(pick('redisSentinelAllowedHosts', 'REDIS_SENTINEL_ALLOWED_HOSTS')),
  };
}

function allowedHosts(raw: unknown): AllowedHost[] | undefined {
  const list = str(raw);
  if (list === undefined) return undefined;
  return list.split(',').map((entry) => {
    const m = /^\s*(\[[0-9a-fA-F:]+\]|[^\s:,\[\]]+)(?::(\d{1,5}))?\s*$/.exec(entry);
    if (!m || (m[2] !== undefined && (Number(m[2]) < 1 || Number(m[2]) > 65535))) {
      throw new ConfigError(`REDIS_SENTINEL_ALLOWED_HOSTS must be host or host:port, comma-separated (the masters the sentinels may name), got ${JSON.stringify(list)}`);
    }
    return { host: m[1]!.replace(/^\[|\]$/g, ''), ...(m[2] === undefined ? {} : { port: Number(m[2]) }) };
  });
}

export interface HostPort { host: string; port: number }

function hostPorts(name: string, raw: unknown): HostPort[] | undefined {
  const list = str(raw);
  if (list === undefined) return undefined;
  return list.split(',').map((entry) => {
    const m = /^\s*(\[[0-9a-fA-F:]+\]|[^\s:,]+):(\d{1,5})\s*$/.exec(entry);
    if (!m || Number(m[2]) < 1 || Number(m[2]) > 65535) throw new ConfigError(`${name} must be host:port,host:port,..., got ${JSON.stringify(list)}`);
    return { host: m[1]!.replace(/^\[|\]$/g, ''), port: Number(m[2]) };
  });
}

export interface RedisAuth { username?: string; password?: string; tls: boolean }

/** Where Redis is: one server, a cluster (its seed nodes), or the master a set of sentinels names. */
export type RedisTarget =
  | { kind: 'single'; url: string }
  | { kind: 'cluster'; nodes: HostPort[]; auth: RedisAuth }
  | { kind: 'sentinel'; sentinels: HostPort[]; name: string; sentinelPassword?: string; auth: RedisAuth; allowedMasters?: AllowedHost[] };

const REDIS_FORMS = 'REDIS_URL (one server), REDIS_CLUSTER_NODES (Redis Cluster) or REDIS_SENTINELS with REDIS_SENTINEL_NAME (Sentinel)';

/** The one Redis form the settings name; anything ambiguous or half-given is refused (exit 2). */
export function redisTarget(config: Config): RedisTarget {
  const set = [['REDIS_URL', config.redisUrl], ['REDIS_CLUSTER_NODES', config.redisClusterNodes], ['REDIS_SENTINELS', config.redisSentinels]]
    .filter(([, v]) => v !== undefined).map(([name]) => name as string);
  if (set.length > 1) throw new ConfigError(`${set.join(' and ')} are both set: set exactly one of ${REDIS_FORMS}`);
  if (config.redisSentinelName && !config.redisSentinels) {
    throw new ConfigError('REDIS_SENTINEL_NAME is set without REDIS_SENTINELS: set both for Sentinel (REDIS_SENTINELS=host:port,...), or neither');
  }
  const auth: RedisAuth = { username: config.redisUsername, password: config.redisPassword, tls: config.redisTls };
  if (config.redisUrl) {
    const extra = [['REDIS_USERNAME', config.redisUsername], ['REDIS_PASSWORD', config.redisPassword], ['REDIS_TLS', config.redisTls || undefined]]
      .filter(([, v]) => v !== undefined).map(([name]) => name);
    if (extra.length > 0) throw new ConfigError(`${extra.join(', ')} apply to REDIS_CLUSTER_NODES and REDIS_SENTINELS only: with REDIS_URL put them in the URL (rediss://user:password@host:6379 for TLS)`);
    return { kind: 'single', url: config.redisUrl };
  }
  if (config.redisClusterNodes) return { kind: 'cluster', nodes: config.redisClusterNodes, auth };
  if (config.redisSentinels) {
    if (!config.redisSentinelName) throw new ConfigError('REDIS_SENTINELS is set without REDIS_SENTINEL_NAME: set it to the master\'s name in the sentinels\' configuration (`sentinel monitor <name> ...`)');
    return {
      kind: 'sentinel', sentinels: config.redisSentinels, name: config.redisSentinelName, sentinelPassword: config.redisSentinelPassword, auth,
      allowedMasters: config.redisSentinelAllowedHosts,
    };
  }
  throw new ConfigError(`Redis is not set: set ${REDIS_FORMS}, or pass --redis-url (or run \`flashsale dev\` for a local stack)`);
}

/** Whether any Redis setting is given (commands where Redis is optional). */
export const redisConfigured = (config: Config) => Boolean(config.redisUrl || config.redisClusterNodes || config.redisSentinels);

/** The servers every command but the local stack needs, with the message that says how to give them. */
export function requireServers(config: Config): { databaseUrl: string; redis: RedisTarget } {
  if (!config.databaseUrl) {
    throw new ConfigError('DATABASE_URL is not set: set DATABASE_URL=postgres://user:pass@host:5432/db or pass --database-url (or run `flashsale dev` for a local stack)');
  }
  return { databaseUrl: config.databaseUrl, redis: redisTarget(config) };
}

/** OPS_PORT shifted by this process's PM2 instance number; off stays off. */
function opsPort(base: number): number {
  if (base === 0) return 0;
  const port = base + int('NODE_APP_INSTANCE', env.NODE_APP_INSTANCE, 0, 0);
  if (port > 65535) throw new ConfigError(`OPS_PORT ${base} + NODE_APP_INSTANCE ${port - base} is past 65535: set a lower OPS_PORT`);
  return port;
}

/** node-cron takes 1-59 seconds, or whole minutes up to an hour (replay.ts cronExpression relies on it). */
function replayInterval(raw: unknown): number {
  const n = int('REPLAY_INTERVAL_SECONDS', raw, 5, 1);
  if (n < 60 || (n % 60 === 0 && n <= 3600)) return n;
  throw new ConfigError(`REPLAY_INTERVAL_SECONDS must be 1-59, or a whole number of minutes up to 3600, got ${n}`);
}

/** Values that have been published as defaults: anyone who read the repository knows them. */
const KNOWN_SECRETS = new Set<string>(['flashsale-development-secret', 'dev-admin', 'flashsale-local-secret-change-me', 'local-admin-change-me']);
const MIN_SECRET = 16;

/**
 * Fills in missing secrets for the local stack only (`flashsale dev`, and the PM2 local mode, where
 * ecosystem.config.js sets FLASHSALE_LOCAL_STACK=1 because it starts `servers`): random ones,
 * generated once and kept in <data dir>/secrets.json. No secret is ever a constant.
 */
export function withLocalSecrets(config: Config): Config {
  if (!config.localStack) return config;
  const secretsGiven = config.jwtSecret !== undefined && config.adminToken !== undefined && config.paymentWebhookSecret !== undefined;
  if (secretsGiven && (config.development || (config.databaseUrl && redisConfigured(config)))) return config;
  const loopback = (url: string | undefined) => url === undefined || /^[a-z]+:\/\/([^@/]*@)?(127\.[\d.]+|localhost|\[::1\])[:/]/.test(url);
  // `dev` may be pointed at servers elsewhere on purpose; the PM2 local mode never is.
  const loopbackHosts = (list: HostPort[] | undefined) => (list ?? []).every((n) => /^(127\.[\d.]+|localhost|::1)$/.test(n.host));
  const local = loopback(config.databaseUrl) && loopback(config.redisUrl) && loopbackHosts(config.redisClusterNodes) && loopbackHosts(config.redisSentinels);
  if (!config.development && !local) {
    throw new ConfigError('FLASHSALE_LOCAL_STACK=1 is for the local stack on this machine only: with DATABASE_URL or Redis elsewhere, set JWT_SECRET (or JWT_JWKS_URL), ADMIN_TOKEN and PAYMENT_WEBHOOK_SECRET');
  }
  const generated = localSecrets(config.dataDir);
  return {
    ...config, jwtSecret: config.jwtSecret ?? (config.jwtJwksUrl ? undefined : generated.jwtSecret), adminToken: config.adminToken ?? generated.adminToken,
    paymentWebhookSecret: config.paymentWebhookSecret ?? generated.paymentWebhookSecret,
    ...localServerUrls(config, generated),
  };
}

/**
 * The PM2 local mode's servers (the `servers` app) have random passwords from secrets.json, so
 * its other apps are given no URLs: each builds them here from the same file. `dev` starts its
 * servers itself and takes their URLs from them.
 */
function localServerUrls(config: Config, secrets: LocalSecrets): Pick<Config, 'databaseUrl' | 'redisUrl'> {
  if (config.development) return { databaseUrl: config.databaseUrl, redisUrl: config.redisUrl };
  return {
    databaseUrl: config.databaseUrl ?? `postgres://postgres:${encodeURIComponent(secrets.postgresPassword)}@127.0.0.1:${config.localPgPort}/postgres`,
    redisUrl: redisConfigured(config) ? config.redisUrl : `redis://:${encodeURIComponent(secrets.redisPassword)}@127.0.0.1:${config.localRedisPort}`,
  };
}

/** Path of the generated local-stack secrets. */
export const localSecretsFile = (dataDir: string) => join(dataDir, 'secrets.json');

export interface LocalSecrets {
  jwtSecret: string; adminToken: string; paymentWebhookSecret: string;
  /** The local servers' own passwords (Redis requirepass, Postgres's postgres role). */
  redisPassword: string; postgresPassword: string;
}

/** Secrets a file written by an older version may lack, each derived under its own label. */
const ADDED_LATER = { paymentWebhookSecret: 'flashsale payment webhook', redisPassword: 'flashsale local redis', postgresPassword: 'flashsale local postgres' } as const;

/**
 * A file written before a secret existed (the webhook secret, the servers' passwords) gets it
 * added. Every process starting together must agree on it without a lock, so it is derived from
 * the file's own random secrets: each one computes the same value and writes the same bytes, and
 * whoever renames last changes nothing.
 */
function upgraded(file: string, secrets: LocalSecrets): LocalSecrets {
  const missing = (Object.keys(ADDED_LATER) as (keyof typeof ADDED_LATER)[]).filter((k) => secrets[k] === undefined);
  if (missing.length === 0) return secrets;
  const derive = (label: string) => createHmac('sha256', `${secrets.jwtSecret}.${secrets.adminToken}`).update(label).digest('base64url');
  const next = { ...secrets, ...Object.fromEntries(missing.map((k) => [k, derive(ADDED_LATER[k])])) };
  const tmp = `${file}.${process.pid}.tmp`;
  writeFileSync(tmp, JSON.stringify(next), { mode: 0o600 });
  renameSync(tmp, file);
  return next;
}

/** Reads the local stack's secrets, generating them on first use; processes starting together agree on one file. */
export function localSecrets(dataDir: string): LocalSecrets {
  const file = localSecretsFile(dataDir);
  try {
    return upgraded(file, JSON.parse(readFileSync(file, 'utf8')) as LocalSecrets);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw new ConfigError(`cannot read ${file}: ${(err as Error).message}; delete it to generate new local secrets`);
  }
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  const tmp = `${file}.${process.pid}.tmp`;
  const random = (bytes: number) => randomBytes(bytes).toString('base64url');
  const fresh: LocalSecrets = {
    jwtSecret: random(32), adminToken: random(24), paymentWebhookSecret: random(32), redisPassword: random(32), postgresPassword: random(32),
  };
  writeFileSync(tmp, JSON.stringify(fresh), { mode: 0o600 });
  // link() fails if the file exists: the first writer wins whole, and everyone reads its file.
  try {
    linkSync(tmp, file);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
  } finally {
    rmSync(tmp, { force: true });
  }
  return JSON.parse(readFileSync(file, 'utf8')) as LocalSecrets;
}

function checkSecret(name: string, value: string): void {
  if (value.length < MIN_SECRET) throw new ConfigError(`${name} is too short: use at least ${MIN_SECRET} random characters (e.g. \`openssl rand -hex 32\`)`);
  if (KNOWN_SECRETS.has(value)) throw new ConfigError(`${name} is a published development default: set it to a secret of your own (e.g. \`openssl rand -hex 32\`)`);
}

/**
 * DIRECT_PAY lets every buyer mark an order paid with no money moving: `flashsale dev` turns it on
 * for the demo page; anywhere else it takes an explicit consent, and the API warns at each start.
 */
export function requireDirectPayConsent(config: Config): void {
  if (config.directPay && !config.directPayUnderstood) {
    throw new ConfigError('DIRECT_PAY=on lets any buyer pay an order without paying (POST /api/orders/:orderId/pay): it is for `flashsale dev` and demos. Set DIRECT_PAY=off, or set DIRECT_PAY_I_UNDERSTAND_BUYERS_PAY_NOTHING=yes to run it here anyway');
  }
}

/**
 * Every service process refuses to run without real secrets: a buyer-token key (or a JWKS) and an
 * admin token, and the API the payment provider's webhook secret too; none of them a published
 * default (the local stack generates its own).
 */
export function requireSecrets(config: Config, opts: { webhook?: boolean } = {}): void {
  if (config.authMode === 'jwt') {
    if (!config.jwtSecret && !config.jwtJwksUrl) {
      throw new ConfigError('JWT_SECRET is not set: set JWT_SECRET (the HS256 key buyers\' tokens are signed with, at least 16 characters) or JWT_JWKS_URL (your identity provider\'s JWKS), or set AUTH_MODE=trusted-header behind an authenticating gateway');
    }
    if (config.jwtSecret) checkSecret('JWT_SECRET', config.jwtSecret);
  }
  if (!config.adminToken) {
    throw new ConfigError('ADMIN_TOKEN is not set: set ADMIN_TOKEN (the bearer token of the admin API, at least 16 random characters, e.g. `openssl rand -hex 32`) or pass --admin-token');
  }
  checkSecret('ADMIN_TOKEN', config.adminToken);
  if (opts.webhook) {
    if (!config.paymentWebhookSecret) {
      throw new ConfigError('PAYMENT_WEBHOOK_SECRET is not set: set it to the signing secret your payment provider signs webhook events with (at least 16 characters, e.g. `openssl rand -hex 32`)');
    }
    checkSecret('PAYMENT_WEBHOOK_SECRET', config.paymentWebhookSecret);
  }
}
