// What an admission mode's routes get from buildApp. Apart from the mode's interface (admission/mode.ts),
// which holds its routes as an opaque plugin, so that the registry imports nothing of the HTTP layer.
import type { Auth } from '../../../buyers/auth.js';
import type { Config } from '../../../config/index.js';
import type { Challenges } from '../../../purchase/challenge.js';
import type { PurchaseRules } from '../../../purchase/rules/sale-rules.js';
import type { RedisClient } from '../../../redis/connect.js';
import type { Pool } from '../../../runtime/db.js';
import type { Logger } from '../../../runtime/logger.js';
import type { SaleCache } from '../../sale-cache.js';

/** What a mode's routes get from buildApp. */
export interface ModeRouteDeps {
  pool: Pool;
  redis: RedisClient;
  auth: Auth;
  limits: Config;
  saleCache: SaleCache;
  challenges: Challenges;
  /** The sale's rules on the buyer (a verified email), judged at the mode's own doors. */
  rules: PurchaseRules;
  logger: Logger;
}
