/**
 * The two halves of a search that need the workspace secret, around the edge's answer: the request
 * (its scope encrypted) and the hits (paths decrypted, lines read, chunk ids checked). `sextant
 * search` and `sextant mcp` run them on the user's machine; a cloud agent's sandbox host runs them on
 * the task's copy of the tree. Nothing here reads a disk or calls the edge.
 */
import { SYNC_PROTOCOL, type Language, type SearchRequest, type SearchResponse } from "../../protocol/sync.js";
import type { TranslatedWord } from "../../protocol/embedder/translation.js";
import { collapseCopies, type Copy } from "./collapse.js";
import type { WorkspaceSecret } from "./secret.js";
import { questionTranslations } from "../sdk/node.js";
import { capSnippet, focusLine } from "./snippet.js";

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
 * The edge's search request for `query`: the scope's directory encrypted, more results asked for
 * than the page when copies are to be collapsed into one hit, and the question's words translated to
 * code terms (client/sdk/node.ts).
 */
export function searchRequest(
  secret: WorkspaceSecret,
  query: string,
  options: Omit<SearchOptions, "signal"> = {},
): SearchRequest & { topK: number } {
  const within = options.within?.replace(/^\.?\/+|\/+$/g, "");
  const topK = options.topK ?? 10;
  return {
    protocol: SYNC_PROTOCOL,
    query,
    // Copies collapse into one hit, so ask for more than the page to fill it.
    topK: (options.collapse ?? true) ? Math.min(MAX_EDGE_TOP_K, Math.max(2 * topK, topK + 10)) : topK,
    ...(within ? { pathPrefix: secret.encryptPath(within) } : {}),
    ...(options.language ? { language: options.language } : {}),
    ...withTranslations(query),
  };
}

function withTranslations(query: string): { translations?: TranslatedWord[] } {
  const translations = questionTranslations(query);
  return translations ? { translations } : {};
}

/** A file as a search reads it: the text the index saw (secrets removed) and the file as it is. */
export interface HitFile {
  /** What was indexed: the file with its secrets replaced. */
  text: string;
  /** What the user is shown: the file itself (the same as `text` where the file was stored redacted). */
  raw: string;
}

export interface ResolveOptions {
  topK?: number;
  collapse?: boolean;
  /** The file at a workspace path, or null when it is gone or unreadable. */
  read: (path: string) => Promise<HitFile | null>;
  /**
   * The file cut into chunks as the index cut it; without it a chunk that is not whole lines (a
   * line longer than a chunk, cut into pieces) is reported stale.
   */
  rechunk?: (path: string, text: string) => Promise<{ startLine: number; endLine: number; text: string }[]>;
}

/**
 * Does everything with the edge's answer that needs the secret: decrypts paths, reads the lines, and
 * checks each chunk's keyed id against the file as it is now. Hits under another secret are dropped.
 */
export async function resolveHits(
  secret: WorkspaceSecret,
  answer: SearchResponse,
  query: string,
  options: ResolveOptions,
): Promise<LocalHit[]> {
  const topK = options.topK ?? 10;
  const collapse = options.collapse ?? true;
  const files = new Map<
    string,
    { text: string; lines: string[]; raw: string[]; chunks?: Map<string, string> } | null
  >();
  const read: (Omit<LocalHit, "snippet" | "snippetLine" | "copies"> & { chunkId: string; text: string })[] = [];
  for (const hit of answer.results) {
    let path: string;
    try {
      path = secret.decryptPath(hit.path);
    } catch {
      continue; // Not ours: indexed under another secret.
    }
    if (!files.has(path)) {
      const file = await options.read(path);
      files.set(path, file && { text: file.text, lines: file.text.split("\n"), raw: file.raw.split("\n") });
    }
    const file = files.get(path);
    let text = file ? file.lines.slice(hit.startLine - 1, hit.endLine).join("\n") : "";
    let fresh = file !== null && file !== undefined && secret.chunkId(text) === hit.chunkId;
    // The id is checked on what was uploaded (secrets removed); the user is shown their own file as it
    // is. Redaction keeps lines where they are, so whole lines map back to the file's own.
    const shown = file && fresh ? file.raw.slice(hit.startLine - 1, hit.endLine).join("\n") : undefined;
    if (file && !fresh && options.rechunk) {
      // A chunk is not always whole lines (the chunker cuts a line longer than a chunk into pieces):
      // chunk the file again as the index did, and look for this chunk's id among its chunks.
      file.chunks ??= new Map(
        (await options.rechunk(path, file.text)).map((c) => [
          `${c.startLine}:${c.endLine}:${secret.chunkId(c.text)}`,
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
  return grouped.slice(0, topK).map(({ chunkId: _, text, ...hit }): LocalHit => {
    const focus = focusLine(text, query);
    return {
      ...hit,
      snippet: capSnippet(text.split("\n").slice(focus).join("\n")),
      snippetLine: hit.startLine + focus,
    };
  });
}
