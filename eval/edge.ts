import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { LocalEdge as LocalEdgeFile, localEdgePath, readJsonFile } from "../client/cli/credentials.js";
import { Sextant } from "../client/sdk/client.js";
import { searchWorkspace } from "../client/workspace/search.js";
import { indexWorkspace, openWorkspace, type IndexReport, type OpenWorkspace } from "../client/workspace/session.js";
import { loadState } from "../client/workspace/state.js";
import { prepareUpload } from "../client/workspace/upload.js";
import { startLocalEdge, type LocalEdge } from "../test/support/local-edge.js";
import type { Ranked, ScoredResult } from "./metrics.js";

export interface EdgeSession {
  edge: LocalEdge;
  sextant: Sextant;
  stop: () => Promise<void>;
}

/**
 * `npm start`'s local edge on a free port with its own state, and this process's client pointed at
 * it through private config and cache directories, so a run touches none of the user's workspaces.
 */
export async function startEdge(): Promise<EdgeSession> {
  const edge = await startLocalEdge();
  const cacheDir = mkdtempSync(join(tmpdir(), "sextant-eval-cache-"));
  process.env.SEXTANT_CONFIG_DIR = edge.configDir;
  process.env.SEXTANT_CACHE_DIR = cacheDir;
  const local = await readJsonFile(localEdgePath(), LocalEdgeFile);
  if (!local) throw new Error(`The local edge wrote no usable local-edge.json in ${edge.configDir}`);
  const sextant = new Sextant({ apiKey: local.apiKey, baseURL: edge.baseURL, timeout: 600_000 });
  const stop = async () => {
    await edge.stop();
    for (const dir of [edge.configDir, edge.persistTo, cacheDir]) rmSync(dir, { recursive: true, force: true });
  };
  return { edge, sextant, stop };
}

/** What `sextant index <root>` does: create the workspace on first use, scan, sync until converged. */
export async function indexDirectory(
  sextant: Sextant,
  root: string,
): Promise<{ ws: OpenWorkspace; report: IndexReport }> {
  const ws = await openWorkspace(sextant, root, { create: true });
  const report = await indexWorkspace(sextant, ws);
  if (!report.sync.converged) throw new Error(`${root}: the sync did not converge`);
  return { ws, report };
}

export interface IndexedChunk extends Ranked {
  text: string;
}

/**
 * The chunks the edge received for a workspace, rebuilt on the device by the code that sent them
 * (`prepareUpload`: chunking, secrets removed), for every file the last sync confirmed.
 */
export async function indexedChunks(ws: OpenWorkspace): Promise<IndexedChunk[]> {
  const state = await loadState(ws.stateKey);
  const chunks: IndexedChunk[] = [];
  for (const [path, entry] of state.synced) {
    const { upsert } = await prepareUpload(ws.entry.root, ws.secret, {
      path,
      hash: entry.hash,
      size: entry.size,
      plain: path,
    });
    for (const chunk of upsert.chunks)
      chunks.push({ path, startLine: chunk.startLine, endLine: chunk.endLine, text: chunk.text });
  }
  return chunks;
}

/** Sextant's answer to a query: the real paths and line ranges the client decrypted. */
export async function searchSextant(
  sextant: Sextant,
  ws: OpenWorkspace,
  query: string,
  topK: number,
): Promise<ScoredResult[]> {
  // The ranking as the edge made it: the eval scores retrieval, and its recorded figures predate collapsing.
  const { hits } = await searchWorkspace(sextant, ws, query, { topK, collapse: false });
  return hits.map(({ path, startLine, endLine, score }) => ({ path, startLine, endLine, score }));
}
