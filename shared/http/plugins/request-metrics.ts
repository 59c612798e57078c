// Latency of every request, by route, method and status: what /metrics shows of the HTTP side.
import type { onResponseHookHandler } from 'fastify';
import type { HistogramSeries } from '../../runtime/bound-histogram.js';
import { httpDurationOf } from '../../runtime/metrics.js';
import fp from 'fastify-plugin';

export const requestMetrics = fp(
  (app, _opts, done) => {
    // Each route observes under its own url, bound when it is registered: reading
    // request.routeOptions builds a new object on every request.
    app.addHook('onRoute', (route) => {
      const { url } = route;
      // Its series by method and status, found without building a string per request.
      const byMethod = new Map<string, Map<number, HistogramSeries>>();
      const observe: onResponseHookHandler = (req, reply, next) => {
        let byStatus = byMethod.get(req.method);
        if (byStatus === undefined) byMethod.set(req.method, (byStatus = new Map()));
        let series = byStatus.get(reply.statusCode);
        if (series === undefined)
          byStatus.set(reply.statusCode, (series = httpDurationOf(url, req.method, String(reply.statusCode))));
        series.observe(reply.elapsedTime / 1000);
        next();
      };
      route.onResponse = route.onResponse === undefined ? observe : [route.onResponse, observe].flat();
    });
    // Requests no route took (404). (A prefixed plugin's '<prefix>/' twin of its '/' route never reaches
    // onRoute, see method-not-allowed.ts: the API docs' UI has one, and it goes unmeasured.)
    app.addHook('onResponse', (req, reply, next) => {
      if (req.is404)
        httpDurationOf('unmatched', req.method, String(reply.statusCode)).observe(reply.elapsedTime / 1000);
      next();
    });
    done();
  },
  { name: 'flashsale-request-metrics', fastify: '5.x' },
);
