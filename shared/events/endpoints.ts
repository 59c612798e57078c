// A shop's receivers of events (docs/events.md): added with a secret (Standard Webhooks' whsec_),
// listed, disabled, and rotated with an overlap during which both secrets sign. The same steps
// serve `flashsale events endpoint` and the admin API.
import { randomBytes } from 'node:crypto';
import type { Pool } from '../runtime/db.js';
import { HttpError } from '../runtime/errors.js';
import { isPrivateHost } from './address.js';
import { EVENT_TYPES } from './record.js';

export interface Endpoint {
  id: string;
  url: string;
  /** Empty: every type. */
  eventTypes: string[];
  enabled: boolean;
  disabledReason: string | null;
  failingSince: string | null;
  /** Until when the previous secret still signs, after a rotation. */
  previousUntil: string | null;
  createdAt: string;
}

interface EndpointRow {
  id: string;
  url: string;
  event_types: string[];
  enabled: boolean;
  disabled_reason: string | null;
  failing_since: Date | null;
  previous_until: Date | null;
  created_at: Date;
}

/** An endpoint's id: given (`--id`) or ep_ and 16 hex digits. */
export const ENDPOINT_ID = /^[A-Za-z0-9_.-]{1,64}$/;

const COLUMNS = 'id, url, event_types, enabled, disabled_reason, failing_since, previous_until, created_at';

const view = (r: EndpointRow): Endpoint => ({
  id: r.id,
  url: r.url,
  eventTypes: r.event_types,
  enabled: r.enabled,
  disabledReason: r.disabled_reason,
  failingSince: r.failing_since?.toISOString() ?? null,
  previousUntil: r.previous_until?.toISOString() ?? null,
  createdAt: r.created_at.toISOString(),
});

/** A Standard Webhooks secret: whsec_ and 24 random bytes in base64. */
const newSecret = () => `whsec_${randomBytes(24).toString('base64')}`;

/**
 * Refuses what cannot be an endpoint: not http(s), or a private address as written unless allowed
 * (what a name resolves to is judged at each delivery: shared/events/address.ts).
 */
export function checkEndpointUrl(url: string, allowPrivate: boolean): string {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    throw new HttpError('invalid_endpoint', `"${url}" is not a URL.`);
  }
  if (u.protocol !== 'https:' && u.protocol !== 'http:')
    throw new HttpError('invalid_endpoint', 'An endpoint is an http:// or https:// URL.');
  if (!allowPrivate && isPrivateHost(u.hostname))
    throw new HttpError(
      'invalid_endpoint',
      `${u.hostname} is a loopback, link-local or private address: set EVENTS_ALLOW_PRIVATE_ENDPOINTS=true to allow it (development only).`,
    );
  return u.toString();
}

function checkTypes(types: string[]): string[] {
  const unknown = types.filter((t) => !(EVENT_TYPES as readonly string[]).includes(t));
  if (unknown.length)
    throw new HttpError(
      'invalid_endpoint',
      `Unknown event type(s): ${unknown.join(', ')}; the types are ${EVENT_TYPES.join(', ')}.`,
    );
  return [...new Set(types)];
}

export async function addEndpoint(
  pool: Pool,
  input: { url: string; id?: string; eventTypes?: string[]; allowPrivate: boolean },
): Promise<{ endpoint: Endpoint; secret: string }> {
  const url = checkEndpointUrl(input.url, input.allowPrivate);
  const secret = newSecret();
  if (input.id !== undefined && !ENDPOINT_ID.test(input.id))
    throw new HttpError('invalid_endpoint', 'An endpoint id is 1 to 64 letters, digits, dots, dashes or underscores.');
  const id = input.id ?? `ep_${randomBytes(8).toString('hex')}`;
  const res = await pool.query<EndpointRow>(
    `insert into endpoints (id, url, event_types, secret) values ($1, $2, $3, $4) on conflict (id) do nothing
     returning ${COLUMNS}`,
    [id, url, checkTypes(input.eventTypes ?? []), secret],
  );
  if (!res.rows[0]) throw new HttpError('endpoint_exists', `An endpoint with id "${id}" exists already.`);
  return { endpoint: view(res.rows[0]), secret };
}

/** Every endpoint, with how many deliveries to it are pending (counted on the partial index of those). */
export async function listEndpoints(pool: Pool): Promise<(Endpoint & { pending: number })[]> {
  const res = await pool.query<EndpointRow & { pending: number }>(
    `select ${COLUMNS}, (select count(*) from deliveries d where d.endpoint_id = endpoints.id and d.status = 'pending')::int as pending
     from endpoints order by created_at, id`,
  );
  return res.rows.map((r) => ({ ...view(r), pending: r.pending }));
}

const notFound = (id: string) => new HttpError('endpoint_not_found', `No endpoint with id "${id}".`);

/** Stops deliveries to it (those due stay pending until it is enabled again). */
export async function disableEndpoint(pool: Pool, id: string, reason = 'disabled by an operator'): Promise<Endpoint> {
  const res = await pool.query<EndpointRow>(
    `update endpoints set enabled = false, disabled_reason = $2 where id = $1 returning ${COLUMNS}`,
    [id, reason],
  );
  if (!res.rows[0]) throw notFound(id);
  return view(res.rows[0]);
}

/** Enables it again, its failures forgotten: what is due to it is tried at once. */
export async function enableEndpoint(pool: Pool, id: string): Promise<Endpoint> {
  const res = await pool.query<EndpointRow>(
    `with e as (update endpoints set enabled = true, disabled_reason = null, failing_since = null where id = $1 returning ${COLUMNS}),
     d as (update deliveries set next_at = now() where endpoint_id = $1 and status = 'pending')
     select * from e`,
    [id],
  );
  if (!res.rows[0]) throw notFound(id);
  return view(res.rows[0]);
}

/**
 * A new secret; the current one keeps signing beside it for `overlapSeconds`, so the receiver can
 * switch to the new one without a failed delivery.
 */
export async function rotateSecret(
  pool: Pool,
  id: string,
  overlapSeconds: number,
): Promise<{ endpoint: Endpoint; secret: string }> {
  const secret = newSecret();
  const res = await pool.query<EndpointRow>(
    `update endpoints set previous_secret = secret, previous_until = now() + make_interval(secs => $3), secret = $2
     where id = $1 returning ${COLUMNS}`,
    [id, secret, overlapSeconds],
  );
  if (!res.rows[0]) throw notFound(id);
  return { endpoint: view(res.rows[0]), secret };
}
