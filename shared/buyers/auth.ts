// Who is asking: the buyer of a request (a bearer JWT, or a gateway's X-User-Id header), and the
// operator (ADMIN_TOKEN, or a named operator's secret: shared/operators/operators.ts). Route hooks
// that run before input validation, so a request nobody may make is refused as such (401/403)
// whatever its body says.
import { timingSafeEqual } from 'node:crypto';
import type { FastifyReply, FastifyRequest, preValidationAsyncHookHandler } from 'fastify';
import type { Config } from '../config/index.js';
import { HttpError } from '../runtime/errors.js';
import { buyerOf, checkUserId, type Buyer } from './buyer.js';
import { createVerifier } from './jwt.js';
import type { Logger } from '../runtime/logger.js';
import type { Pool } from '../runtime/db.js';
import { BOOTSTRAP_OPERATOR, operatorBySecret, secretDigest } from '../operators/operators.js';

declare module 'fastify' {
  interface FastifyRequest {
    /** The buyer, set by Auth.buyer. */
    buyer: Buyer;
    /** The operator's name, set by Auth.admin: the audit records it. */
    operator: string;
  }
}

export interface Auth {
  /** Sets req.buyer, or refuses with 401 unauthorized (a callback hook: every purchase runs it). */
  buyer: (req: FastifyRequest, reply: FastifyReply, done: (err?: Error) => void) => void;
  /**
   * Refuses anyone but an operator (ADMIN_TOKEN or a named operator's secret) and sets req.operator:
   * 401 without a bearer token or with a revoked secret, 403 with another one.
   */
  admin: preValidationAsyncHookHandler;
}

function bearer(req: FastifyRequest): string {
  const header = req.headers.authorization;
  const m = header ? /^Bearer ([^\s]+)$/.exec(header) : null;
  if (!m) throw new HttpError('unauthorized', 'Send Authorization: Bearer <token>.');
  return m[1]!;
}

/** Built once per app: a bad JWT setting stops the process here (ConfigError), and a JWKS is fetched once. */
export function createAuth(config: Config, logger: Logger, pool?: Pool): Auth {
  const verify = config.authMode === 'jwt' ? createVerifier(config, { logger }) : undefined;
  return {
    buyer(req, _reply, done) {
      let verified: Promise<Buyer>;
      try {
        if (!verify) {
          req.buyer = buyerOf(checkUserId(req.headers['x-user-id']));
          return done();
        }
        verified = verify(bearer(req));
      } catch (err) {
        return done(err as Error);
      }
      verified.then((buyer) => {
        req.buyer = buyer;
        done();
      }, done);
    },
    async admin(req) {
      if (!config.adminToken) throw new HttpError('forbidden', 'The admin API is off: set ADMIN_TOKEN to turn it on.');
      // Compared as digests: constant time whatever the lengths. The same digest an operator's
      // secret is kept as, so one computation serves both checks.
      const given = secretDigest(bearer(req));
      if (timingSafeEqual(given, secretDigest(config.adminToken))) {
        req.operator = BOOTSTRAP_OPERATOR;
        return;
      }
      // Looked up on every request, no cache: a revocation holds from the next one.
      const named = pool ? await operatorBySecret(pool, given) : undefined;
      if (named?.revoked)
        throw new HttpError('unauthorized', `Operator "${named.name}"'s secret was revoked: ask for a new operator.`);
      if (!named) throw new HttpError('forbidden', 'This token is not the admin token.');
      req.operator = named.name;
    },
  };
}
