import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { LocalEdge as LocalEdgeFile, localEdgePath, readJsonFile } from "../client/cli/credentials.js";
import { Sextant } from "../client/sdk/client.js";
import { WorkspaceSecret } from "../client/workspace/secret.js";
import type { OpenWorkspace } from "../client/workspace/session.js";
import type { LocalEdge } from "../test/support/local-edge.js";

/**
 * A fresh workspace for `root` on a local edge started by `startLocalEdge`, with its own config and
 * cache directories, as the benchmarks that talk to the edge need it.
 */
export async function edgeWorkspace(
  edge: LocalEdge,
  root: string,
): Promise<{ apiKey: string; sextant: Sextant; ws: OpenWorkspace }> {
  process.env.SEXTANT_CONFIG_DIR = edge.configDir;
  process.env.SEXTANT_CACHE_DIR = mkdtempSync(join(tmpdir(), "sextant-bench-cache-"));
  const apiKey = (await readJsonFile(localEdgePath(), LocalEdgeFile))!.apiKey;
  const sextant = new Sextant({ apiKey, baseURL: edge.baseURL, timeout: 600_000 });
  const secret = WorkspaceSecret.generate();
  const workspace = await sextant.workspaces.create({ name: secret.encryptSegment("bench") });
  const ws: OpenWorkspace = {
    entry: { root, baseURL: edge.baseURL, workspaceId: workspace.id, secret: secret.toString() },
    secret,
    created: true,
    stateKey: { root, workspaceId: workspace.id, fingerprint: secret.fingerprint },
  };
  return { apiKey, sextant, ws };
}
