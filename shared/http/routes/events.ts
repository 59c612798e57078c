// Outbound events for the operator (admin): the same list, show and replay as `flashsale events`
// (shared/events/inspect.ts). A replay makes deliveries due again and changes nothing else.
import type { FastifyPluginCallback } from 'fastify';
import type { Auth } from '../../buyers/auth.js';
import { ENDPOINT_ID } from '../../events/endpoints.js';
import { listEvents, replayEvents, showEvent } from '../../events/inspect.js';
import type { Pool } from '../../runtime/db.js';
import { SALE_ID_PATTERN } from '../../runtime/ids.js';
import { refusal } from '../plugins/errors.js';
import { errorResponses, SECURITY } from '../schemas.js';

const LIMIT = { default: 50, max: 500 };
const ADMIN = { tags: ['admin'], security: SECURITY.admin };
const time = { type: 'string', format: 'date-time' };

const saleId = {
  type: 'string',
  pattern: SALE_ID_PATTERN.source,
  description: "only this sale's events",
  ...refusal('bad_request', 'saleId must be a sale id.'),
};
const since = (description: string) => ({
  ...time,
  description,
  ...refusal('bad_request', 'since must be an ISO 8601 time with its zone, as 2026-11-28T10:00:00Z.'),
});

const listQuery = {
  type: 'object',
  additionalProperties: false,
  properties: {
    saleId,
    since: since('only events since then'),
    limit: {
      type: 'string',
      pattern: '^(?:[1-9][0-9]?|[1-4][0-9]{2}|500)$',
      description: `events, newest first, 1 to ${LIMIT.max} (default ${LIMIT.default})`,
      ...refusal('bad_request', `limit must be a whole number from 1 to ${LIMIT.max}.`),
    },
  },
  ...refusal('bad_request', 'The query takes saleId, since and limit.', 'Unknown query parameter(s): {fields}.'),
};

const count = { type: 'integer', minimum: 0 };
const summary = {
  type: 'object',
  required: ['sequence', 'type', 'saleId', 'orderId', 'createdAt', 'delivered', 'pending', 'failed'],
  properties: {
    sequence: { type: 'integer', description: "the event's sequence, its webhook-id's number" },
    type: { type: 'string' },
    saleId: { type: 'string' },
    orderId: { type: 'string', nullable: true },
    createdAt: time,
    delivered: { ...count, description: 'deliveries delivered' },
    pending: { ...count, description: 'deliveries in flight or waiting for a retry' },
    failed: { ...count, description: 'deliveries given up at the retry horizon' },
  },
};

const sequenceParams = {
  type: 'object',
  required: ['sequence'],
  properties: {
    sequence: {
      type: 'string',
      pattern: '^[1-9][0-9]{0,14}$',
      ...refusal('invalid_id', "An event's sequence is a positive whole number."),
    },
  },
};

const shown = {
  type: 'object',
  required: ['body', 'attempts'],
  properties: {
    body: {
      type: 'object',
      description: 'the event as receivers get it (docs/events.md)',
      required: ['type', 'version', 'sequence', 'sale_id', 'timestamp', 'data'],
      properties: {
        type: { type: 'string' },
        version: { type: 'integer' },
        sequence: { type: 'integer' },
        sale_id: { type: 'string' },
        timestamp: time,
        data: { type: 'object', additionalProperties: true },
      },
    },
    attempts: {
      type: 'array',
      description: 'oldest first; kept for EVENTS_ATTEMPTS_RETENTION_DAYS',
      items: {
        type: 'object',
        required: ['endpointId', 'attempt', 'at', 'status', 'latencyMs', 'error'],
        properties: {
          endpointId: { type: 'string' },
          attempt: { type: 'integer' },
          at: time,
          status: { type: 'integer', nullable: true, description: 'none when nothing came back' },
          latencyMs: { type: 'integer' },
          error: { type: 'string', nullable: true },
        },
      },
    },
  },
};

const replayBody = {
  type: 'object',
  required: ['since'],
  additionalProperties: false,
  properties: {
    since: since('the events since then'),
    saleId,
    endpointId: {
      type: 'string',
      pattern: ENDPOINT_ID.source,
      description: 'only to this endpoint (default: every enabled endpoint each event is for)',
      ...refusal('bad_request', 'endpointId must be an endpoint id.'),
    },
  },
  ...refusal(
    'bad_request',
    'The body must be {"since": "<ISO 8601 time>", "saleId"?: "<sale>", "endpointId"?: "<endpoint>"}.',
    'Unknown field(s): {fields}.',
  ),
};

type ListQuery = { Querystring: { saleId?: string; since?: string; limit?: string } };
type ReplayBody = { Body: { since: string; saleId?: string; endpointId?: string } };

export const events: FastifyPluginCallback<{ pool: Pool; auth: Auth }> = (app, { pool, auth }, done) => {
  app.get<ListQuery>(
    '/api/events',
    {
      preValidation: auth.admin,
      schema: {
        ...ADMIN,
        summary: 'The newest outbound events, with their deliveries by status',
        querystring: listQuery,
        response: {
          200: { type: 'object', required: ['events'], properties: { events: { type: 'array', items: summary } } },
          ...errorResponses('bad_request', 'unauthorized', 'forbidden', 'unavailable'),
        },
      },
    },
    async (req) => {
      const { saleId, since, limit } = req.query;
      const filter = { saleId, since: since === undefined ? undefined : new Date(since) };
      return { events: await listEvents(pool, filter, limit === undefined ? LIMIT.default : Number(limit)) };
    },
  );
  app.get<{ Params: { sequence: string } }>(
    '/api/events/:sequence',
    {
      preValidation: auth.admin,
      schema: {
        ...ADMIN,
        summary: 'One event as receivers get it, and every attempt to deliver it',
        params: sequenceParams,
        response: {
          200: shown,
          ...errorResponses('invalid_id', 'unauthorized', 'forbidden', 'event_not_found', 'unavailable'),
        },
      },
    },
    async (req) => showEvent(pool, Number(req.params.sequence)),
  );
  app.post<ReplayBody>(
    '/api/events/replay',
    {
      preValidation: auth.admin,
      bodyLimit: 8192,
      schema: {
        ...ADMIN,
        summary: 'Send events again: those since `since`, to one endpoint or every endpoint they are for',
        description:
          'Delivered and failed deliveries become due again, with the same webhook-id; an endpoint added after an event gets it too. `due` counts the deliveries made due.',
        body: replayBody,
        response: {
          200: { type: 'object', required: ['due'], properties: { due: count } },
          ...errorResponses(
            'bad_request',
            'invalid_json',
            'unauthorized',
            'forbidden',
            'endpoint_not_found',
            'payload_too_large',
            'unsupported_media_type',
            'unavailable',
          ),
        },
      },
    },
    async (req) => {
      const { since, saleId, endpointId } = req.body;
      return { due: await replayEvents(pool, { since: new Date(since), saleId, endpointId }) };
    },
  );
  done();
};
