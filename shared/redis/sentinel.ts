// A Sentinel client: what it may trust, and how it stays connected. The sentinels hold
// REDIS_SENTINEL_PASSWORD and name the master every command goes to: with REDIS_TLS the password
// travels to them over TLS only, and with REDIS_SENTINEL_ALLOWED_HOSTS a master outside the list is
// never connected to, whoever names it. A client ioredis ends for good is connected again (below).
import { SentinelConnector, type Redis, type RedisOptions } from 'ioredis';
import type { AllowedHost, RedisTarget } from '../config/index.js';

type SentinelTarget = Extract<RedisTarget, { kind: 'sentinel' }>;

/**
 * The Sentinel form's connection options. With TLS asked for, both the sentinels (`sentinelTLS`)
 * and the master (`enableTLSForSentinelMode` with `tls`) are reached over TLS; ioredis has no
 * fallback to plain TCP, so a sentinel that does not speak TLS fails the start instead of
 * receiving the password in clear.
 */
export function sentinelOptions(target: SentinelTarget): RedisOptions {
  const tls = target.auth.tls ? {} : undefined;
  return {
    sentinels: target.sentinels,
    name: target.name,
    sentinelPassword: target.sentinelPassword,
    username: target.auth.username,
    password: target.auth.password,
    tls,
    sentinelTLS: tls,
    enableTLSForSentinelMode: target.auth.tls,
    // The sentinels' +switch-master moves the connection at once, instead of it learning of the
    // failover from its first refused write (a subscribed connection never would).
    failoverDetector: true,
  };
}

export const allowedHostsText = (list: AllowedHost[]) =>
  list.map((a) => (a.port === undefined ? a.host : `${a.host}:${a.port}`)).join(',');

type Address = { host: string; port: number };
type ErrorEmitter = (type: string, err: Error) => void;

const allows = (list: AllowedHost[], at: Address) =>
  list.some((a) => a.host === at.host && (a.port === undefined || a.port === at.port));

/** Thrown where the sentinels name a master outside REDIS_SENTINEL_ALLOWED_HOSTS: the connection is never made. */
export class MasterNotAllowed extends Error {
  constructor(at: Address, list: AllowedHost[]) {
    super(
      `the sentinels name master ${at.host}:${at.port}, which is not in REDIS_SENTINEL_ALLOWED_HOSTS (${allowedHostsText(list)}): not connecting to it`,
    );
  }
}

/**
 * The Sentinel connector with every master address the sentinels give checked before ioredis
 * connects to it: at start, at each reconnect and after each +switch-master (all resolve through
 * resolveMaster). A refusal fails that sentinel's answer; with every sentinel refused the
 * connection stays down and retries, so commands fail as for a Redis away (503), and the error
 * event names the master and the list. Set as the `Connector` option, so duplicates (subscribers)
 * carry it too.
 */
class GuardedSentinelConnector extends SentinelConnector {
  private report: ErrorEmitter | undefined;

  constructor(options: ConstructorParameters<typeof SentinelConnector>[0] & { allowedMasters: AllowedHost[] }) {
    super(options);
    // resolveMaster is private in ioredis's types, so it is wrapped here rather than overridden.
    const self = this as unknown as { resolveMaster(client: unknown): Promise<Address | null> };
    const resolveMaster = self.resolveMaster.bind(this);
    self.resolveMaster = async (client) => {
      const at = await resolveMaster(client);
      if (at && !allows(options.allowedMasters, at)) {
        const err = new MasterNotAllowed(at, options.allowedMasters);
        this.report?.('error', err);
        throw err;
      }
      return at;
    };
  }

  override connect(eventEmitter: ErrorEmitter) {
    this.report = eventEmitter;
    return super.connect(eventEmitter);
  }
}

/** The options that make a Sentinel client refuse masters outside `allowed` (none when unset). */
export const masterGuard = (allowed: AllowedHost[] | undefined): RedisOptions =>
  allowed ? ({ Connector: GuardedSentinelConnector, allowedMasters: allowed } as RedisOptions) : {};

// ioredis 6 gives up on a Sentinel client for good when it is disconnected with a reconnect asked
// (its own failover detector does so on +switch-master) while it is still asking the sentinels
// where the master is: the pending resolution throws "Connection is closed.", and the client goes to
// status `end` without scheduling a reconnect (Redis.js `_connect`). Every command then fails until
// the process restarts. Seen with a master SIGKILLed under 200 purchases in flight: the API answered
// 503 to everything for 30 s and more. Here a client that ends without having been closed by us is
// connected again, with the same backoff as any reconnect.
export function reviveOnEnd(redis: Redis): Redis {
  let closedByUs = false;
  let attempt = 0;
  const { disconnect, quit } = redis;
  redis.disconnect = function (this: Redis, reconnect = false) {
    if (!reconnect) closedByUs = true;
    return disconnect.call(this, reconnect);
  };
  redis.quit = function (this: Redis, ...args: Parameters<Redis['quit']>) {
    closedByUs = true;
    return quit.apply(this, args);
  } as Redis['quit'];
  redis.on('ready', () => {
    attempt = 0;
  });
  redis.on('end', () => {
    if (closedByUs) return;
    const wait = Math.min(50 * 2 ** Math.min(attempt++, 6), 2000) + Math.floor(Math.random() * 100);
    setTimeout(() => {
      if (!closedByUs && redis.status === 'end') redis.connect().catch(() => {}); // a failure ends it again: next round
    }, wait).unref();
  });
  return redis;
}
