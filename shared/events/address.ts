// Where a delivery may go (docs/events.md). An endpoint's host is judged twice: as written, when
// it is added, and as it resolves, at each delivery. A public name can resolve to a loopback or
// private address (or be made to, between two lookups), so a delivery resolves the name once,
// refuses it when any answer is private, and connects to the address it checked (`pinnedLookup`).
import { lookup } from 'node:dns/promises';
import { BlockList, isIP, type LookupFunction } from 'node:net';

/** Loopback, private, link-local, shared (carrier NAT), unspecified, multicast and reserved ranges. */
const PRIVATE = new BlockList();
for (const [net, prefix] of [
  ['0.0.0.0', 8],
  ['10.0.0.0', 8],
  ['100.64.0.0', 10],
  ['127.0.0.0', 8],
  ['169.254.0.0', 16],
  ['172.16.0.0', 12],
  ['192.0.0.0', 24],
  ['192.168.0.0', 16],
  ['198.18.0.0', 15],
  ['224.0.0.0', 3],
] as const)
  PRIVATE.addSubnet(net, prefix, 'ipv4');
for (const [net, prefix] of [
  // :: and ::1, and the deprecated IPv4-compatible ::a.b.c.d.
  ['::', 96],
  ['64:ff9b::', 96],
  ['fc00::', 7],
  ['fe80::', 10],
  ['fec0::', 10],
  ['ff00::', 8],
] as const)
  PRIVATE.addSubnet(net, prefix, 'ipv6');

/** An IP address a request forgery aims at. An IPv4-mapped IPv6 one (::ffff:a.b.c.d) is judged as its IPv4. */
export function isPrivateAddress(ip: string): boolean {
  const family = isIP(ip);
  if (family === 0) throw new Error(`"${ip}" is not an IP address`);
  return PRIVATE.check(ip, family === 4 ? 'ipv4' : 'ipv6');
}

/** A URL's hostname as written: localhost names and private IP literals. */
export function isPrivateHost(hostname: string): boolean {
  const h = hostname.replace(/^\[|\]$/g, '').toLowerCase();
  if (h === 'localhost' || h.endsWith('.localhost')) return true;
  return isIP(h) !== 0 && isPrivateAddress(h);
}

export interface Resolved {
  address: string;
  family: number;
}

/** A name's addresses: the system resolver's (getaddrinfo, /etc/hosts included), as a connection would use. */
export type Resolve = (hostname: string) => Promise<Resolved[]>;

export const systemResolve: Resolve = (hostname) => lookup(hostname, { all: true });

/** A host that resolved to a private address: no request is sent to it. */
export class AddressRefused extends Error {}

/**
 * The address to connect to for `hostname`: its first answer, once every answer is public (or
 * private ones are allowed). One private answer refuses it all: which one a connection would take
 * is the resolver's choice, not ours.
 */
export async function checkedAddress(hostname: string, allowPrivate: boolean, resolve: Resolve): Promise<Resolved> {
  const h = hostname.replace(/^\[|\]$/g, '');
  const found = await resolve(h);
  if (found.length === 0) throw new AddressRefused(`${h} resolves to no address`);
  const bad = found.find((a) => isPrivateAddress(a.address));
  if (bad && !allowPrivate)
    throw new AddressRefused(
      `refused: ${h} resolves to ${bad.address}, a loopback, link-local or private address (EVENTS_ALLOW_PRIVATE_ENDPOINTS=true allows it, for development)`,
    );
  return found[0]!;
}

/** A connection's `lookup` that answers the checked address, whatever DNS would say now. */
export function pinnedLookup(pin: Resolved): LookupFunction {
  return (_hostname, options, callback) => {
    if (options.all) (callback as (e: null, a: Resolved[]) => void)(null, [pin]);
    else callback(null, pin.address, pin.family);
  };
}
