// The kinds of value a setting can hold: each parser takes the raw value (a flag's, or else the
// environment's), returns the typed value or its default, and knows how the settings table shows
// that default. A bad value is a ConfigError naming the variable and what it accepts.
import { ClientError } from '../runtime/errors.js';
import { numberFromText } from '../runtime/number-text.js';

/** A bad or missing setting: the message names the variable and what to set (exit 2). */
export class ConfigError extends ClientError {
  override readonly code = 'config';
}

/** What a parser may need besides its own value: development mode, and PM2's per-process variables. */
export interface ParseContext {
  development: boolean;
  env: NodeJS.ProcessEnv;
}

export interface Parser<T> {
  (raw: unknown, name: string, context: ParseContext): T;
  /** The default as the settings table shows it. */
  shown: string;
}

const parser = <T>(shown: string, parse: (raw: unknown, name: string, context: ParseContext) => T): Parser<T> =>
  Object.assign(parse, { shown });
const unset = (raw: unknown) => raw === undefined || raw === '';
const code = (value: unknown) => `\`${String(value)}\``;

export function intValue(name: string, raw: unknown, fallback: number, min: number): number {
  if (unset(raw)) return fallback;
  // As the HTTP API and the CLI's flags read numbers: "0x10", "1e3", "12." or " 12" is no setting.
  const n = typeof raw === 'number' ? raw : (numberFromText(String(raw), false) ?? Number.NaN);
  if (!Number.isSafeInteger(n) || n < min) {
    throw new ConfigError(`${name} must be an integer >= ${min}, got ${JSON.stringify(raw)}`);
  }
  return n;
}

export const int = (fallback: number, min: number) =>
  parser(code(fallback), (raw, name) => intValue(name, raw, fallback, min));

function textValue(raw: unknown): string | undefined {
  return unset(raw) ? undefined : String(raw);
}

/** Free text; unset is undefined unless there is a default (a value, or one worked out at start). */
export function text(): Parser<string | undefined>;
export function text(fallback: string): Parser<string>;
export function text(fallback: (context: ParseContext) => string, shown: string): Parser<string>;
export function text(
  fallback?: string | ((context: ParseContext) => string),
  shown?: string,
): Parser<string | undefined> {
  if (fallback === undefined) return parser('none', textValue);
  if (typeof fallback === 'string') return parser(code(fallback), (raw) => textValue(raw) ?? fallback);
  return parser(shown!, (raw, _name, context) => textValue(raw) ?? fallback(context));
}

/** `true`/`1` or `false`/`0`; the default may depend on development mode. */
export const bool = (fallback: boolean | ((context: ParseContext) => boolean), shown = code(fallback)) =>
  parser(shown, (raw, name, context): boolean => {
    if (unset(raw)) return typeof fallback === 'boolean' ? fallback : fallback(context);
    if (raw === true || raw === 'true' || raw === '1') return true;
    if (raw === false || raw === 'false' || raw === '0') return false;
    throw new ConfigError(`${name} must be true or false, got ${JSON.stringify(raw)}`);
  });

export const onOff = (fallback: boolean) =>
  parser(code(fallback ? 'on' : 'off'), (raw, name): boolean => {
    if (raw === 'on' || raw === true) return true;
    if (raw === 'off' || raw === false) return false;
    if (unset(raw)) return fallback;
    throw new ConfigError(`${name} must be on or off, got ${JSON.stringify(raw)}`);
  });

/** A consent: exactly `yes`, or unset. Anything else is a typo that must not pass for consent or for refusal. */
export const yes = parser('unset', (raw, name): boolean => {
  if (unset(raw)) return false;
  if (raw === 'yes' || raw === true) return true;
  throw new ConfigError(`${name} must be yes or unset, got ${JSON.stringify(raw)}`);
});

/** NODE_ENV=development, or `dev`'s own override (true). */
export const developmentMode = parser('unset', (raw): boolean => raw === true || raw === 'development');

/** One of a few words (unset: the first). */
export const oneOf = <const T extends string>(choices: readonly [T, ...T[]]) =>
  parser(code(choices[0]), (raw, name): T => {
    const value = textValue(raw) ?? choices[0];
    if (!(choices as readonly string[]).includes(value)) {
      throw new ConfigError(
        `${name} must be ${choices.map((c) => JSON.stringify(c)).join(' or ')}, got ${JSON.stringify(value)}`,
      );
    }
    return value as T;
  });

/**
 * A server's URL, one of `schemes` (`postgres:`...). What is wrong with it is said without
 * repeating the value, which may hold a password: a malformed one otherwise surfaces much later as
 * the client's own riddle ("ENOTFOUND base", a password "returned empty").
 */
export const serverUrl = (schemes: string[], example: string) =>
  parser('none', (raw, name): string | undefined => {
    const value = textValue(raw);
    if (value === undefined) return undefined;
    const wrong = (what: string) => new ConfigError(`${name} ${what}: set it to a URL like ${example}`);
    const scheme = /^([a-z][a-z0-9+.-]*):\/\//i.exec(value)?.[1]?.toLowerCase();
    if (scheme === undefined) throw wrong('does not start with a scheme (postgres://, redis://...)');
    if (!schemes.includes(`${scheme}:`))
      throw wrong(`has the scheme ${scheme}://, not ${schemes.map((s) => `${s}//`).join(' or ')}`);
    let url: URL;
    try {
      url = new URL(value);
    } catch {
      throw wrong('is not a valid URL (a password with @, :, /, ? or # in it must be percent-encoded)');
    }
    if (url.hostname === '' && !url.searchParams.has('host')) throw wrong('names no host');
    return value;
  });

export interface HostPort {
  host: string;
  port: number;
}

/** `host:port,host:port,...` (an IPv6 host in brackets). */
export const hostPorts = parser('none', (raw, name): HostPort[] | undefined => {
  const list = textValue(raw);
  if (list === undefined) return undefined;
  return list.split(',').map((entry) => {
    const m = /^\s*(\[[0-9a-fA-F:]+\]|[^\s:,]+):(\d{1,5})\s*$/.exec(entry);
    if (!m || Number(m[2]) < 1 || Number(m[2]) > 65535)
      throw new ConfigError(`${name} must be host:port,host:port,..., got ${JSON.stringify(list)}`);
    return { host: m[1]!.replace(/^\[|\]$/g, ''), port: Number(m[2]) };
  });
});

/** A master a sentinel may name: a host, on any port unless one is given. */
export interface AllowedHost {
  host: string;
  port?: number;
}

export const allowedHosts = parser('none', (raw, name): AllowedHost[] | undefined => {
  const list = textValue(raw);
  if (list === undefined) return undefined;
  return list.split(',').map((entry) => {
    const m = /^\s*(\[[0-9a-fA-F:]+\]|[^\s:,[\]]+)(?::(\d{1,5}))?\s*$/.exec(entry);
    if (!m || (m[2] !== undefined && (Number(m[2]) < 1 || Number(m[2]) > 65535))) {
      throw new ConfigError(
        `${name} must be host or host:port, comma-separated (the masters the sentinels may name), got ${JSON.stringify(list)}`,
      );
    }
    return { host: m[1]!.replace(/^\[|\]$/g, ''), ...(m[2] === undefined ? {} : { port: Number(m[2]) }) };
  });
});

/** OPS_PORT shifted by this process's PM2 instance number; off stays off. */
export const opsPort = parser('`0` (off)', (raw, name, { env }): number => {
  const base = intValue(name, raw, 0, 0);
  if (base === 0) return 0;
  const port = base + intValue('NODE_APP_INSTANCE', env.NODE_APP_INSTANCE, 0, 0);
  if (port > 65535)
    throw new ConfigError(`${name} ${base} + NODE_APP_INSTANCE ${port - base} is past 65535: set a lower ${name}`);
  return port;
});

/** node-cron takes 1-59 seconds, or whole minutes up to an hour (replay.ts cronExpression relies on it). */
const REPLAY_INTERVAL = 5;
export const replayInterval = parser(code(REPLAY_INTERVAL), (raw, name): number => {
  const n = intValue(name, raw, REPLAY_INTERVAL, 1);
  if (n < 60 || (n % 60 === 0 && n <= 3600)) return n;
  throw new ConfigError(`${name} must be 1-59, or a whole number of minutes up to 3600, got ${n}`);
});
