// The OpenAPI document is the HTTP API table of docs/api.md, machine-readable: every route the table
// names is in /docs/json, with every error it lists among that operation's responses, and the
// Swagger UI at /docs answers from the package's own assets.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { after, before, test } from 'node:test';
import Fastify, { type FastifyInstance } from 'fastify';
import { buildApp } from '../shared/http/app.js';
import { docs } from '../shared/http/plugins/docs.js';
import { errorHandler, errorMapping } from '../shared/http/plugins/errors.js';
import { requestMetrics } from '../shared/http/plugins/request-metrics.js';
import { Purchaser } from '../shared/purchase/purchaser.js';
import { testEnv, type TestEnv } from './support/env.js';

let env: TestEnv;
let app: FastifyInstance;

before(async () => {
  env = await testEnv();
  // Development and DIRECT_PAY: every optional route exists.
  const config = { ...env.config, development: true, directPay: true };
  app = buildApp({
    config,
    pool: env.pool,
    redis: env.redis,
    purchaser: new Purchaser(env.redis, config),
    logger: env.logger,
  });
  await app.ready();
});
after(async () => {
  await app.close();
  await env.close();
});

interface Row {
  routes: { method: string; path: string }[];
  /** Each error the row lists: its status, and its code where the row names one. */
  errors: { status: string; code?: string }[];
}

/** The `| Route | Success | Errors |` table of docs/api.md. */
function apiDocRows(): Row[] {
  const lines = readFileSync(new URL('../docs/api.md', import.meta.url), 'utf8').split('\n');
  const head = lines.findIndex((l) => /^\| Route \| Success \| Errors \|/.test(l));
  assert.ok(head >= 0, 'docs/api.md has the HTTP API table');
  const rows: Row[] = [];
  for (const line of lines.slice(head + 2)) {
    if (!line.startsWith('|')) break;
    // Cells split on | but not on an escaped \|.
    const cells = line.split(/(?<!\\)\|/).slice(1, -1);
    assert.equal(cells.length, 3, `a row of three cells: ${line}`);
    const [route, , errors] = cells as [string, string, string];
    const routes = [...route.matchAll(/`(GET|POST|PUT|PATCH|DELETE) ([^`\s]+)`/g)].map(([, method, path]) => ({
      method: method!.toLowerCase(),
      path: path!.replace(/\?.*$/, '').replace(/:(\w+)/g, '{$1}'),
    }));
    assert.ok(routes.length > 0, `a row names its route: ${line}`);
    rows.push({
      routes,
      errors: [...errors.matchAll(/`(\d{3})(?: (\w+))?`/g)].map(([, status, code]) => ({ status: status!, code })),
    });
  }
  assert.ok(rows.length >= 8, `the table has its rows (${rows.length})`);
  return rows;
}

interface Operation {
  tags?: string[];
  summary?: string;
  responses: Record<
    string,
    {
      schema?: { properties?: { error?: { enum?: string[] } } };
      content?: Record<string, { schema?: { properties?: { error?: { enum?: string[] } } } }>;
    }
  >;
}

test('every route and every error of the HTTP API table (docs/api.md) is in the OpenAPI document', async () => {
  const res = await app.inject({ method: 'GET', url: '/docs/json' });
  assert.equal(res.statusCode, 200);
  const doc = res.json() as {
    openapi: string;
    paths: Record<string, Record<string, Operation>>;
    components: { securitySchemes: Record<string, unknown> };
  };
  assert.match(doc.openapi, /^3\./);
  assert.deepEqual(Object.keys(doc.components.securitySchemes).sort(), ['admin', 'buyer', 'webhook']);
  let checked = 0;
  for (const row of apiDocRows()) {
    for (const { method, path } of row.routes) {
      const op = doc.paths[path]?.[method];
      assert.ok(op, `${method.toUpperCase()} ${path} is documented`);
      assert.ok(op.summary && op.tags?.length, `${method.toUpperCase()} ${path} has a summary and a tag`);
      for (const { status, code } of row.errors) {
        const response = op.responses[status];
        assert.ok(response, `${method.toUpperCase()} ${path} documents ${status}`);
        if (code === undefined) continue;
        const codes = response.content?.['application/json']?.schema?.properties?.error?.enum ?? [];
        assert.ok(
          codes.includes(code),
          `${method.toUpperCase()} ${path} documents ${status} ${code} (has ${codes.join(', ')})`,
        );
        checked++;
      }
    }
  }
  assert.ok(checked > 30, `error codes checked: ${checked}`);
});

test("the 405 answers are no operations of their own; the docs' routes keep 405 and 404 in our shape", async () => {
  const doc = (await app.inject({ method: 'GET', url: '/docs/json' })).json() as {
    paths: Record<string, Record<string, unknown>>;
  };
  // GET and POST are real on /api/sales; DELETE there is only method-not-allowed's 405.
  assert.deepEqual(Object.keys(doc.paths['/api/sales']!).sort(), ['get', 'post']);
  assert.equal(doc.paths['/docs/json'], undefined);
  const wrongMethod = await app.inject({ method: 'DELETE', url: '/docs/json' });
  assert.equal(wrongMethod.statusCode, 405);
  assert.equal(wrongMethod.json().error, 'method_not_allowed');
  const unknown = await app.inject({ method: 'GET', url: '/docs/nope/nothing' });
  assert.equal(unknown.statusCode, 404);
  assert.deepEqual(Object.keys(unknown.json()).sort(), ['error', 'message']);
});

test('/docs is the Swagger UI, served from the package (no network)', async () => {
  const page = await app.inject({ method: 'GET', url: '/docs' });
  assert.equal(page.statusCode, 200);
  assert.match(String(page.headers['content-type']), /^text\/html/);
  assert.match(page.body, /swagger-ui/i);
  // Every script and stylesheet the page loads is served by this app.
  const assets = [...page.body.matchAll(/(?:src|href)="([^"]+\.(?:js|css))"/g)].map(([, a]) => a!);
  assert.ok(assets.length >= 2, `the page loads its assets: ${assets.join(', ')}`);
  for (const asset of assets) {
    assert.ok(!/^(?:https?:)?\/\//.test(asset), `${asset} is local`);
    const url = asset.startsWith('/') ? asset : `/docs/${asset.replace(/^\.\//, '')}`;
    const res = await app.inject({ method: 'GET', url });
    assert.equal(res.statusCode, 200, `${url} is served`);
  }
});

test("the docs' plugin after the error mapping and the request metrics, or the app does not start: its routes would answer outside our shape, unmeasured", async () => {
  const onError = errorHandler(env.logger);
  for (const [missing, register] of [
    ['flashsale-errors', (a: FastifyInstance) => a.register(requestMetrics)],
    ['flashsale-request-metrics', (a: FastifyInstance) => a.register(errorMapping, { onError })],
  ] as const) {
    const early = Fastify();
    void register(early);
    void early.register(docs);
    await assert.rejects(
      async () => {
        await early.ready();
      },
      (err: Error & { code?: string }) =>
        err.code === 'FST_ERR_PLUGIN_DEPENDENCY_NOT_REGISTERED' && err.message.includes(missing),
      missing,
    );
    await early.close().catch(() => {});
  }
  const inOrder = Fastify();
  void inOrder.register(errorMapping, { onError });
  void inOrder.register(requestMetrics);
  void inOrder.register(docs);
  await inOrder.ready();
  assert.equal((await inOrder.inject({ method: 'GET', url: '/docs/json' })).statusCode, 200);
  await inOrder.close();
});
