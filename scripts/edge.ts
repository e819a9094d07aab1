/**
 * The local edge without `wrangler dev`: the Worker bundle that `wrangler deploy` would upload, run
 * by Miniflare (the same workerd, D1, R2 and SQLite-backed Durable Objects that `wrangler dev`
 * runs) with the bindings `wrangler.toml` and `.dev.vars` declare, and state in wrangler's local
 * layout, so `wrangler d1 migrations apply --local --persist-to` and `wrangler dev` see the same
 * data. What it leaves out is `wrangler dev`'s own machinery: the proxy worker every request crosses,
 * the inspector that reports every chunk to Node, and reload on save (`npm run dev` keeps those). The
 * state is its user's alone (`private-state.ts`).
 */
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { kCurrentWorker, Log, LogLevel, Miniflare, type MiniflareOptions } from "miniflare";
import { makePrivate, withPrivateUmask } from "./private-state.js";

export interface EdgeOptions {
  host: string;
  port: number;
  /** wrangler's `--persist-to`: state lives under `<persistTo>/v3`, as `wrangler dev` keeps it. */
  persistTo: string;
  /** Replace or add `[vars]` entries (and `.dev.vars` secrets). */
  vars?: Record<string, string>;
  /**
   * A line per request on the console. Off by default: Miniflare sends each line to Node as an
   * HTTP request of its own, which costs every request more than the gateway's own work.
   */
  logRequests?: boolean;
  env?: NodeJS.ProcessEnv;
}

/**
 * `SEXTANT_INSPECTOR_PORT`: the edge's V8 inspector listens on this port (127.0.0.1), for a CPU
 * profile of the Worker (`bench/gateway-profile.ts`) or a debugger. Off by default: an inspector
 * costs every request.
 */
const inspectorPort = (env: NodeJS.ProcessEnv): number | undefined => {
  const port = Number(env.SEXTANT_INSPECTOR_PORT);
  return Number.isInteger(port) && port > 0 && port < 65536 ? port : undefined;
};

export interface Edge {
  url: URL;
  dispose(): Promise<void>;
}

/** `wrangler deploy --dry-run`: the exact bundle a deployment uploads, into a fresh directory. */
function bundle(env: NodeJS.ProcessEnv): { dir: string; script: string; cleanup(): void } {
  const outdir = mkdtempSync(join(tmpdir(), "sextant-edge-"));
  const result = spawnSync("npx", ["wrangler", "deploy", "--dry-run", "--outdir", outdir], {
    stdio: ["ignore", "ignore", "pipe"],
    encoding: "utf8",
    env,
  });
  if (result.status !== 0) throw new Error(`Bundling the Worker failed:\n${result.stderr}`);
  return {
    dir: outdir,
    script: join(outdir, "index.js"),
    cleanup: () => rmSync(outdir, { recursive: true, force: true }),
  };
}

/**
 * Serves one Worker the way the local edge is served: on its own socket (rather than through
 * Miniflare's entry worker, one hop less for every request), with outbound requests going straight
 * out. What the entry worker would add is `request.cf` (the gateway then routes from its default
 * location) and `CF-Connecting-IP` (so limits per network do not apply to local traffic). A
 * client's disconnect is noticed at the Worker's next write either way.
 */
export async function serveWorker(
  worker: MiniflareOptions,
  options: { host: string; port: number; logRequests?: boolean; onDispose?: () => void; inspectorPort?: number },
): Promise<Edge> {
  const mf = new Miniflare({
    ...worker,
    ...(options.inspectorPort ? { inspectorPort: options.inspectorPort } : {}),
    host: "127.0.0.1",
    port: 0,
    unsafeDirectSockets: [{ host: options.host, port: options.port }],
    // Nothing on the Worker's own socket carries `request.cf`: no need to fetch Cloudflare's sample.
    cf: false,
    // Not through a worker that strips `CF-Connecting-IP`: the Workers served here build every
    // upstream request's headers themselves and forward none of the client's.
    stripCfConnectingIp: false,
    log: new Log(LogLevel.INFO),
    logRequests: options.logRequests ?? false,
  } as MiniflareOptions);
  const dispose = async () => {
    await mf.dispose().catch(() => {});
    options.onDispose?.();
  };
  try {
    await mf.ready;
  } catch (err) {
    await dispose();
    throw err;
  }
  return { url: new URL(`http://${options.host}:${options.port}`), dispose };
}

/** How a prebuilt edge's options name this Worker (Miniflare's `kCurrentWorker`, a symbol JSON cannot hold). */
export const CURRENT_WORKER = "miniflare:current-worker";

/**
 * `SEXTANT_PREBUILT_EDGE`: a directory made by `bench/device/prepare.ts` on a machine with the
 * toolchain, holding the deploy bundle (`worker/`) and wrangler's Miniflare options for it
 * (`worker-options.json`), so the edge runs where only Node and workerd are (no wrangler, no npm).
 */
async function workerFor(env: NodeJS.ProcessEnv): Promise<{
  dir: string;
  script: string;
  cleanup(): void;
  workerOptions: Record<string, unknown> & { bindings?: Record<string, unknown> };
}> {
  const prebuilt = env.SEXTANT_PREBUILT_EDGE;
  if (prebuilt) {
    const dir = join(prebuilt, "worker");
    const workerOptions = JSON.parse(readFileSync(join(prebuilt, "worker-options.json"), "utf8"), (_key, value) =>
      value === CURRENT_WORKER ? kCurrentWorker : value,
    );
    // `.dev.vars` as wrangler reads it: KEY=value lines, the value optionally quoted.
    let devVars = "";
    try {
      devVars = readFileSync(".dev.vars", "utf8");
    } catch {
      // None.
    }
    for (const [, key, value] of devVars.matchAll(/^\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"?(.*?)"?\s*$/gm))
      workerOptions.bindings = { ...workerOptions.bindings, [key!]: value };
    return { dir, script: join(dir, "index.js"), cleanup: () => {}, workerOptions };
  }
  const { unstable_getMiniflareWorkerOptions } = await import("wrangler");
  const { workerOptions } = unstable_getMiniflareWorkerOptions("wrangler.toml");
  return { ...bundle(env), workerOptions: workerOptions as never };
}

export async function startEdge(options: EdgeOptions): Promise<Edge> {
  const env = options.env ?? process.env;
  const { dir, script, cleanup, workerOptions } = await workerFor(env);
  const state = join(options.persistTo, "v3");
  makePrivate(options.persistTo);
  return withPrivateUmask(() =>
    serveWorker(
      {
        ...workerOptions,
        name: "sextant",
        modules: true,
        scriptPath: script,
        modulesRoot: dir,
        bindings: { ...workerOptions.bindings, ...options.vars },
        d1Persist: join(state, "d1"),
        r2Persist: join(state, "r2"),
        durableObjectsPersist: join(state, "do"),
        kvPersist: join(state, "kv"),
        cachePersist: join(state, "cache"),
      } as MiniflareOptions,
      {
        host: options.host,
        port: options.port,
        logRequests: options.logRequests,
        onDispose: cleanup,
        inspectorPort: inspectorPort(env),
      },
    ),
  );
}
