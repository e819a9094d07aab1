import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { looksBinary } from "../../protocol/binary.js";
import {
  Language,
  MAX_FILE_BYTES,
  MAX_PATH_TERMS,
  MAX_STAGED_PARTS,
  SYNC_PROTOCOL,
  type ChunkUpload,
  type Upsert,
} from "../../protocol/sync.js";
import { chunkFile } from "../index/chunker.js";
import { languageOf } from "../index/languages.js";
import { findSecrets, redact } from "../index/secrets.js";
import type { WorkspaceSecret } from "./secret.js";

export interface PreparedUpload {
  upsert: Upsert & { chunks: ChunkUpload[]; language: Language; pathTerms: number[] };
  /** Secrets found and removed before upload: counted, never shown. */
  withheld: number;
  /** The upsert's size in the request body, as JSON. */
  bytes: number;
}

/**
 * The chunks a commit may carry: the edge refuses a chunk without text (a file of one blank line
 * makes one; it has nothing to search) and the same chunk twice in a file (a long line of one
 * repeated character is cut into identical pieces).
 */
export function uploadable<C extends { text: string; startLine: number; endLine: number }>(chunks: readonly C[]): C[] {
  const seen = new Set<string>();
  return chunks.filter((chunk) => {
    const key = `${chunk.startLine} ${chunk.endLine} ${chunk.text}`;
    if (chunk.text.length === 0 || seen.has(key)) return false;
    seen.add(key);
    return true;
  });
}

/**
 * What leaves the device for one changed file: its leaf, and its chunks with every secret already
 * replaced and keyed ids. The file is read now; if it changed since the scan, the leaf describes what
 * was actually read (and the sync's final root comparison catches the difference).
 */
export async function prepareUpload(
  root: string,
  secret: WorkspaceSecret,
  entry: { path: string; hash: string; size: number; plain: string },
): Promise<PreparedUpload> {
  let content: Buffer | undefined;
  try {
    content = await readFile(join(root, entry.plain));
  } catch {
    content = undefined;
  }
  if (content === undefined || content.length > MAX_FILE_BYTES) {
    // Gone since the scan, or grown past what a commit can describe: an empty leaf now, which the
    // next scan deletes or skips as too large.
    const upsert = {
      path: entry.path,
      hash: entry.hash,
      size: Math.min(entry.size, MAX_FILE_BYTES),
      language: "text" as const,
      pathTerms: [],
      chunks: [],
    };
    return { upsert, withheld: 0, bytes: jsonBytes(upsert) };
  }
  const hash = secret.contentHash(content);
  const binary = looksBinary(content);
  const text = binary ? "" : content.toString("utf8");
  const secrets = text ? await findSecrets(entry.plain, text) : [];
  const chunks = uploadable(await chunkFile(entry.plain, redact(text, secrets))).map((chunk) => ({
    id: secret.chunkId(chunk.text),
    text: chunk.text,
    startLine: chunk.startLine,
    endLine: chunk.endLine,
  }));
  const language: Language = Language.safeParse(languageOf(entry.plain)).data ?? "text";
  const upsert = {
    path: entry.path,
    hash,
    size: content.length,
    language,
    pathTerms: secret.pathTerms.query(entry.plain).slice(0, MAX_PATH_TERMS),
    chunks,
  };
  return { upsert, withheld: secrets.length, bytes: jsonBytes(upsert) };
}

/**
 * Exact, not estimated: JSON escapes a newline or a quote as two bytes and a control character as
 * six, so a file of short lines takes half as much again in a body as on disk.
 */
const jsonBytes = (value: unknown) => Buffer.byteLength(JSON.stringify(value), "utf8");

/**
 * A file whose chunks do not fit one body with it, cut into parts that each fit `maxBytes`: every
 * part but the last is staged ahead of the commit (`tree/stage`), and the last travels in the
 * commit's upsert, which names how many were staged. Null when a single chunk is too large for any
 * body this small.
 */
export function splitUpload(
  prepared: PreparedUpload,
  maxBytes: number,
): { staged: ChunkUpload[][]; final: PreparedUpload } | null {
  const { chunks, ...file } = prepared.upsert;
  // The larger of the two envelopes a part travels in: a stage request, or the commit's upsert.
  const envelope = Math.max(
    jsonBytes({
      protocol: SYNC_PROTOCOL,
      path: file.path,
      hash: file.hash,
      part: MAX_STAGED_PARTS,
      language: file.language,
      pathTerms: file.pathTerms,
      chunks: [],
    }),
    jsonBytes({ ...file, chunks: [], stagedParts: MAX_STAGED_PARTS }),
  );
  const parts: ChunkUpload[][] = [[]];
  let bytes = envelope;
  for (const chunk of chunks) {
    const size = jsonBytes(chunk) + 1;
    if (envelope + size > maxBytes) return null;
    if (bytes + size > maxBytes) {
      parts.push([]);
      bytes = envelope;
    }
    parts.at(-1)!.push(chunk);
    bytes += size;
  }
  if (parts.length - 1 > MAX_STAGED_PARTS) return null;
  const last = parts.pop()!;
  const upsert = { ...file, chunks: last, stagedParts: parts.length };
  return { staged: parts, final: { upsert, withheld: prepared.withheld, bytes: jsonBytes(upsert) } };
}

/**
 * The upload without its chunks: the file is in the tree (so the tree converges) but has nothing
 * to search. For a file with a chunk no request body can hold.
 */
export function withoutChunks(prepared: PreparedUpload): PreparedUpload {
  const upsert = { ...prepared.upsert, chunks: [] };
  return { upsert, withheld: 0, bytes: jsonBytes(upsert) };
}
