/**
 * The sandbox host `npm start` runs for agent tasks when no `SANDBOX_URL` is given: in this process,
 * on a free loopback port, with a token made for this run, and bubblewrap where it can run (the
 * `direct` driver, without namespaces, where it cannot, said on the console). Sandboxes live under
 * the edge's state directory and go with the process.
 */
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { bubblewrapWorks } from "../sandboxes/drivers.js";
import { startSandboxHost } from "../sandboxes/host.js";

export interface LocalSandboxHost {
  url: string;
  driver: "bubblewrap" | "direct";
  /** The edge's `--var`s that point it at this host. */
  vars: string[];
  stop(): Promise<void>;
}

export async function startLocalSandboxHost(): Promise<LocalSandboxHost> {
  // One directory per run, in the system's temporary directory (every directory above a sandbox's
  // tree must let the sandbox's own user through): sandboxes do not outlive the host that made them
  // (their keys were only ever in its memory), and another edge started from the same checkout keeps
  // its own.
  const token = randomBytes(32).toString("base64url");
  const root = mkdtempSync(join(tmpdir(), "sextant-sandboxes-"));
  const driver = bubblewrapWorks() ? "bubblewrap" : "direct";
  if (driver === "direct")
    console.warn("bubblewrap cannot run here: agent commands run without namespaces (install `bubblewrap`).");
  const host = await startSandboxHost({ host: "127.0.0.1", port: 0, token, root, driver });
  return {
    url: host.url,
    driver,
    vars: [`SANDBOX_URL:${host.url}`, `SANDBOX_TOKEN:${token}`],
    stop: async () => {
      await host.stop();
      rmSync(root, { recursive: true, force: true });
    },
  };
}
