// `flashsale events`: the delivery daemon of outbound events, and `flashsale events endpoint`, the
// shop's receivers (docs/events.md).
import type { Argv } from 'yargs';
import type { Config } from '../../shared/config/index.js';
import {
  addEndpoint,
  disableEndpoint,
  enableEndpoint,
  listEndpoints,
  rotateSecret,
  type Endpoint,
} from '../../shared/events/endpoints.js';
import { listEvents, replayEvents, showEvent, type EventSummary } from '../../shared/events/inspect.js';
import { HttpError } from '../../shared/runtime/errors.js';
import type { Logger } from '../../shared/runtime/logger.js';
import { printTable, serve, serverFlags, withConnections } from './common.js';

const startEvents = async (c: Config, l: Logger) => (await import('../events.js')).startEvents(c, l);

const printed = (e: Endpoint) =>
  `endpoint ${e.id} ${e.url} (${e.eventTypes.length ? e.eventTypes.join(', ') : 'every type'})${e.enabled ? '' : `, disabled: ${e.disabledReason}`}`;

const endpoint = (y: Argv) =>
  y
    .command(
      'add <url>',
      'add a receiver; its signing secret (whsec_...) is printed this once',
      (a) =>
        a
          .positional('url', { type: 'string', demandOption: true })
          .option('id', { type: 'string', describe: 'its id (default: ep_ and 16 hex digits)' })
          .option('types', { type: 'string', describe: 'event types it takes, comma-separated (default: every type)' }),
      async (argv) => {
        const eventTypes = argv.types ? argv.types.split(',').map((t) => t.trim()) : [];
        const { endpoint, secret } = await withConnections(argv, ({ pool }, config) =>
          addEndpoint(pool, {
            url: argv.url,
            id: argv.id,
            eventTypes,
            allowPrivate: config.eventsAllowPrivateEndpoints,
          }),
        );
        if (argv.json) console.log(JSON.stringify({ ...endpoint, secret }));
        else console.log(`${printed(endpoint)} added; its secret, shown this once:\n${secret}`);
      },
    )
    .command(
      'list',
      'every endpoint, disabled ones too',
      (l) => l,
      async (argv) => {
        const list = await withConnections(argv, ({ pool }) => listEndpoints(pool));
        if (argv.json) console.log(JSON.stringify(list));
        else if (list.length === 0) console.log('no endpoints');
        else
          printTable([
            ['id', 'url', 'types', 'enabled', 'failing since', 'previous secret until'],
            ...list.map((e) => [
              e.id,
              e.url,
              e.eventTypes.join(',') || '*',
              e.enabled ? 'yes' : `no (${e.disabledReason})`,
              e.failingSince ?? '-',
              e.previousUntil ?? '-',
            ]),
          ]);
      },
    )
    .command(
      'disable <id>',
      'stop delivering to it (what is due stays due)',
      (d) => d.positional('id', { type: 'string', demandOption: true }),
      async (argv) => {
        const e = await withConnections(argv, ({ pool }) => disableEndpoint(pool, argv.id));
        console.log(argv.json ? JSON.stringify(e) : printed(e));
      },
    )
    .command(
      'enable <id>',
      'deliver to it again, at once',
      (d) => d.positional('id', { type: 'string', demandOption: true }),
      async (argv) => {
        const e = await withConnections(argv, ({ pool }) => enableEndpoint(pool, argv.id));
        console.log(argv.json ? JSON.stringify(e) : printed(e));
      },
    )
    .command(
      'rotate <id>',
      'a new secret, printed this once; the old one signs beside it for EVENTS_ROTATION_OVERLAP_SECONDS',
      (r) => r.positional('id', { type: 'string', demandOption: true }),
      async (argv) => {
        const { endpoint, secret } = await withConnections(argv, ({ pool }, config) =>
          rotateSecret(pool, argv.id, config.eventsRotationOverlapSeconds),
        );
        if (argv.json) console.log(JSON.stringify({ ...endpoint, secret }));
        else
          console.log(
            `${printed(endpoint)}: new secret (the old one signs too until ${endpoint.previousUntil}):\n${secret}`,
          );
      },
    )
    .demandCommand(1);

/** --since as an ISO 8601 time. */
function since(raw: string | undefined): Date | undefined {
  if (raw === undefined) return undefined;
  const at = new Date(raw);
  if (Number.isNaN(at.getTime())) throw new HttpError('bad_request', `--since takes an ISO 8601 time, got "${raw}".`);
  return at;
}

function printEvents(list: EventSummary[]): void {
  if (list.length === 0) {
    console.log('no events');
    return;
  }
  printTable([
    ['sequence', 'type', 'sale', 'order', 'at', 'delivered', 'pending', 'failed'],
    ...list.map((e) => [
      String(e.sequence),
      e.type,
      e.saleId,
      e.orderId ?? '-',
      e.createdAt,
      String(e.delivered),
      String(e.pending),
      String(e.failed),
    ]),
  ]);
}

const inspect = (y: Argv) =>
  y
    .command(
      'list',
      'the newest events, with their deliveries by status',
      (l) =>
        l
          .option('sale', { type: 'string' })
          .option('since', { type: 'string', describe: 'ISO 8601 time' })
          .option('limit', { type: 'number', default: 50 }),
      async (argv) => {
        const list = await withConnections(argv, ({ pool }) =>
          listEvents(pool, { saleId: argv.sale, since: since(argv.since) }, argv.limit),
        );
        if (argv.json) console.log(JSON.stringify(list));
        else printEvents(list);
      },
    )
    .command(
      'show <sequence>',
      'one event as receivers get it, and every attempt to deliver it',
      (s) => s.positional('sequence', { type: 'number', demandOption: true }),
      async (argv) => {
        const shown = await withConnections(argv, ({ pool }) => showEvent(pool, argv.sequence));
        if (argv.json) console.log(JSON.stringify(shown));
        else {
          console.log(JSON.stringify(shown.body, null, 2));
          if (shown.attempts.length === 0) console.log('no attempts yet');
          else
            printTable([
              ['endpoint', 'attempt', 'at', 'status', 'ms', 'error'],
              ...shown.attempts.map((a) => [
                a.endpointId,
                String(a.attempt),
                a.at,
                a.status === null ? '-' : String(a.status),
                String(a.latencyMs),
                a.error ?? '',
              ]),
            ]);
        }
      },
    )
    .command(
      'replay',
      'send events again: those since --since (of --sale), to --endpoint or every endpoint they are for',
      (r) =>
        r
          .option('since', { type: 'string', demandOption: true, describe: 'ISO 8601 time' })
          .option('sale', { type: 'string' })
          .option('endpoint', { type: 'string' }),
      async (argv) => {
        const n = await withConnections(argv, ({ pool }) =>
          replayEvents(pool, { since: since(argv.since), saleId: argv.sale, endpointId: argv.endpoint }),
        );
        console.log(argv.json ? JSON.stringify({ due: n }) : `${n} deliveries due again`);
      },
    );

export const events = (y: Argv) =>
  y.command(
    'events',
    "deliver outbound events to the shop's endpoints (a daemon; several may run)",
    (c) =>
      inspect(
        serverFlags(c)
          .option('json', { type: 'boolean' })
          .command(
            'endpoint',
            "the shop's receivers of events",
            (e) => endpoint(e),
            () => {},
          ),
      ),
    (argv) => serve(argv, startEvents),
  );
