// Latency of every request, by route, method and status: what /metrics shows of the HTTP side.
import { httpDurationOf } from '../metrics.js';
import { wholeApp } from './plugin.js';

export const requestMetrics = wholeApp((app, _opts, done) => {
  app.addHook('onResponse', (req, reply, next) => {
    httpDurationOf(req.routeOptions.url ?? 'unmatched', req.method, String(reply.statusCode)).observe(reply.elapsedTime / 1000);
    next();
  });
  done();
});
