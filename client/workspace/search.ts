import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { SYNC_PROTOCOL, type Language } from "../../protocol/sync.js";
import { findSecrets, redact } from "../index/secrets.js";
import type { Sextant } from "../sdk/client.js";
import type { OpenWorkspace } from "./session.js";

export interface LocalHit {
  /** The real, workspace-relative path. */
  path: string;
  startLine: number;
  endLine: number;
  score: number;
  /** The lines as they are on disk now (secrets removed, as they were when indexed). */
  snippet: string;
  /** The file changed since the chunk was indexed: the lines may no longer be what matched. */
  stale: boolean;
}

export interface SearchOptions {
  topK?: number;
  /** A workspace-relative directory to search within. */
  within?: string;
  /** Only chunks of files in this language. */
  language?: Language;
  signal?: AbortSignal;
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
  const within = options.within?.replace(/^\.?\/+|\/+$/g, "");
  const answer = await sextant.workspaces.search(
    ws.entry.workspaceId,
    {
      protocol: SYNC_PROTOCOL,
      query,
      topK: options.topK ?? 10,
      ...(within ? { pathPrefix: ws.secret.encryptPath(within) } : {}),
      ...(options.language ? { language: options.language } : {}),
    },
    { vectorKey: ws.secret.vectorKey, ...(options.signal ? { signal: options.signal } : {}) },
  );
  const files = new Map<string, string[] | null>();
  const hits: LocalHit[] = [];
  for (const hit of answer.results) {
    let path: string;
    try {
      path = ws.secret.decryptPath(hit.path);
    } catch {
      continue; // Not ours: indexed under another secret.
    }
    if (!files.has(path)) {
      try {
        const text = await readFile(join(ws.entry.root, path), "utf8");
        files.set(path, redact(text, await findSecrets(path, text)).split("\n"));
      } catch {
        files.set(path, null);
      }
    }
    const lines = files.get(path);
    const snippet = lines ? lines.slice(hit.startLine - 1, hit.endLine).join("\n") : "";
    hits.push({
      path,
      startLine: hit.startLine,
      endLine: hit.endLine,
      score: hit.score,
      snippet,
      stale: !lines || ws.secret.chunkId(snippet) !== hit.chunkId,
    });
  }
  return { root: answer.root, hits };
}
