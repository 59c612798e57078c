// The shop's receivers of outbound events (admin): the same steps as `flashsale events endpoint`
// (shared/events/endpoints.ts). A secret is in the answer that made it, and never again.
import type { FastifyPluginCallback } from 'fastify';
import type { Auth } from '../../buyers/auth.js';
import type { Config } from '../../config/index.js';
import type { Pool } from '../../runtime/db.js';
import {
  addEndpoint,
  disableEndpoint,
  ENDPOINT_ID,
  enableEndpoint,
  listEndpoints,
  rotateSecret,
} from '../../events/endpoints.js';
import { EVENT_TYPES } from '../../events/record.js';
import { refusal } from '../plugins/errors.js';
import { errorResponses, SECURITY } from '../schemas.js';

const time = { type: 'string', format: 'date-time', nullable: true };
const endpoint = {
  type: 'object',
  required: ['id', 'url', 'eventTypes', 'enabled', 'disabledReason', 'failingSince', 'previousUntil', 'createdAt'],
  properties: {
    id: { type: 'string' },
    url: { type: 'string' },
    eventTypes: { type: 'array', items: { type: 'string' }, description: 'empty: every type' },
    enabled: { type: 'boolean' },
    disabledReason: { type: 'string', nullable: true },
    failingSince: { ...time, description: 'the first failure of its current run of failures' },
    previousUntil: { ...time, description: 'after a rotation, until when the previous secret signs too' },
    createdAt: { type: 'string', format: 'date-time' },
  },
};
const withSecret = {
  ...endpoint,
  required: [...endpoint.required, 'secret'],
  properties: { ...endpoint.properties, secret: { type: 'string', description: 'whsec_...: shown this once' } },
};
const params = {
  type: 'object',
  required: ['endpointId'],
  properties: {
    endpointId: {
      type: 'string',
      pattern: ENDPOINT_ID.source,
      ...refusal('invalid_id', 'An endpoint id is 1 to 64 letters, digits, dots, dashes or underscores.'),
    },
  },
};
const body = {
  type: 'object',
  required: ['url'],
  additionalProperties: false,
  properties: {
    url: { type: 'string', maxLength: 2048 },
    id: { type: 'string', pattern: ENDPOINT_ID.source, description: 'default: ep_ and 16 hex digits' },
    eventTypes: { type: 'array', items: { type: 'string', enum: [...EVENT_TYPES] }, maxItems: EVENT_TYPES.length },
  },
  ...refusal(
    'bad_request',
    'The body must be {"url": "https://...", "id"?: "<name>", "eventTypes"?: [...]}.',
    'Unknown field(s): {fields}.',
  ),
};
const ADMIN = { tags: ['admin'], security: SECURITY.admin };
const byId = (summary: string) => ({
  ...ADMIN,
  summary,
  params,
  response: {
    200: endpoint,
    ...errorResponses('invalid_id', 'unauthorized', 'forbidden', 'endpoint_not_found', 'unavailable'),
  },
});

export const eventEndpoints: FastifyPluginCallback<{ pool: Pool; auth: Auth; config: Config }> = (
  app,
  { pool, auth, config },
  done,
) => {
  app.get(
    '/api/events/endpoints',
    {
      preValidation: auth.admin,
      schema: {
        ...ADMIN,
        summary: 'List the endpoints of outbound events',
        response: {
          200: {
            type: 'object',
            required: ['endpoints'],
            properties: {
              endpoints: {
                type: 'array',
                items: {
                  ...endpoint,
                  required: [...endpoint.required, 'pending'],
                  properties: {
                    ...endpoint.properties,
                    pending: { type: 'integer', description: 'deliveries to it in flight or waiting for a retry' },
                  },
                },
              },
            },
          },
          ...errorResponses('unauthorized', 'forbidden', 'unavailable'),
        },
      },
    },
    async () => ({ endpoints: await listEndpoints(pool) }),
  );
  app.post<{ Body: { url: string; id?: string; eventTypes?: string[] } }>(
    '/api/events/endpoints',
    {
      preValidation: auth.admin,
      bodyLimit: 8192,
      schema: {
        ...ADMIN,
        summary: 'Add an endpoint of outbound events; its secret is in this answer only',
        body,
        response: {
          201: withSecret,
          ...errorResponses(
            'bad_request',
            'invalid_json',
            'invalid_endpoint',
            'unauthorized',
            'forbidden',
            'endpoint_exists',
            'payload_too_large',
            'unsupported_media_type',
            'unavailable',
          ),
        },
      },
    },
    async (req, reply) => {
      const { endpoint, secret } = await addEndpoint(pool, {
        url: req.body.url,
        id: req.body.id,
        eventTypes: req.body.eventTypes,
        allowPrivate: config.eventsAllowPrivateEndpoints,
      });
      return reply.code(201).send({ ...endpoint, secret });
    },
  );
  app.post<{ Params: { endpointId: string } }>(
    '/api/events/endpoints/:endpointId/disable',
    { preValidation: auth.admin, schema: byId('Stop delivering to an endpoint (what is due stays due)') },
    async (req) => disableEndpoint(pool, req.params.endpointId),
  );
  app.post<{ Params: { endpointId: string } }>(
    '/api/events/endpoints/:endpointId/enable',
    { preValidation: auth.admin, schema: byId('Deliver to an endpoint again, at once') },
    async (req) => enableEndpoint(pool, req.params.endpointId),
  );
  app.post<{ Params: { endpointId: string } }>(
    '/api/events/endpoints/:endpointId/rotate',
    {
      preValidation: auth.admin,
      schema: {
        ...byId("Rotate an endpoint's secret: the old one signs too for EVENTS_ROTATION_OVERLAP_SECONDS"),
        response: {
          200: withSecret,
          ...errorResponses('invalid_id', 'unauthorized', 'forbidden', 'endpoint_not_found', 'unavailable'),
        },
      },
    },
    async (req) => {
      const { endpoint, secret } = await rotateSecret(pool, req.params.endpointId, config.eventsRotationOverlapSeconds);
      return { ...endpoint, secret };
    },
  );
  done();
};
