// The API's OpenAPI 3 document, generated from the routes' own schemas, at /docs/json, with
// Swagger UI at /docs. Registered before the routes, whose schemas it collects as they are added.
// Only routes with a tag are documented: the 405 answers of method-not-allowed.ts have none.
import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import fp from 'fastify-plugin';
import { PROVIDERS } from '../../payments/providers/index.js';

const TAGS = [
  { name: 'sales', description: 'sales and purchases' },
  { name: 'draw', description: "a draw's entries and its public record (admission: draw)" },
  { name: 'orders', description: "a buyer's orders" },
  { name: 'payments', description: "the payment providers' webhooks" },
  { name: 'admin', description: "sales administration (ADMIN_TOKEN or an operator's secret)" },
  { name: 'ops', description: 'probes, metrics and development helpers' },
  { name: 'page', description: "the buyer's page" },
];

const SECURITY_SCHEMES = {
  buyer: {
    type: 'http',
    scheme: 'bearer',
    bearerFormat: 'JWT',
    description:
      "The buyer's JWT (`sub` is the buyer): HS256 with JWT_SECRET, or RS256/ES256 from JWT_JWKS_URL. " +
      'With AUTH_MODE=trusted-header, the X-User-Id header an authenticating gateway sets instead.',
  },
  admin: {
    type: 'http',
    scheme: 'bearer',
    description: "ADMIN_TOKEN, or a named operator's secret from `flashsale operator add` (revoked: 401)",
  },
} as const;

/** On the whole app: in a plugin's own context it would see none of the routes. */
export const docs = fp(
  (app, _opts, done) => {
    void app.register(swagger, {
      openapi: {
        openapi: '3.0.3',
        info: {
          title: 'flashsale',
          version: '0.1.0',
          description: 'Flash-sale backend. Every error body is `{"error": code, "message": human text}`.',
        },
        tags: TAGS,
        // Each payment provider's scheme comes from the registry, with its route.
        components: {
          securitySchemes: {
            ...SECURITY_SCHEMES,
            ...Object.fromEntries([...PROVIDERS.values()].map((p) => [p.security.key, p.security.scheme])),
          },
        },
      },
      hideUntagged: true,
    });
    // The UI's assets come from the package itself: /docs works offline.
    void app.register(swaggerUi, { routePrefix: '/docs' });
    done();
  },
  { name: 'flashsale-docs', fastify: '5.x', dependencies: ['flashsale-errors', 'flashsale-request-metrics'] },
);
