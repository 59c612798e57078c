// The buyer's page: its static files, and the altcha widget's (a sale with a proof-of-work
// challenge), read once at start and served from memory.
import { readdirSync, readFileSync } from 'node:fs';
import type { FastifyInstance, FastifyPluginCallback, FastifyReply } from 'fastify';
import { textResponse } from '../schemas.js';

export const PUBLIC_DIR = new URL('../public/', import.meta.url);

export const JS = 'text/javascript; charset=utf-8';

/**
 * The pages' ES modules, every one in public/: the operator's page's are named admin*.js (admin.ts
 * serves them), the buyer's page's are the rest (app.js imports them). A new module needs no list.
 */
export function pageModules(page: 'buyer' | 'admin'): string[] {
  return readdirSync(PUBLIC_DIR)
    .filter((f) => f.endsWith('.js') && f.startsWith('admin') === (page === 'admin'))
    .sort();
}

// The widget's build without inline styles or workers (the page's CSP allows neither), its
// stylesheet, and the SHA-256 worker the page registers for it.
const ALTCHA = new URL('.', import.meta.resolve('altcha/external'));
const WIDGET_ASSETS = {
  'altcha.js': [new URL('altcha.min.js', ALTCHA), JS],
  'altcha.css': [new URL('altcha.css', ALTCHA), 'text/css; charset=utf-8'],
  'altcha-sha.js': [new URL('../workers/sha.js', ALTCHA), JS],
} as const;

// The page only talks to this origin; a pasted token must not be readable by anything injected.
const HEADERS = {
  'content-security-policy':
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
  // Small files, and a stale module after a deploy would talk to a changed API (or import one that
  // changed): always revalidate.
  'cache-control': 'no-cache',
};

export function send(reply: FastifyReply, type: string, body: string | Buffer): FastifyReply {
  return reply.headers(HEADERS).type(type).send(body);
}

/** GET `url` answers `body` (read once, at start) with the pages' headers, documented as a page. */
export function staticRoute(
  app: FastifyInstance,
  url: string,
  type: string,
  body: string | Buffer,
  summary: string,
): void {
  const schema = { summary, tags: ['page'], response: { 200: textResponse(type.split(';')[0]!, summary) } };
  app.get(url, { schema }, (_req, reply) => send(reply, type, body));
}

/**
 * GET / and its assets. The page learns from the HTML the mode (dev tokens or a pasted token) and
 * whether it may pay itself (DIRECT_PAY) or waits for the payment provider's confirmation.
 */
export const page: FastifyPluginCallback<{ development: boolean; directPay: boolean }> = (app, opts, done) => {
  const html = readFileSync(new URL('index.html', PUBLIC_DIR), 'utf8')
    .replace('data-mode="__MODE__"', `data-mode="${opts.development ? 'development' : 'production'}"`)
    .replace('data-pay="__PAY__"', `data-pay="${opts.directPay ? 'direct' : 'provider'}"`);
  staticRoute(
    app,
    '/',
    'text/html; charset=utf-8',
    html,
    "The buyer's page of the sale `?sale=<id>` names (default: demo)",
  );
  const assets = [...pageModules('buyer').map((name) => [name, JS]), ['style.css', 'text/css; charset=utf-8']] as const;
  for (const [name, type] of assets)
    staticRoute(app, `/${name}`, type, readFileSync(new URL(name, PUBLIC_DIR)), `The page's ${name}`);
  for (const [name, [file, type]] of Object.entries(WIDGET_ASSETS))
    staticRoute(app, `/${name}`, type, readFileSync(file), `The proof-of-work widget's ${name}`);
  done();
};
