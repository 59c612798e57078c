// A known path asked with another method is a 405 naming the allowed ones, not the router's 404.
import type { FastifyInstance, FastifyPluginCallback } from 'fastify';
import { HttpError } from '../../runtime/errors.js';

/**
 * Records the methods of every route added from now on, and returns the plugin that answers the
 * other methods on those paths: register it last, once every route is in.
 */
export function methodNotAllowed(app: FastifyInstance): FastifyPluginCallback {
  const served = new Map<string, Set<string>>();
  app.addHook('onRoute', (route) => {
    const methods = served.get(route.url) ?? new Set<string>();
    for (const m of [route.method].flat()) methods.add(m);
    served.set(route.url, methods);
  });
  return (instance, _opts, done) => {
    for (const [url, methods] of [...served]) {
      const allow = [...methods].join(', ');
      instance.route({
        // Not every route reaches onRoute: a plugin's '/' under a prefix adds the '<prefix>/' twin of
        // its GET without it (the API docs' UI does), so a method the router has is left alone.
        method: instance.supportedMethods.filter((m) => !methods.has(m) && !instance.hasRoute({ method: m, url })),
        url,
        handler: async (_req, reply) => {
          void reply.header('allow', allow);
          throw new HttpError('method_not_allowed', `This path takes ${allow}.`);
        },
      });
    }
    done();
  };
}
