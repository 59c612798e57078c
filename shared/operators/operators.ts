// Named operators: each has a secret of its own for the admin API, issued once by `flashsale
// operator add` and kept as its sha256 only. A request is checked by one primary-key lookup of the
// digest, no cache, so a revocation holds from the next request on. ADMIN_TOKEN stays the bootstrap
// operator, recorded as `admin-token`.
import { createHash, randomBytes } from 'node:crypto';
import type { Pool, PoolClient } from '../runtime/db.js';
import { withTransaction } from '../runtime/db.js';
import { HttpError } from '../runtime/errors.js';
import { recordAudit } from './audit.js';

/** Who ADMIN_TOKEN is in the audit. */
export const BOOTSTRAP_OPERATOR = 'admin-token';
export const OPERATOR_NAME = /^[a-z0-9][a-z0-9._-]{0,62}$/;
/** Secrets start with it, so one found in a log or a paste is recognised for what it is. */
const SECRET_PREFIX = 'fsop_';

export interface Operator {
  name: string;
  createdAt: string;
  revokedAt: string | null;
}

interface OperatorRow {
  name: string;
  created_at: Date;
  revoked_at: Date | null;
}

const operatorOf = (r: OperatorRow): Operator => ({
  name: r.name,
  createdAt: r.created_at.toISOString(),
  revokedAt: r.revoked_at?.toISOString() ?? null,
});

export const secretDigest = (secret: string) => createHash('sha256').update(secret).digest();

function checkName(name: string): void {
  if (!OPERATOR_NAME.test(name) || name === BOOTSTRAP_OPERATOR)
    throw new HttpError(
      'bad_request',
      `An operator's name is 1 to 63 of a-z, 0-9, '.', '_' and '-', starting with a letter or digit, and not ${BOOTSTRAP_OPERATOR}; got ${JSON.stringify(name)}.`,
    );
}

/** Issues `name` a secret, returned this once (only its digest is kept). A name is never issued twice. */
export async function addOperator(
  pool: Pool,
  name: string,
  by: string,
): Promise<{ operator: Operator; secret: string }> {
  checkName(name);
  const secret = SECRET_PREFIX + randomBytes(32).toString('base64url');
  return withTransaction(pool, async (client) => {
    const res = await client.query<OperatorRow>(
      `insert into operators (name, secret_sha256) values ($1, $2) on conflict (name) do nothing returning *`,
      [name, secretDigest(secret)],
    );
    if (res.rowCount === 0)
      throw new HttpError(
        'operator_exists',
        `An operator named "${name}" exists already (or did: a revoked name is not issued again, as the audit names it).`,
      );
    await recordAudit(client, { operator: by, action: 'operator.add', detail: { name } });
    return { operator: operatorOf(res.rows[0]!), secret };
  });
}

/** Revokes `name`'s secret from the next request on; revoking again changes nothing (and records nothing). */
export async function revokeOperator(
  pool: Pool,
  name: string,
  by: string,
): Promise<{ operator: Operator; revoked: boolean }> {
  return withTransaction(pool, async (client) => {
    const res = await client.query<OperatorRow>(
      `update operators set revoked_at = now() where name = $1 and revoked_at is null returning *`,
      [name],
    );
    if (res.rowCount === 1) {
      await recordAudit(client, { operator: by, action: 'operator.revoke', detail: { name } });
      return { operator: operatorOf(res.rows[0]!), revoked: true };
    }
    const found = await client.query<OperatorRow>('select * from operators where name = $1', [name]);
    if (!found.rows[0]) throw new HttpError('operator_not_found', `No operator is named "${name}".`);
    return { operator: operatorOf(found.rows[0]), revoked: false };
  });
}

export async function listOperators(pool: Pool): Promise<Operator[]> {
  const res = await pool.query<OperatorRow>('select * from operators order by created_at, name');
  return res.rows.map(operatorOf);
}

/** Whose secret this digest is: the name and whether it was revoked, or undefined for nobody's. */
export async function operatorBySecret(
  db: Pool | PoolClient,
  digest: Buffer,
): Promise<{ name: string; revoked: boolean } | undefined> {
  const res = await db.query<{ name: string; revoked: boolean }>(
    'select name, revoked_at is not null as revoked from operators where secret_sha256 = $1',
    [digest],
  );
  return res.rows[0];
}
