// What a secret must be: every service refuses to run without real ones, and DIRECT_PAY, which
// lets buyers pay nothing, needs an explicit consent outside `flashsale dev`.
import type { Config } from './parse.js';
import { ConfigError } from './values.js';

/** Values that have been published as defaults: anyone who read the repository knows them. */
const KNOWN_SECRETS = new Set<string>([
  'flashsale-development-secret',
  'dev-admin',
  'flashsale-local-secret-change-me',
  'local-admin-change-me',
]);
const MIN_SECRET = 16;

function checkSecret(name: string, value: string): void {
  if (value.length < MIN_SECRET)
    throw new ConfigError(
      `${name} is too short: use at least ${MIN_SECRET} random characters (e.g. \`openssl rand -hex 32\`)`,
    );
  if (KNOWN_SECRETS.has(value))
    throw new ConfigError(
      `${name} is a published development default: set it to a secret of your own (e.g. \`openssl rand -hex 32\`)`,
    );
}

/**
 * DIRECT_PAY lets every buyer mark an order paid with no money moving: `flashsale dev` turns it on
 * for the demo page; anywhere else it takes an explicit consent, and the API warns at each start.
 */
export function requireDirectPayConsent(config: Config): void {
  if (config.directPay && !config.directPayUnderstood) {
    throw new ConfigError(
      'DIRECT_PAY=on lets any buyer pay an order without paying (POST /api/orders/:orderId/pay): it is for `flashsale dev` and demos. Set DIRECT_PAY=off, or set DIRECT_PAY_I_UNDERSTAND_BUYERS_PAY_NOTHING=yes to run it here anyway',
    );
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
      throw new ConfigError(
        "JWT_SECRET is not set: set JWT_SECRET (the HS256 key buyers' tokens are signed with, at least 16 characters) or JWT_JWKS_URL (your identity provider's JWKS), or set AUTH_MODE=trusted-header behind an authenticating gateway",
      );
    }
    if (config.jwtSecret) checkSecret('JWT_SECRET', config.jwtSecret);
  }
  if (!config.adminToken) {
    throw new ConfigError(
      'ADMIN_TOKEN is not set: set ADMIN_TOKEN (the bearer token of the admin API, at least 16 random characters, e.g. `openssl rand -hex 32`) or pass --admin-token',
    );
  }
  checkSecret('ADMIN_TOKEN', config.adminToken);
  if (opts.webhook) {
    if (!config.paymentWebhookSecret) {
      throw new ConfigError(
        'PAYMENT_WEBHOOK_SECRET is not set: set it to the signing secret your payment provider signs webhook events with (at least 16 characters, e.g. `openssl rand -hex 32`)',
      );
    }
    checkSecret('PAYMENT_WEBHOOK_SECRET', config.paymentWebhookSecret);
  }
}
