// A private network namespace for a scenario (`unshare --net`, its own loopback), and the network
// faults made inside it with iptables: partitions (DROP, so connections hang rather than reset)
// and random loss. Nothing here ever touches the host's own firewall: every rule goes through
// `iptables()`, which refuses to run outside a namespace `runInPrivateNetns` made.
import { execFile, spawn } from 'node:child_process';
import { readlinkSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { promisify } from 'node:util';

const run = promisify(execFile);

/** The namespace the launcher ran in, handed down so the child can tell it is somewhere else. */
const OUTSIDE = 'FLASHSALE_NETNS_OUTSIDE';

const netnsOf = (pid: number | 'self' = 'self') => readlinkSync(`/proc/${pid}/ns/net`);

/** Whether this process runs in a namespace `runInPrivateNetns` made (and not in the one it was started from). */
export function inPrivateNetns(): boolean {
  const outside = process.env[OUTSIDE];
  return outside !== undefined && outside !== netnsOf() && netnsOf() !== initNetns();
}

/** The namespace of pid 1 (the host's, outside a container), where readable. */
function initNetns(): string | undefined {
  try {
    return netnsOf(1);
  } catch {
    return undefined; // unreadable here (a container): the launcher's namespace is the check
  }
}

/**
 * Runs `node <args>` in a new network namespace whose loopback is brought up first; each line it
 * prints goes to `onLine`. The namespace goes when its last process does. Resolves with the exit code.
 */
export function runInPrivateNetns(
  args: string[],
  env: NodeJS.ProcessEnv,
  onLine: (line: string) => void,
): Promise<number> {
  const child = spawn(
    'unshare',
    ['--net', '--', 'sh', '-c', 'ip link set lo up && exec "$@"', 'sh', process.execPath, ...args],
    {
      env: { ...env, [OUTSIDE]: netnsOf() },
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  for (const stream of [child.stdout, child.stderr]) createInterface({ input: stream }).on('line', onLine);
  return new Promise((resolve) => {
    child.once('error', (err) => {
      onLine(`unshare: ${err.message}`);
      resolve(-1);
    });
    child.once('exit', (code, signal) => resolve(code ?? (signal ? 128 : -1)));
  });
}

/** iptables in this process's private namespace; refused anywhere else. */
async function iptables(args: string[]): Promise<string> {
  if (!inPrivateNetns())
    throw new Error(
      "iptables refused: not inside a namespace runInPrivateNetns made (the host's firewall is never touched)",
    );
  return (await run('iptables', ['-w', ...args])).stdout;
}

/** Both directions of TCP on a local port: to it (--dport) and from it (--sport). */
const bothWays = (port: number, match: string[]) => [
  ['OUTPUT', '-p', 'tcp', '--dport', String(port), ...match, '-j', 'DROP'],
  ['OUTPUT', '-p', 'tcp', '--sport', String(port), ...match, '-j', 'DROP'],
];

/** The faults in force, each removable by itself; `healAll` removes what is left. */
export class NetFaults {
  private readonly rules = new Set<string[]>();

  /** Every packet to and from `port` dropped: its connections hang, new ones never connect. Returns the heal. */
  partition(port: number): Promise<() => Promise<void>> {
    return this.add(bothWays(port, []));
  }

  /** A `probability` (0.01 = 1%) of the packets to and from `port` dropped at random. Returns the heal. */
  loss(port: number, probability: number): Promise<() => Promise<void>> {
    return this.add(bothWays(port, ['-m', 'statistic', '--mode', 'random', '--probability', String(probability)]));
  }

  async healAll(): Promise<void> {
    for (const rule of [...this.rules]) await this.remove(rule);
  }

  /** The namespace's rules as iptables lists them, for a log. */
  list(): Promise<string> {
    return iptables(['-S', 'OUTPUT']);
  }

  private async add(rules: string[][]): Promise<() => Promise<void>> {
    for (const rule of rules) {
      await iptables(['-A', ...rule]);
      this.rules.add(rule);
    }
    return async () => {
      for (const rule of rules) await this.remove(rule);
    };
  }

  private async remove(rule: string[]): Promise<void> {
    if (!this.rules.delete(rule)) return;
    await iptables(['-D', ...rule]);
  }
}
