// The payment providers this API takes events from: one registration line each. Each gets its
// webhook at POST /api/payments/<name>/webhook (shared/http/routes/payments.ts), its security
// scheme in the OpenAPI document and its `provider` label on flashsale_payments_total; the API
// refuses to start without the settings it needs.
import { ConfigError, SETTINGS, type Config } from '../../config/index.js';
import { PROVIDER_NAME_MAX, type PaymentProvider, type ProviderDefinition } from '../provider.js';
import { signedWebhook } from './signed-webhook.js';

export const PROVIDERS = new Map<string, ProviderDefinition>();

/** Adds a provider to the registry: every app built afterwards takes its events. */
export function registerProvider(def: ProviderDefinition): void {
  // The name is a path segment and the prefix of every id it records (`<name>:<event id>`).
  if (!/^[a-z][a-z0-9-]*$/.test(def.name) || def.name.length > PROVIDER_NAME_MAX)
    throw new Error(
      `payment provider name ${JSON.stringify(def.name)}: 1 to ${PROVIDER_NAME_MAX} lower-case letters, digits or dashes`,
    );
  if (PROVIDERS.has(def.name)) throw new Error(`payment provider ${def.name} is registered twice`);
  PROVIDERS.set(def.name, def);
}

registerProvider(signedWebhook);

/** Every registered provider, made from the settings; a setting one needs and that is unset stops the start. */
export function createProviders(config: Config): Map<string, PaymentProvider> {
  const made = new Map<string, PaymentProvider>();
  for (const def of PROVIDERS.values()) {
    for (const key of def.settings) {
      if (config[key] === undefined || config[key] === '')
        throw new ConfigError(
          `${SETTINGS[key].env} is not set: the ${def.name} payment provider cannot verify anything without it`,
        );
    }
    made.set(def.name, def.create(config));
  }
  return made;
}
