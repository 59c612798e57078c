// loadConfig: every setting of settings.ts read from its CLI flag (given as an override) or else
// its environment variable, in the order declared. The one place that reads the environment.
import { SETTINGS } from './settings.js';
import type { ParseContext } from './values.js';

export type Config = { -readonly [K in keyof typeof SETTINGS]: ReturnType<(typeof SETTINGS)[K]['parse']> };
export type ConfigOverrides = Partial<Record<keyof Config, unknown>>;
export type AuthMode = Config['authMode'];

const keys = Object.keys(SETTINGS) as (keyof Config)[];

/** Each CLI flag and the setting it overrides. */
export const SETTING_FLAGS: Record<string, keyof Config> = Object.fromEntries(
  keys.flatMap((key) => {
    const { flag } = SETTINGS[key] as { flag?: string };
    return flag === undefined ? [] : [[flag, key]];
  }),
);

export function loadConfig(overrides: ConfigOverrides = {}): Config {
  const env = process.env;
  const raw = (key: keyof Config) => overrides[key] ?? env[SETTINGS[key].env];
  // Some defaults depend on development mode (JWT_REQUIRE_EXP), so it is read first.
  const context: ParseContext = {
    development: SETTINGS.development.parse(raw('development'), SETTINGS.development.env, { development: false, env }),
    env,
  };
  return Object.fromEntries(
    keys.map((key) => [key, SETTINGS[key].parse(raw(key), SETTINGS[key].env, context)]),
  ) as Config;
}
