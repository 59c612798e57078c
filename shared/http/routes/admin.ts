// The operator's page (/admin) and the one admin endpoint it polls: a sale's live numbers.
// The page's chart library (uPlot) is served from the installed package, never from a CDN: the
// page's CSP allows scripts from this origin only.
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import type { FastifyPluginCallback } from 'fastify';
import type { RedisClient } from '../../redis/connect.js';
import type { Auth } from '../../buyers/auth.js';
import type { Pool } from '../../runtime/db.js';
import { HttpError } from '../../runtime/errors.js';
import { HOLDING, ORDER_STATES, RESTORING, STATE_RULES } from '../../orders/states.js';
import { getSale } from '../../sales/sale.js';
import { isPaused } from '../../sales/controls.js';
import { LATENESS_SAMPLE, LATENESS_WINDOW_MS, liveKeys, saleLive } from '../../sales/live.js';
import { registeredModes } from '../../admission/modes.js';
import { variantFiguresSchema } from '../../sales/variant-figures.js';
import { withSaleForm } from '../sale-form.js';
import { adminSaleSchema, saleViewSchema } from '../schemas.js';
import { count } from '../schema-parts.js';
import { JS, pageModules, PUBLIC_DIR, staticRoute } from './page.js';

// Resolved like an import, so it works from the sources, from dist/ and from a PM2 deployment.
const uplot = (file: string) => createRequire(import.meta.url).resolve(`uplot/dist/${file}`);

const CSS = 'text/css; charset=utf-8';
const assets = (): { url: string; file: string | URL; type: string }[] => [
  ...pageModules('admin').map((name) => ({ url: `/${name}`, file: new URL(name, PUBLIC_DIR), type: JS })),
  { url: '/admin.css', file: new URL('admin.css', PUBLIC_DIR), type: CSS },
  { url: '/uplot.js', file: uplot('uPlot.iife.min.js'), type: JS },
  { url: '/uplot.css', file: uplot('uPlot.min.css'), type: CSS },
];

const ms = (description: string) => ({ type: 'integer', nullable: true, description });

const UNITS = {
  total: count("the sale's stock"),
  available: count('left in Redis'),
  queued: count('won, not yet written to Postgres'),
  ...Object.fromEntries(ORDER_STATES.map((s) => [s, count(STATE_RULES[s].describe)])),
  restoring: count(`${RESTORING.join(' or ')}, not yet back in Redis`),
  holds: { type: 'boolean', description: `available + queued + ${HOLDING.join(' + ')} + restoring = total` },
};

/** Built when the routes are (a mode registered late, by a test, is in it): one nullable object per mode's figures. */
const liveSchema = () => ({
  description: "the sale's numbers, read at `at`",
  type: 'object',
  required: [
    'at',
    'sale',
    'paused',
    'reconciliation',
    'purchases',
    'writerLagMs',
    'lateness',
    'variants',
    ...liveKeys(),
    'thisInstance',
  ],
  properties: {
    at: { type: 'string', format: 'date-time', description: "the server's clock when they were read" },
    sale: saleViewSchema,
    paused: { type: 'boolean', description: 'an operator paused the sale (Postgres, the record)' },
    reconciliation: {
      type: 'object',
      description: 'units of the sale by where they are (expired and cancelled: ever)',
      required: Object.keys(UNITS),
      properties: UNITS,
    },
    purchases: count("purchases accepted so far, by every API instance (Redis's purchase counter)"),
    writerLagMs: ms('age of the oldest winner still in Redis; null when none waits'),
    lateness: {
      type: 'object',
      required: ['closes', 'p50Ms', 'p99Ms'],
      description: `expired orders closed in the last ${LATENESS_WINDOW_MS / 1000} s (at most ${LATENESS_SAMPLE}): how long after their deadline`,
      properties: { closes: count('orders closed'), p50Ms: ms('median lateness'), p99Ms: ms('99th percentile') },
    },
    variants: variantFiguresSchema,
    ...Object.fromEntries(registeredModes().flatMap(({ live }) => (live ? [[live.key, live.schema]] : []))),
    thisInstance: {
      type: 'object',
      required: ['outcomes'],
      description:
        "the answering API process's own counters (all sales, since it started): refusals are counted per process only",
      properties: {
        outcomes: {
          type: 'object',
          additionalProperties: { type: 'integer' },
          description: 'purchase attempts by outcome',
        },
      },
    },
  },
});

export const admin: FastifyPluginCallback<{ pool: Pool; redis: RedisClient; auth: Auth }> = (
  app,
  { pool, redis, auth },
  done,
) => {
  const html = withSaleForm(readFileSync(new URL('admin.html', PUBLIC_DIR), 'utf8'));
  staticRoute(
    app,
    '/admin',
    'text/html; charset=utf-8',
    html,
    "The operator's page: sales, a sale's live view, create and end",
  );
  for (const { url, file, type } of assets())
    staticRoute(app, url, type, readFileSync(file), `The operator's page's ${url.slice(1)}`);

  app.get<{ Params: { saleId: string } }>(
    '/api/sales/:saleId/live',
    {
      preValidation: auth.admin,
      schema: adminSaleSchema(
        "A sale's live numbers in one round trip: units by place, purchases, writer lag, expiry lateness, the waiting room or the draw",
        'Polled every second by /admin. Everything but `thisInstance` comes from Redis and Postgres, whichever API instance answers.',
        liveSchema(),
      ),
    },
    async (req) => {
      const sale = await getSale(pool, req.params.saleId);
      if (!sale) throw new HttpError('sale_not_found', `No sale with id "${req.params.saleId}".`);
      const [live, paused] = await Promise.all([saleLive(pool, redis, sale), isPaused(pool, sale.id)]);
      return { ...live, paused: paused === true };
    },
  );
  done();
};
