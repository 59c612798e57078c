// Request bodies are JSON and nothing else, and a key twice in one object is refused (see
// json-keys.ts for why).
import { HttpError } from '../../runtime/errors.js';
import { duplicateKey } from '../../runtime/json-keys.js';
import fp from 'fastify-plugin';

/** The one body parser: application/json, duplicate keys refused; an empty body is no body. */
export const jsonBody = fp(
  (app, _opts, done) => {
    // JSON only: fastify's built-in text/plain parser would hand a handler a string body.
    app.removeAllContentTypeParsers();
    app.addContentTypeParser('application/json', { parseAs: 'string' }, (_req, body, parsed) => {
      if (body === '') return parsed(null, undefined);
      let value: unknown;
      try {
        value = JSON.parse(body as string);
      } catch {
        return parsed(new HttpError('invalid_json'), undefined);
      }
      // A key twice needs two colons outside strings: a body with one colon at most (a purchase's
      // `{"qty":1}`) cannot hold one, and skips the scan.
      const text = body as string;
      const oneColonAtMost = text.indexOf(':') === text.lastIndexOf(':');
      const dup = typeof value === 'object' && value !== null && !oneColonAtMost ? duplicateKey(text) : undefined;
      if (dup !== undefined) {
        const name = dup.length > 64 ? `${JSON.stringify(dup.slice(0, 64))}...` : JSON.stringify(dup);
        return parsed(
          new HttpError('invalid_json', `The key ${name} appears more than once in one object.`),
          undefined,
        );
      }
      parsed(null, value);
    });
    done();
  },
  { name: 'flashsale-json-body', fastify: '5.x' },
);
