/**
 * The local edge's state (D1, R2 and the Durable Objects' SQLite: API key hashes, org and user ids,
 * indexed code) is for the user who runs it. Its directory is 0700, whatever made it (wrangler's
 * migrations, a copied prebuilt state, an older `npm start` that left it world-readable), and what
 * the edge writes there is created under umask 077: workerd and wrangler inherit the umask of the
 * process that starts them.
 */
import { chmodSync, lstatSync, mkdirSync, readdirSync } from "node:fs";
import { join } from "node:path";

/**
 * Makes the state under `persistTo` (wrangler's layout: all of it in `v3`) 0700, taking group and
 * other permissions off everything in it, and creates `persistTo` 0700 if it is new. An existing
 * `persistTo` keeps its mode: `--persist-to` may name a directory that holds other things.
 */
export function makePrivate(persistTo: string): void {
  mkdirSync(persistTo, { recursive: true, mode: 0o700 });
  const state = join(persistTo, "v3");
  mkdirSync(state, { recursive: true, mode: 0o700 });
  const uid = process.getuid?.();
  const restrict = (path: string) => {
    const { mode, uid: owner } = lstatSync(path);
    // What another user owns is theirs to keep (and chmod would fail on it).
    if (mode & 0o077 && (uid === undefined || owner === uid)) chmodSync(path, mode & 0o7700);
  };
  const walk = (at: string) => {
    for (const entry of readdirSync(at, { withFileTypes: true })) {
      const path = join(at, entry.name);
      // A link's own mode means nothing, and its target may be anywhere.
      if (entry.isSymbolicLink()) continue;
      restrict(path);
      if (entry.isDirectory()) walk(path);
    }
  };
  restrict(state);
  walk(state);
}

/**
 * Runs `start` with the process's umask at 077, so that the processes it spawns (workerd, wrangler)
 * create files only their user can read, then puts the umask back: the sandbox host in this process
 * makes directories that a sandbox's own user must be able to enter.
 */
export async function withPrivateUmask<T>(start: () => T | Promise<T>): Promise<T> {
  const previous = process.umask(0o077);
  try {
    return await start();
  } finally {
    process.umask(previous);
  }
}
