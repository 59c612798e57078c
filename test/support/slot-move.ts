// One cluster slot moved by hand, as an operator's script or `redis-cli --cluster reshard` does it:
// IMPORTING on the target, MIGRATING on the source, the keys sent over with MIGRATE a few at a
// time, then every master told the new owner. Between batches the slot is half moved: clients are
// sent on with ASK, and a script that names a key it did not declare sees whichever half runs it.
import { delay } from '../../shared/runtime/daemon.js';
import { ask, type RedisNode } from '../../tools/redis-cluster.js';

export interface SlotMove {
  slot: number;
  from: RedisNode;
  to: RedisNode;
  /** Every master of the cluster, told the new owner at the end. */
  masters: RedisNode[];
  /**
   * The keys to send first, batch by batch, in this order (names the slot no longer holds are
   * skipped); the rest of the slot follows `batch` at a time, then whatever is left.
   */
  first: string[][];
  /** Held back until everything else has gone. */
  last: string[];
  batch: number;
  pauseMs: number;
  /** Told of each step, for the scenario's log. */
  note?: (what: string) => void;
}

const MIGRATE_TIMEOUT_MS = 5000;

/** Moves the slot; throws, with the slot half moved, if MIGRATE or SETSLOT refuses (BUSYKEY: the target made a key of its own meanwhile). */
export async function moveSlotByHand(m: SlotMove): Promise<{ batches: number; keys: number }> {
  const [fromId, toId] = [
    await ask<string>(m.from.port, 'CLUSTER', 'MYID'),
    await ask<string>(m.to.port, 'CLUSTER', 'MYID'),
  ];
  await ask(m.to.port, 'CLUSTER', 'SETSLOT', m.slot, 'IMPORTING', fromId);
  await ask(m.from.port, 'CLUSTER', 'SETSLOT', m.slot, 'MIGRATING', toId);
  let batches = 0;
  let keys = 0;
  const held = async () => new Set(await ask<string[]>(m.from.port, 'CLUSTER', 'GETKEYSINSLOT', m.slot, 100_000));
  const send = async (names: string[]) => {
    if (names.length === 0) return;
    batches++;
    // NOKEY: every name expired since it was listed (a rate-limit window), nothing to send.
    const reply = await ask<string>(
      m.from.port,
      'MIGRATE',
      '127.0.0.1',
      m.to.port,
      '',
      0,
      MIGRATE_TIMEOUT_MS,
      'KEYS',
      ...names,
    ).catch((err: Error) => {
      throw new Error(`MIGRATE of slot ${m.slot} (batch ${batches}: ${names.join(' ')}) failed: ${err.message}`);
    });
    if (reply === 'OK') keys += names.length;
    m.note?.(`slot ${m.slot}: batch ${batches} of ${names.length} keys moved (${reply})`);
    await delay(m.pauseMs);
  };
  for (const names of m.first) {
    const there = await held();
    await send(names.filter((k) => there.has(k)));
  }
  const rest = [...(await held())].filter((k) => !m.last.includes(k));
  for (let i = 0; i < rest.length; i += m.batch) await send(rest.slice(i, i + m.batch));
  // The held-back keys, and any made on the source meanwhile: a migrating slot makes no new key
  // there (a write to a key it does not hold is sent on with ASK), so this ends.
  for (let round = 0, left = [...(await held())]; left.length > 0; round++, left = [...(await held())]) {
    if (round === 10)
      throw new Error(`slot ${m.slot}: keys still made on the source after ${round} rounds: ${left.join(' ')}`);
    await send(left);
  }
  // The target first, so it never answers MOVED back to a source that has let the slot go.
  for (const n of [m.to, m.from, ...m.masters.filter((x) => x.port !== m.to.port && x.port !== m.from.port)]) {
    await ask(n.port, 'CLUSTER', 'SETSLOT', m.slot, 'NODE', toId);
  }
  return { batches, keys };
}
