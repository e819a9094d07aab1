import { readFile } from "node:fs/promises";
import { isAbsolute, join, relative, resolve, sep } from "node:path";
import { chunkFile } from "../index/chunker.js";
import { findSecrets, redact } from "../index/secrets.js";
import type { Sextant } from "../sdk/client.js";
import type { OpenWorkspace } from "./session.js";
import { resolveHits, searchRequest, type LocalHit, type SearchOptions } from "./hits.js";

export type { LocalHit, SearchOptions } from "./hits.js";

/** A search scope outside the workspace: nothing in the index could answer it. */
export class OutsideWorkspaceError extends Error {
  override name = "OutsideWorkspaceError";
}

/**
 * `path` (relative to `base`, or absolute) as the workspace-relative directory a search is scoped
 * to; `undefined` for the whole workspace. A path outside the root is an error, never a search that
 * silently finds nothing.
 */
export function scopeWithin(root: string, path: string | undefined, base = root): string | undefined {
  if (path === undefined) return undefined;
  const rel = relative(root, resolve(base, path));
  if (rel === "") return undefined;
  if (rel === ".." || rel.startsWith(`..${sep}`) || isAbsolute(rel))
    throw new OutsideWorkspaceError(`${path} is outside the workspace root ${root}.`);
  return rel.split(sep).join("/");
}

/**
 * Searches the edge, then does everything that needs the secret locally: decrypts paths, reads the
 * lines from disk, and checks each chunk's keyed id against the file as it is now.
 */
export async function searchWorkspace(
  sextant: Sextant,
  ws: OpenWorkspace,
  query: string,
  options: SearchOptions = {},
): Promise<{ root: string; hits: LocalHit[] }> {
  const answer = await sextant.workspaces.search(ws.entry.workspaceId, searchRequest(ws.secret, query, options), {
    vectorKey: ws.secret.vectorKey,
    ...(options.signal ? { signal: options.signal } : {}),
  });
  const hits = await resolveHits(ws.secret, answer, query, {
    ...options,
    read: async (path) => {
      try {
        const raw = await readFile(join(ws.entry.root, path), "utf8");
        return { text: redact(raw, await findSecrets(path, raw)), raw };
      } catch {
        return null;
      }
    },
    rechunk: async (path, text) => chunkFile(path, text),
  });
  return { root: answer.root, hits };
}
