// Our Lua scripts, loaded once per connection with ioredis `defineCommand`, and `run`, through
// which every typed wrapper calls one with its keys and arguments in the order its header documents.
import { readFileSync } from 'node:fs';
import type { RedisClient } from './connect.js';

const SCRIPTS = [
  'purchase', 'load_sale', 'end_sale', 'claim', 'ack', 'recover_writer', 'restore', 'touch_due', 'snapshot', 'cancel', 'settle_sale', 'join_queue', 'admit', 'queue_status', 'lease', 'exchange',
] as const;
type ScriptName = (typeof SCRIPTS)[number];
/**
 * How many KEYS each script takes, declared up front: ioredis's auto-pipelining routes a command
 * on a cluster by its first argument, which must then be a key, not the key count. Every script
 * declares every key it touches; those that take a key per order or per writer (null: the count
 * goes first) declare a variable number, so that while a reshard moves the slot
 * Redis refuses them whole (ASK, TRYAGAIN) rather than run them where some keys have not arrived
 * (see their headers); auto-pipelining is off for them.
 */
const KEY_COUNTS: Record<ScriptName, number | null> = {
  purchase: 12, load_sale: 2, end_sale: 1, claim: 3, ack: null, recover_writer: 3, restore: null, touch_due: null, snapshot: null, cancel: 2, settle_sale: 13,
  join_queue: 4, admit: 5, queue_status: 4, lease: 1, exchange: 2,
};
/** The scripts whose key count goes first: a connection's `autoPipeliningIgnoredCommands`. */
export const PER_CALL_KEYS = SCRIPTS.filter((name) => KEY_COUNTS[name] === null);
type ScriptFn = (...args: (string | number)[]) => Promise<unknown>;

const luaDir = new URL('../lua/', import.meta.url);
const sources = new Map<ScriptName, string>(SCRIPTS.map((name) => [name, readFileSync(new URL(`${name}.lua`, luaDir), 'utf8')]));

/** Makes every script a command of `redis` (each connection, before its first call). */
export function defineScripts(redis: RedisClient): void {
  for (const name of SCRIPTS) redis.defineCommand(name, { lua: sources.get(name)!, ...(KEY_COUNTS[name] === null ? {} : { numberOfKeys: KEY_COUNTS[name] }) });
}

/** Runs one of our scripts with its keys and arguments in the order its header documents (the wrappers in this folder and in room.ts). */
export function run(redis: RedisClient, name: ScriptName, keys: string[], args: (string | number)[]): Promise<unknown> {
  const fn = (redis as unknown as Record<ScriptName, ScriptFn>)[name];
  const fixed = KEY_COUNTS[name];
  if (fixed !== null && keys.length !== fixed) throw new Error(`${name}.lua takes ${fixed} keys, given ${keys.length}`);
  const ran = fixed === null ? fn.call(redis, keys.length, ...keys, ...args) : fn.call(redis, ...keys, ...args);
  return ran.catch((err: unknown) => {
    // ioredis counts a script as loaded on a connection once it has sent its EVAL there, even when a
    // reshard's ASK or TRYAGAIN refused that EVAL before it ran, and falls back to EVAL only once, so a
    // second NOSCRIPT reached the caller. NOSCRIPT means the script did not run: send it whole.
    if (!String((err as Error | null)?.message).startsWith('NOSCRIPT')) throw err;
    return redis.eval(sources.get(name)!, keys.length, ...keys, ...args);
  });
}
