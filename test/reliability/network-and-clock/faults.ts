// The network-and-clock scenario's processes, and its seeded network faults: partitions of one
// process from Redis or Postgres, random loss on either server's port, and delay on one process's
// proxy, each healed after its while.
import { delay } from '../../../shared/runtime/daemon.js';
import type { Kind } from '../../support/cluster.js';
import type { NetFaults } from '../../support/netns.js';
import type { FaultLog } from '../../support/scenario.js';
import type { TcpProxy } from '../../support/tcp-proxy.js';

export type Server = 'redis' | 'pg';

export const PROCS: [string, Kind][] = [
  ['api-a', 'api'],
  ['api-b', 'api'],
  ['writer-a', 'order-writer'],
  ['writer-b', 'order-writer'],
  ['listener', 'expiry-listener'],
  ['replay', 'replay'],
  ['admission', 'admission'],
];

/** The partitions the scenario makes: a process and the server it is cut from. */
const PARTITIONS: [string, Server][] = [
  ['api-a', 'redis'],
  ['api-b', 'redis'],
  ['writer-a', 'pg'],
  ['writer-b', 'pg'],
  ['writer-a', 'redis'],
  ['writer-b', 'redis'],
  ['listener', 'redis'],
  ['admission', 'redis'],
];

/** The seeded network faults, one every 0.4-1.6 s, each healed after its while, until stopped. */
export function networkFaults(
  log: FaultLog,
  rand: () => number,
  faults: NetFaults,
  proxies: Map<string, Record<Server, TcpProxy>>,
  ports: Record<Server, number>,
): { stop(): Promise<void> } {
  let stopping = false;
  const healing = new Set<Promise<void>>();
  const later = (ms: number, heal: () => Promise<void> | void) => {
    const p = delay(ms)
      .then(heal)
      .catch((err) => log.note(`heal failed: ${(err as Error).message}`));
    healing.add(p);
    void p.finally(() => healing.delete(p));
  };
  const running = (async () => {
    while (!stopping) {
      await delay(400 + rand() * 1200);
      if (stopping) break;
      const roll = rand();
      const ms = Math.round(1500 + rand() * 2500);
      if (roll < 0.5) {
        const [name, server] = PARTITIONS[Math.floor(rand() * PARTITIONS.length)]!;
        const heal = await faults.partition(proxies.get(name)![server].port);
        log.fault(`partition ${name}/${server} (${ms} ms)`);
        later(ms, heal);
      } else if (roll < 0.75) {
        const server: Server = rand() < 0.5 ? 'redis' : 'pg';
        const p = Math.round((0.01 + rand() * 0.04) * 1000) / 1000;
        const heal = await faults.loss(ports[server], p);
        log.fault(`loss ${server} (${p * 100}% for ${ms} ms)`);
        later(ms, heal);
      } else {
        const [name] = PROCS[Math.floor(rand() * PROCS.length)]!;
        const server: Server = rand() < 0.5 ? 'redis' : 'pg';
        const proxy = proxies.get(name)![server];
        const min = Math.round(50 + rand() * 100);
        const max = Math.round(min + 50 + rand() * (250 - min));
        if (proxy.delay) continue; // already delayed: its own heal ends it
        proxy.setDelay([min, max]);
        log.fault(`delay ${name}/${server} (${min}-${max} ms for ${ms} ms)`);
        later(ms, () => proxy.setDelay(undefined));
      }
    }
  })();
  return {
    async stop() {
      stopping = true;
      await running;
      while (healing.size > 0) await Promise.all([...healing]);
    },
  };
}

/** `partition api-a/redis x3, partition writer-a/pg x2, loss pg x4` as `partition 5 (api-a/redis 3, writer-a/pg 2), loss 4 (pg 4)`. */
export function byFirstWord(kinds: string[]): string {
  const groups = new Map<string, string[]>();
  const total = new Map<string, number>();
  for (const k of kinds) {
    const m = /^(\S+(?: skew)?) (.*) x(\d+)$/.exec(k);
    if (!m) continue;
    groups.set(m[1]!, [...(groups.get(m[1]!) ?? []), `${m[2]} ${m[3]}`]);
    total.set(m[1]!, (total.get(m[1]!) ?? 0) + Number(m[3]));
  }
  return [...groups].map(([kind, parts]) => `${kind} ${total.get(kind)} (${parts.join(', ')})`).join('; ');
}
