/**
 * A prebuilt edge, the directory `SEXTANT_PREBUILT_EDGE` names (read by `scripts/edge.ts` and
 * `scripts/start.ts`): the Worker's deploy bundle (`worker/`, what `wrangler deploy --dry-run`
 * writes), wrangler's Miniflare options for it (`worker-options.json`, without this machine's
 * secrets: each edge reads its own `.dev.vars`) and D1 state with the migrations applied (`state/`).
 * An edge started from it neither bundles nor migrates. `npm test` builds one for its run, so that
 * every local edge the tests start runs the same bundle; `bench/device/prepare.ts` ships one to a
 * machine without wrangler.
 */
import { spawnSync } from "node:child_process";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { CURRENT_WORKER } from "./edge.js";

export async function prebuildEdge(out: string, root = process.cwd()): Promise<void> {
  mkdirSync(out, { recursive: true });
  const env = { ...process.env, WRANGLER_SEND_METRICS: "false", CI: "true" };
  const wrangler = (args: string[]) => {
    const r = spawnSync("npx", ["wrangler", ...args], {
      cwd: root,
      stdio: ["ignore", "pipe", "pipe"],
      env,
      encoding: "utf8",
    });
    if (r.status !== 0) throw new Error(`wrangler ${args.join(" ")} exited ${r.status}:\n${r.stderr}${r.stdout}`);
  };
  wrangler(["deploy", "--dry-run", "--outdir", join(out, "worker")]);
  const { unstable_getMiniflareWorkerOptions } = await import("wrangler");
  const { workerOptions } = unstable_getMiniflareWorkerOptions(join(root, "wrangler.toml"));
  // Secrets from this machine's .dev.vars stay out: the edge reads its own when it starts.
  const bindings = { ...(workerOptions.bindings as Record<string, unknown>) };
  delete bindings.ADMIN_SECRET;
  // A service binding to this Worker names it with Miniflare's kCurrentWorker symbol, which JSON cannot
  // hold: it is written as CURRENT_WORKER (scripts/edge.ts puts the symbol back).
  const json = JSON.stringify({ ...workerOptions, bindings }, (_key, value: unknown) =>
    typeof value === "symbol" ? (value.description === "miniflare.kCurrentWorker" ? CURRENT_WORKER : undefined) : value,
  );
  writeFileSync(join(out, "worker-options.json"), json);
  wrangler(["d1", "migrations", "apply", "DB", "--local", "--persist-to", join(out, "state")]);
}
