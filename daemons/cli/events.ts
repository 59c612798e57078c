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

export const events = (y: Argv) =>
  y.command(
    'events',
    "deliver outbound events to the shop's endpoints (a daemon; several may run)",
    (c) =>
      serverFlags(c)
        .option('json', { type: 'boolean' })
        .command(
          'endpoint',
          "the shop's receivers of events",
          (e) => endpoint(e),
          () => {},
        ),
    (argv) => serve(argv, startEvents),
  );
