// The payment providers' webhooks, one route per provider of the registry
// (shared/payments/providers/), at /api/payments/<name>/webhook. No buyer token: the provider
// verifies the exact bytes received (a signature), so this plugin (encapsulated: nothing here
// reaches other routes) takes the body as a Buffer instead of the app's JSON parser and hands the
// bytes and the headers to the route's provider; nothing is parsed before it has verified them.
import type { FastifyPluginCallback, FastifyRequest } from 'fastify';
import { HttpError } from '../../runtime/errors.js';
import { REFUND_REASONS } from '../../payments/queries.js';
import { receivePayment, type PaymentDeps } from '../../payments/decide.js';
import type { PaymentProvider, ProviderDefinition } from '../../payments/provider.js';
import { PROVIDERS } from '../../payments/providers/index.js';
import { signedWebhook } from '../../payments/providers/signed-webhook.js';
import { documentedOnly, errorResponses } from '../schemas.js';

/** Provider events are small; a signed body is checked whole, so it is kept in memory whole. */
const WEBHOOK_BODY_LIMIT = 64 * 1024;

const answer = {
  description: 'the event is decided (or was, for a redelivery)',
  type: 'object',
  required: ['id', 'outcome'],
  properties: {
    id: { type: 'string' },
    outcome: { type: 'string', enum: ['applied', 'refund_due', 'ignored'] },
    reason: {
      type: 'string',
      enum: REFUND_REASONS,
      description: 'why the money could not pay the order (refund_due only)',
    },
    duplicate: { type: 'boolean', description: 'true for a redelivery of the same bytes: nothing changed' },
  },
};

/** A provider's route options: its security scheme, its events (documented only) and its refusals. */
function routeOf(def: ProviderDefinition, summary: string) {
  const types = Object.entries(def.events.types)
    .map(([type, what]) => `\`${type}\`: ${what}`)
    .join('; ');
  return {
    bodyLimit: WEBHOOK_BODY_LIMIT,
    schema: {
      summary,
      tags: ['payments'],
      security: [{ [def.security.key]: [] }],
      description: `The ${def.name} provider's events (${types}; any other type is ignored).`,
      response: {
        200: answer,
        ...errorResponses(
          ...def.refusals,
          'invalid_event',
          'order_not_found',
          'event_conflict',
          'unavailable',
          'payload_too_large',
          'unsupported_media_type',
        ),
      },
    },
    // Documented, never validated: the body is bytes until the provider has verified them.
    config: documentedOnly({ body: def.events.body }),
  };
}

export const payments: FastifyPluginCallback<PaymentDeps & { providers: Map<string, PaymentProvider> }> = (
  app,
  { providers, ...deps },
  done,
) => {
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('application/json', { parseAs: 'buffer' }, (_req, body, parsed) => parsed(null, body));
  // The URL picks the provider, which gets the bytes and headers untouched.
  const receive = (provider: PaymentProvider) => async (req: FastifyRequest) =>
    receivePayment(deps, provider, (req.body as Buffer | undefined) ?? Buffer.alloc(0), req.headers);
  for (const [name, provider] of providers) {
    app.post(
      `/api/payments/${name}/webhook`,
      routeOf(
        PROVIDERS.get(name)!,
        `The ${name} payment provider's signed event: pays the order, or records a refund due`,
      ),
      receive(provider),
    );
  }
  // The signed webhook's first address, kept for the providers configured with it.
  app.post(
    '/api/payments/webhook',
    routeOf(signedWebhook, 'The signed webhook at its first address: the same as /api/payments/signed/webhook'),
    receive(providers.get(signedWebhook.name)!),
  );
  // Any other name: the static routes above win over this one.
  app.post<{ Params: { provider: string } }>(
    '/api/payments/:provider/webhook',
    { bodyLimit: WEBHOOK_BODY_LIMIT },
    async (req) => {
      throw new HttpError(
        'provider_not_found',
        `No payment provider is named ${JSON.stringify(req.params.provider.slice(0, 64))}: this API takes events from ${[...providers.keys()].map((n) => `/api/payments/${n}/webhook`).join(', ')}.`,
      );
    },
  );
  done();
};
