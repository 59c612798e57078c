// Latency of every request, by route, method and status: what /metrics shows of the HTTP side.
import { metrics } from '../metrics.js';
import { wholeApp } from './plugin.js';

export const requestMetrics = wholeApp((app, _opts, done) => {
  app.addHook('onResponse', (req, reply, next) => {
    metrics.httpDuration.observe(
      { route: req.routeOptions.url ?? 'unmatched', method: req.method, status: reply.statusCode }, reply.elapsedTime / 1000,
    );
    next();
  });
  done();
});
