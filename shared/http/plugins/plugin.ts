// Cross-cutting plugins apply to the whole app: their hooks, handlers and parsers reach every
// route, which fastify's encapsulation would otherwise keep inside the plugin.
import type { FastifyPluginCallback } from 'fastify';

/** What the fastify-plugin package does, without the package: the plugin runs on its parent. */
export function wholeApp<T extends Record<string, unknown>>(plugin: FastifyPluginCallback<T>): FastifyPluginCallback<T> {
  return Object.assign(plugin, { [Symbol.for('skip-override')]: true });
}
