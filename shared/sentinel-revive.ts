// ioredis 6 gives up on a Sentinel client for good when it is disconnected with a reconnect asked
// (its own failover detector does so on +switch-master) while it is still asking the sentinels
// where the master is: the pending resolution throws "Connection is closed.", and the client goes to
// status `end` without scheduling a reconnect (Redis.js `_connect`). Every command then fails until
// the process restarts. Seen with a master SIGKILLed under 200 purchases in flight: the API answered
// 503 to everything for 30 s and more. Here a client that ends without having been closed by us is
// connected again, with the same backoff as any reconnect.
import type { Redis } from 'ioredis';

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
