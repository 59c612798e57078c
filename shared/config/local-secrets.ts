// The local stack's secrets (`flashsale dev`, and the PM2 local mode): random ones generated once
// into <data dir>/secrets.json, which every process of that stack reads. Nowhere else is a secret
// ever defaulted.
import { createHmac, randomBytes } from 'node:crypto';
import { linkSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Config } from './parse.js';
import { redisConfigured } from './redis-choice.js';
import { ConfigError, type HostPort } from './values.js';

/**
 * Fills in missing secrets for the local stack only (`flashsale dev`, and the PM2 local mode, where
 * ecosystem.config.js sets FLASHSALE_LOCAL_STACK=1 because it starts `servers`): random ones,
 * generated once and kept in <data dir>/secrets.json. No secret is ever a constant.
 */
export function withLocalSecrets(config: Config): Config {
  if (!config.localStack) return config;
  const secretsGiven =
    config.jwtSecret !== undefined && config.adminToken !== undefined && config.paymentWebhookSecret !== undefined;
  if (secretsGiven && (config.development || (config.databaseUrl && redisConfigured(config)))) return config;
  const loopback = (url: string | undefined) =>
    url === undefined || /^[a-z]+:\/\/([^@/]*@)?(127\.[\d.]+|localhost|\[::1\])[:/]/.test(url);
  // `dev` may be pointed at servers elsewhere on purpose; the PM2 local mode never is.
  const loopbackHosts = (list: HostPort[] | undefined) =>
    (list ?? []).every((n) => /^(127\.[\d.]+|localhost|::1)$/.test(n.host));
  const local =
    loopback(config.databaseUrl) &&
    loopback(config.redisUrl) &&
    loopbackHosts(config.redisClusterNodes) &&
    loopbackHosts(config.redisSentinels);
  if (!config.development && !local) {
    throw new ConfigError(
      'FLASHSALE_LOCAL_STACK=1 is for the local stack on this machine only: with DATABASE_URL or Redis elsewhere, set JWT_SECRET (or JWT_JWKS_URL), ADMIN_TOKEN and PAYMENT_WEBHOOK_SECRET',
    );
  }
  const generated = localSecrets(config.dataDir);
  return {
    ...config,
    jwtSecret: config.jwtSecret ?? (config.jwtJwksUrl ? undefined : generated.jwtSecret),
    adminToken: config.adminToken ?? generated.adminToken,
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
    databaseUrl:
      config.databaseUrl ??
      `postgres://postgres:${encodeURIComponent(secrets.postgresPassword)}@127.0.0.1:${config.localPgPort}/postgres`,
    redisUrl: redisConfigured(config)
      ? config.redisUrl
      : `redis://:${encodeURIComponent(secrets.redisPassword)}@127.0.0.1:${config.localRedisPort}`,
  };
}

/** Path of the generated local-stack secrets. */
export const localSecretsFile = (dataDir: string) => join(dataDir, 'secrets.json');

export interface LocalSecrets {
  jwtSecret: string;
  adminToken: string;
  paymentWebhookSecret: string;
  /** The local servers' own passwords (Redis requirepass, Postgres's postgres role). */
  redisPassword: string;
  postgresPassword: string;
}

/** Secrets a file written by an older version may lack, each derived under its own label. */
const ADDED_LATER = {
  paymentWebhookSecret: 'flashsale payment webhook',
  redisPassword: 'flashsale local redis',
  postgresPassword: 'flashsale local postgres',
} as const;

/**
 * A file written before a secret existed (the webhook secret, the servers' passwords) gets it
 * added. Every process starting together must agree on it without a lock, so it is derived from
 * the file's own random secrets: each one computes the same value and writes the same bytes, and
 * whoever renames last changes nothing.
 */
function upgraded(file: string, secrets: LocalSecrets): LocalSecrets {
  const missing = (Object.keys(ADDED_LATER) as (keyof typeof ADDED_LATER)[]).filter((k) => secrets[k] === undefined);
  if (missing.length === 0) return secrets;
  const derive = (label: string) =>
    createHmac('sha256', `${secrets.jwtSecret}.${secrets.adminToken}`).update(label).digest('base64url');
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
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT')
      throw new ConfigError(`cannot read ${file}: ${(err as Error).message}; delete it to generate new local secrets`);
  }
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  const tmp = `${file}.${process.pid}.tmp`;
  const random = (bytes: number) => randomBytes(bytes).toString('base64url');
  const fresh: LocalSecrets = {
    jwtSecret: random(32),
    adminToken: random(24),
    paymentWebhookSecret: random(32),
    redisPassword: random(32),
    postgresPassword: random(32),
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
