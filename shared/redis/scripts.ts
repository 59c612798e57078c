// Our Lua scripts, loaded once per connection with ioredis `defineCommand`, and `run`, through
// which every typed wrapper calls one with its keys and arguments in the order its header documents.
// The scripts are the files of shared/lua/, each a command named by its file; each file's first line
// says how many keys it takes (BullMQ puts that in the file name), so nothing here repeats it.
import { readdirSync, readFileSync } from 'node:fs';
import type { RedisClient } from './client.js';

/**
 * A script's first line: `-- keys: 12`, or `-- keys: n` for a script that takes a key per order
 * or per writer, whose count goes first in each call. test/lua-keys.test.ts holds it to the KEYS
 * the header lists and the script reads.
 */
const KEYS_LINE = /^-- keys: ([1-9][0-9]*|n)$/;

/** The number of keys `lua` declares on its first line, null for a count given per call. */
export function declaredKeyCount(lua: string, file: string): number | null {
  const m = KEYS_LINE.exec(lua.split('\n', 1)[0]!.trimEnd());
  if (!m)
    throw new Error(`${file}: the first line must say how many keys it takes: "-- keys: <count>" or "-- keys: n"`);
  return m[1] === 'n' ? null : Number(m[1]);
}

const luaDir = new URL('../lua/', import.meta.url);
const scripts = new Map(
  readdirSync(luaDir)
    .filter((f) => f.endsWith('.lua'))
    .sort()
    .map((file) => {
      const lua = readFileSync(new URL(file, luaDir), 'utf8');
      return [file.slice(0, -'.lua'.length), { lua, keys: declaredKeyCount(lua, file) }] as const;
    }),
);

/**
 * The scripts whose key count goes first: a connection's `autoPipeliningIgnoredCommands`.
 * ioredis's auto-pipelining routes a command on a cluster by its first argument, which must then be
 * a key, not the key count. Every script declares every key it touches; those that take a key per
 * order or per writer declare a variable number, so that while a reshard moves the slot Redis
 * refuses them whole (ASK, TRYAGAIN) rather than run them where some keys have not arrived (see
 * their headers); auto-pipelining is off for them.
 */
export const PER_CALL_KEYS = [...scripts].filter(([, s]) => s.keys === null).map(([name]) => name);
type ScriptFn = (...args: (string | number)[]) => Promise<unknown>;

/** Makes every script a command of `redis` (each connection, before its first call). */
export function defineScripts(redis: RedisClient): void {
  for (const [name, { lua, keys }] of scripts)
    redis.defineCommand(name, { lua, ...(keys === null ? {} : { numberOfKeys: keys }) });
}

/** Runs the script of shared/lua/<name>.lua with its keys and arguments in the order its header documents (the typed wrappers). */
export function run(redis: RedisClient, name: string, keys: string[], args: (string | number)[]): Promise<unknown> {
  const script = scripts.get(name);
  if (!script) throw new Error(`no script ${name}.lua in shared/lua/`);
  if (script.keys !== null && keys.length !== script.keys)
    throw new Error(`${name}.lua takes ${script.keys} keys, given ${keys.length}`);
  const fn = (redis as unknown as Record<string, ScriptFn>)[name]!;
  const ran = script.keys === null ? fn.call(redis, keys.length, ...keys, ...args) : fn.call(redis, ...keys, ...args);
  return ran.catch((err: unknown) => {
    // ioredis counts a script as loaded on a connection once it has sent its EVAL there, even when a
    // reshard's ASK or TRYAGAIN refused that EVAL before it ran, and falls back to EVAL only once, so a
    // second NOSCRIPT reached the caller. NOSCRIPT means the script did not run: send it whole.
    if (!String((err as Error | null)?.message).startsWith('NOSCRIPT')) throw err;
    return redis.eval(script.lua, keys.length, ...keys, ...args);
  });
}
