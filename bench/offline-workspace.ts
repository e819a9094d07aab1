import type { OpenWorkspace } from "../client/workspace/session.js";
import { WorkspaceSecret } from "../client/workspace/secret.js";

/** A workspace opened on the device only, with a fresh secret: for benchmarks that send nothing. */
export function offlineWorkspace(root: string): OpenWorkspace {
  const secret = WorkspaceSecret.generate();
  return {
    entry: { root, baseURL: "bench", workspaceId: "ws_bench", secret: secret.toString() },
    secret,
    created: false,
    stateKey: { root, workspaceId: "ws_bench", fingerprint: secret.fingerprint },
  };
}
