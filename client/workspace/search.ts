import { readFile } from "node:fs/promises";
import { isAbsolute, join, relative, resolve, sep } from "node:path";
import { SYNC_PROTOCOL, type Language } from "../../protocol/sync.js";
import { chunkFile } from "../index/chunker.js";
import { findSecrets, redact } from "../index/secrets.js";
import type { Sextant } from "../sdk/client.js";
import type { OpenWorkspace } from "./session.js";
import { collapseCopies, type Copy } from "./collapse.js";
import { capSnippet, focusLine } from "./snippet.js";

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

export interface LocalHit {
  /** The real, workspace-relative path. */
  path: string;
  startLine: number;
  endLine: number;
  score: number;
  /**
   * The chunk as it is on disk now (secrets removed, as they were when indexed), at most 20 lines
   * and 2,000 characters, ending in a line of "…" when cut.
   */
  snippet: string;
  /**
   * The line the snippet starts at: the chunk's line that holds most of the query's words, else its
   * first definition, else startLine.
   */
  snippetLine: number;
  /** The file changed since the chunk was indexed: the lines may no longer be what matched. */
  stale: boolean;
  /** The same or nearly the same code elsewhere, collapsed into this hit (see collapseCopies). */
  copies: Copy[];
}

export interface SearchOptions {
  topK?: number;
  /** A workspace-relative directory to search within. */
  within?: string;
  /** Only chunks of files in this language. */
  language?: Language;
  signal?: AbortSignal;
  /** Collapse copies of the same code into one hit (default true); false returns the edge's ranking as is. */
  collapse?: boolean;
}

/** The edge's most results per search (SearchRequest's topK). */
const MAX_EDGE_TOP_K = 100;

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
  const topK = options.topK ?? 10;
  const collapse = options.collapse ?? true;
  const answer = await sextant.workspaces.search(
    ws.entry.workspaceId,
    {
      protocol: SYNC_PROTOCOL,
      query,
      // Copies collapse into one hit, so ask for more than the page to fill it.
      topK: collapse ? Math.min(MAX_EDGE_TOP_K, Math.max(2 * topK, topK + 10)) : topK,
      ...(within ? { pathPrefix: ws.secret.encryptPath(within) } : {}),
      ...(options.language ? { language: options.language } : {}),
    },
    { vectorKey: ws.secret.vectorKey, ...(options.signal ? { signal: options.signal } : {}) },
  );
  const files = new Map<
    string,
    { text: string; lines: string[]; raw: string[]; chunks?: Map<string, string> } | null
  >();
  const read: (Omit<LocalHit, "snippet" | "snippetLine" | "copies"> & { chunkId: string; text: string })[] = [];
  for (const hit of answer.results) {
    let path: string;
    try {
      path = ws.secret.decryptPath(hit.path);
    } catch {
      continue; // Not ours: indexed under another secret.
    }
    if (!files.has(path)) {
      try {
        const raw = await readFile(join(ws.entry.root, path), "utf8");
        const text = redact(raw, await findSecrets(path, raw));
        files.set(path, { text, lines: text.split("\n"), raw: raw.split("\n") });
      } catch {
        files.set(path, null);
      }
    }
    const file = files.get(path);
    let text = file ? file.lines.slice(hit.startLine - 1, hit.endLine).join("\n") : "";
    let fresh = file !== null && ws.secret.chunkId(text) === hit.chunkId;
    // The id is checked on what was uploaded (secrets removed); the user is shown their own file as it
    // is. Redaction keeps lines where they are, so whole lines map back to the file's own.
    const shown = file && fresh ? file.raw.slice(hit.startLine - 1, hit.endLine).join("\n") : undefined;
    if (file && !fresh) {
      // A chunk is not always whole lines (the chunker cuts a line longer than a chunk into pieces):
      // chunk the file again as the index did, and look for this chunk's id among its chunks.
      file.chunks ??= new Map(
        (await chunkFile(path, file.text)).map((c) => [
          `${c.startLine}:${c.endLine}:${ws.secret.chunkId(c.text)}`,
          c.text,
        ]),
      );
      const same = file.chunks.get(`${hit.startLine}:${hit.endLine}:${hit.chunkId}`);
      if (same !== undefined) [text, fresh] = [same, true];
    }
    read.push({
      path,
      startLine: hit.startLine,
      endLine: hit.endLine,
      score: hit.score,
      stale: !fresh,
      chunkId: hit.chunkId,
      text: shown ?? text,
    });
  }
  const grouped = collapse ? collapseCopies(read) : read.map((hit) => ({ ...hit, copies: [] }));
  const hits = grouped.slice(0, topK).map(({ chunkId: _, text, ...hit }): LocalHit => {
    const focus = focusLine(text, query);
    return {
      ...hit,
      snippet: capSnippet(text.split("\n").slice(focus).join("\n")),
      snippetLine: hit.startLine + focus,
    };
  });
  return { root: answer.root, hits };
}
