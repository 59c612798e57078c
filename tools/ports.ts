// Ports for the servers of the tests and benches. A port found free is also reserved, by a file
// named for it that holds our pid, for as long as this process lives: every process on the machine
// that asks here (each test file, other checkouts' runs) gets a port no other live one holds, so a
// server started on it later, or a port kept as "nothing listens here", is not taken meanwhile.
import { closeSync, chmodSync, mkdirSync, openSync, readFileSync, rmSync, writeSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { alive } from './stack-lock.js';

const RESERVED = join(tmpdir(), 'flashsale-ports');
const held: string[] = [];

const portFree = (port: number) =>
  new Promise<boolean>((resolve) => {
    const server = createServer();
    server.once('error', () => resolve(false));
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
  });

/** Where Linux starts handing out outgoing connections' local ports (ip_local_port_range; 32768 by default). */
function ephemeralFrom(): number {
  try {
    return Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]) || 32_768;
  } catch {
    return 32_768;
  }
}

/** Takes the port's file, or one whose holder is gone; false while a live process holds it. */
function reserve(port: number): boolean {
  const file = join(RESERVED, String(port));
  for (let tries = 0; tries < 2; tries++) {
    try {
      const fd = openSync(file, 'wx');
      writeSync(fd, String(process.pid));
      closeSync(fd);
      if (held.push(file) === 1) process.once('exit', releaseAll);
      return true;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') return false;
      // A holder killed without its exit handler (kill -9) left its file: taken over.
      const owner = Number(readFileSync(file, 'utf8').trim());
      if (owner > 0 && alive(owner)) return false;
      try {
        rmSync(file);
      } catch {
        return false;
      }
    }
  }
  return false;
}

function releaseAll(): void {
  for (const file of held) rmSync(file, { force: true });
}

function release(port: number): void {
  const file = join(RESERVED, String(port));
  const i = held.indexOf(file);
  if (i >= 0) held.splice(i, 1);
  rmSync(file, { force: true });
}

/**
 * A port below the ephemeral range, free now and reserved for this process: there no outgoing
 * connection takes it (a load test opens thousands), so a server restarted on its port (Redis or
 * Postgres after a kill) finds it free.
 */
export const freePort = () => freePortBase([0]);

/** A base whose ports at every offset are free now and reserved (an OPS_PORT_BASE: the ecosystem adds 1..4 and 10 + N). */
export async function freePortBase(offsets: number[]): Promise<number> {
  mkdirSync(RESERVED, { recursive: true });
  // Shared by every user's runs, as /tmp is: anyone may add a file, only its owner remove it.
  try {
    chmodSync(RESERVED, 0o1777);
  } catch {
    // Another user's directory, already so.
  }
  const from = 10_000;
  // (A machine whose ephemeral range starts low gets ports from inside it.)
  const span = Math.max(10_000, ephemeralFrom() - Math.max(...offsets) - from);
  for (let tries = 0; tries < 50; tries++) {
    const base = from + Math.floor(Math.random() * span);
    const ports = offsets.map((o) => base + o);
    const taken = ports.filter(reserve);
    if (taken.length === ports.length && (await Promise.all(ports.map(portFree))).every(Boolean)) return base;
    for (const port of taken) release(port);
  }
  throw new Error(`no free ports at ${offsets.join(', ')} from a base in 50 tries`);
}
