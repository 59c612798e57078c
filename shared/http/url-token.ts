// The buyer token in a URL (`?access_token=`, for EventSource, which cannot send headers), taken
// off the URL before anything of ours can log it. A URL travels further than a header: proxies'
// and access logs may keep it.
//
// Which spellings count is the parser's business, not a pattern's: fastify's query parser
// (fast-querystring) reads `+` as a space and percent-decodes names, so `access%5Ftoken` and
// `%61ccess_token` are the token too, and the router starts the query at `?` or `#`. Every one of
// those is removed, and more: names in any case, pairs split by `;`, every repeat, since a
// parameter the route refuses (400) still carried a token in its URL.
import type { onRequestHookHandler } from 'fastify';

const NAME = 'access_token';
/** Where the router's query starts, and what separates pairs: a superset of what fastify splits on. */
const QUERY_START = /[?#;]/;
const PAIR = /([?#;&])([^?#;&=]*)=([^?#;&]*)/g;

/** A parameter name as the query parser decodes it. */
function decodedName(raw: string): string {
  const spaced = raw.replace(/\+/g, ' ');
  try {
    return decodeURIComponent(spaced);
  } catch {
    return spaced; // the parser keeps a name it cannot decode as it is
  }
}

/** The URL with the value of every parameter that is, or could be read as, access_token replaced. */
export function redactUrlToken(url: string): string {
  const start = url.slice(1).search(QUERY_START) + 1;
  if (start === 0) return url;
  const query = url
    .slice(start)
    .replace(PAIR, (pair, sep: string, name: string) =>
      decodedName(name).toLowerCase() === NAME ? `${sep}${name}=redacted` : pair,
    );
  return url.slice(0, start) + query;
}

/**
 * The route's onRequest hook: the token becomes the Authorization header (a header, when sent,
 * wins), and the URL loses it. The query is parsed already, by the router, so the handler still
 * sees it.
 */
export const tokenFromQuery: onRequestHookHandler = (req, _reply, done) => {
  const given = (req.query as { access_token?: unknown }).access_token;
  if (typeof given === 'string' && req.headers.authorization === undefined)
    req.headers.authorization = `Bearer ${given}`;
  if (req.raw.url) req.raw.url = redactUrlToken(req.raw.url);
  done();
};
