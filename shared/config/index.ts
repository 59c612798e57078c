// Settings: each declared once in config/settings.ts (variable, flag, default, validation, doc),
// read by config/parse.ts (the one place that reads the environment); which Redis form they name
// in config/redis-choice.ts; what a secret must be in config/secrets.ts; the local stack's
// generated secrets in config/local-secrets.ts. Importers take all of it from here.
export { loadConfig, SETTING_FLAGS, type AuthMode, type Config, type ConfigOverrides } from './parse.js';
export { SETTINGS, type Setting } from './settings.js';
export { ConfigError, type AllowedHost, type HostPort } from './values.js';
export { redisConfigured, redisTarget, requireServers, type RedisAuth, type RedisTarget } from './redis-choice.js';
export { requireDirectPayConsent, requireSecrets } from './secrets.js';
export { localSecrets, localSecretsFile, withLocalSecrets, type LocalSecrets } from './local-secrets.js';
