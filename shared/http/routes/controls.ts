// An operator's live controls of a sale (pause, resume, a new end) and the audit trail of every
// admin action. Each control is shared/sales/controls.ts, as `flashsale sale pause|resume|end-time`
// runs it; the operator is the request's (Auth.admin).
import type { FastifyPluginCallback } from 'fastify';
import type { Auth } from '../../buyers/auth.js';
import type { RedisClient } from '../../redis/connect.js';
import type { Pool } from '../../runtime/db.js';
import { SALE_ID_PATTERN } from '../../runtime/ids.js';
import { AUDIT_ACTIONS, AUDIT_LIMIT, listAudit } from '../../operators/audit.js';
import { setEndTime, setPaused } from '../../sales/controls.js';
import { saleView } from '../../sales/sale.js';
import { refusal } from '../plugins/errors.js';
import type { SaleCache } from '../sale-cache.js';
import { errorResponses, saleIdParams, saleViewSchema, SECURITY } from '../schemas.js';

type SaleId = { Params: { saleId: string } };

const pauseAnswer = {
  description: 'the sale, and whether it is paused now',
  type: 'object',
  required: ['sale', 'paused', 'changed'],
  properties: {
    sale: saleViewSchema,
    paused: { type: 'boolean' },
    changed: { type: 'boolean', description: 'false: it was so already; nothing changed and nothing was recorded' },
  },
};

const endTimeBody = {
  type: 'object',
  required: ['endsAt'],
  additionalProperties: false,
  properties: {
    endsAt: {
      type: 'string',
      description: 'the new end: ISO 8601 with Z or an offset, to come and after the start',
      ...refusal('invalid_end_time', 'endsAt must be an ISO 8601 date-time, e.g. 2026-12-01T10:00:00Z.'),
    },
  },
  ...refusal('invalid_end_time', 'The body must be {"endsAt": "<ISO 8601 time>"}.', 'Unknown field(s): {fields}.'),
};

const auditQuery = {
  type: 'object',
  additionalProperties: false,
  properties: {
    saleId: {
      type: 'string',
      pattern: SALE_ID_PATTERN.source,
      description: "only this sale's actions",
      ...refusal('bad_request', 'saleId must be a sale id.'),
    },
    limit: {
      type: 'string',
      pattern: '^(?:[1-9][0-9]?|[1-4][0-9]{2}|500)$',
      description: `entries, newest first, 1 to ${AUDIT_LIMIT.max} (default ${AUDIT_LIMIT.default})`,
      ...refusal('bad_request', `limit must be a whole number from 1 to ${AUDIT_LIMIT.max}.`),
    },
  },
  ...refusal('bad_request', 'The query takes saleId and limit.', 'Unknown query parameter(s): {fields}.'),
};

const auditAnswer = {
  description: 'admin actions, newest first',
  type: 'object',
  required: ['entries'],
  properties: {
    entries: {
      type: 'array',
      items: {
        type: 'object',
        required: ['id', 'at', 'operator', 'action', 'saleId', 'detail'],
        properties: {
          id: { type: 'integer' },
          at: { type: 'string', format: 'date-time', description: "Postgres's clock when the action committed" },
          operator: {
            type: 'string',
            description: "who: an operator's name, `admin-token` (ADMIN_TOKEN), or `cli:<os user>` (the CLI)",
          },
          action: { type: 'string', enum: [...AUDIT_ACTIONS] },
          saleId: { type: 'string', nullable: true },
          detail: { type: 'object', additionalProperties: true, description: 'what the action was given' },
        },
      },
    },
  },
};

const SALE_REFUSALS = ['invalid_id', 'unauthorized', 'forbidden', 'sale_not_found', 'unavailable'] as const;

export const controls: FastifyPluginCallback<{ pool: Pool; redis: RedisClient; auth: Auth; saleCache: SaleCache }> = (
  app,
  { pool, redis, auth, saleCache },
  done,
) => {
  for (const paused of [true, false]) {
    app.post<SaleId>(
      `/api/sales/:saleId/${paused ? 'pause' : 'resume'}`,
      {
        preValidation: auth.admin,
        bodyLimit: 1024,
        schema: {
          summary: paused
            ? "Pause a sale: buyers' purchases answer 409 paused and its waiting room admits nobody; a draw takes entries as before"
            : 'Resume a paused sale',
          tags: ['admin'],
          security: SECURITY.admin,
          params: saleIdParams,
          description: paused
            ? 'Pausing a paused sale changes nothing (one pause, one audit row). An ended sale has nothing to pause (403 ended).'
            : 'Resuming a sale that is not paused changes nothing.',
          response: { 200: pauseAnswer, ...errorResponses(...SALE_REFUSALS, ...(paused ? (['ended'] as const) : [])) },
        },
      },
      async (req) => {
        const r = await setPaused(pool, redis, req.params.saleId, paused, req.operator);
        return { sale: await saleView(redis, r.sale), paused: r.paused, changed: r.changed };
      },
    );
  }

  app.post<SaleId & { Body: { endsAt: string } }>(
    '/api/sales/:saleId/end-time',
    {
      preValidation: auth.admin,
      bodyLimit: 1024,
      schema: {
        summary: "Move a live sale's end, earlier or later",
        tags: ['admin'],
        security: SECURITY.admin,
        params: saleIdParams,
        body: endTimeBody,
        description:
          "The new end must be to come and after the start (by Postgres's clock and by Redis's, which purchases are judged by); a draw's end stays after entriesCloseAt and not before backfillUntil. An ended sale's end no longer changes (403 ended); to stop a sale now, end it.",
        response: {
          200: saleViewSchema,
          ...errorResponses(
            ...SALE_REFUSALS,
            'invalid_end_time',
            'invalid_json',
            'ended',
            'payload_too_large',
            'unsupported_media_type',
          ),
        },
      },
    },
    async (req) => {
      const sale = await setEndTime(pool, redis, req.params.saleId, req.body.endsAt, req.operator);
      saleCache.drop(sale.id);
      return saleView(redis, sale);
    },
  );

  app.get<{ Querystring: { saleId?: string; limit?: string } }>(
    '/api/audit',
    {
      preValidation: auth.admin,
      schema: {
        summary: "Admin actions, newest first, with who did each and when: every action, or one sale's",
        tags: ['admin'],
        security: SECURITY.admin,
        querystring: auditQuery,
        description:
          'Recorded in the same transaction as the action; an action that changed nothing (a second pause, an end of an ended sale) is not recorded.',
        response: { 200: auditAnswer, ...errorResponses('bad_request', 'unauthorized', 'forbidden', 'unavailable') },
      },
    },
    async (req) => {
      const { saleId, limit } = req.query;
      return { entries: await listAudit(pool, { saleId, limit: limit === undefined ? undefined : Number(limit) }) };
    },
  );
  done();
};
