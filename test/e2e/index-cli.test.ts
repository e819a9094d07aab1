import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { makeTree, writeTree } from "../support/fixture.js";
import { savedLocalEdge, sextant, startLocalEdge, type LocalEdge } from "../support/local-edge.js";
import { scanDirectoryFor } from "../support/storage-scan.js";

const ROOT = new URL("../../", import.meta.url).pathname;

/** `sextant index`, `status`, `watch`, `workspace delete` and `key export|import`, as a user runs them. */
describe("workspace CLI end to end", () => {
  let edge: LocalEdge;
  let env: Record<string, string>;
  let cli: (args: string[]) => ReturnType<typeof sextant>;

  beforeAll(async () => {
    edge = await startLocalEdge();
    env = { SEXTANT_CONFIG_DIR: edge.configDir, SEXTANT_CACHE_DIR: mkdtempSync(join(tmpdir(), "sextant-cache-")) };
    cli = (args) => sextant(args, env);
  });
  afterAll(async () => {
    await edge?.stop();
  });

  it("indexes a directory, reports what changed, and keeps paths private", async () => {
    const dir = makeTree({
      ".gitignore": "dist/\n",
      "celestial/orbital-mechanics.ts": "export const apogee = 1;",
      "celestial/lib/helpers.py": "def perigee(): pass",
      "dist/bundle.js": "ignored",
      ".env": "TOKEN=do-not-upload",
    });
    const first = cli(["--json", "index", dir]);
    expect(first.code, first.stderr).toBe(0);
    const report = JSON.parse(first.stdout);
    expect(report).toMatchObject({ created: true, files: 3, sync: { added: 3, converged: true } });

    writeTree(dir, { "celestial/orbital-mechanics.ts": "export const apogee = 2;", "celestial/new-file.ts": "x" });
    rmSync(join(dir, "celestial/lib/helpers.py"));
    const status = JSON.parse(cli(["--json", "status", dir]).stdout);
    expect(status).toMatchObject({ inSync: false, pending: { added: 1, changed: 1, deleted: 1 } });

    const human = cli(["index", dir]);
    expect(human.stdout).toContain("+1 added, ~1 changed, -1 deleted; in sync");
    expect(JSON.parse(cli(["--json", "status", join(dir, "celestial")]).stdout).inSync).toBe(true);

    const names = [basename(dir), "orbital-mechanics", "helpers", "new-file", "celestial", "apogee", "do-not-upload"];
    expect(await scanDirectoryFor(edge.persistTo, names)).toEqual([]);
  });

  it("shares a workspace with a teammate's clone through key export and import", () => {
    const mine = makeTree({ "a.ts": "a", "b/c.ts": "c" });
    expect(cli(["index", mine]).code).toBe(0);
    const key = cli(["key", "export", mine]).stdout.trim();
    expect(key).toMatch(/^ws_[0-9a-z]+:sxs_/);

    const theirs = makeTree({ "a.ts": "a", "b/c.ts": "c" });
    const teammate = { ...env, SEXTANT_CONFIG_DIR: mkdtempSync(join(tmpdir(), "sextant-teammate-")) };
    // The teammate uses the same edge and org.
    const local = savedLocalEdge(edge);
    const as = (args: string[]) => sextant(["--base-url", edge.baseURL, "--api-key", local.apiKey, ...args], teammate);
    expect(as(["key", "import", key, theirs]).code).toBe(0);
    const report = JSON.parse(as(["--json", "index", theirs]).stdout);
    expect(report).toMatchObject({ created: false, sync: { added: 0, changed: 0, deleted: 0, converged: true } });
    expect(as(["key", "import", "nonsense", theirs]).code).toBe(2);
  });

  it("explains a directory that is not indexed, and deletes a workspace with its state", () => {
    const dir = makeTree({ "x.ts": "x" });
    const missing = cli(["status", dir]);
    expect(missing.code).toBe(4);
    expect(missing.stderr).toContain("not indexed");
    const id = JSON.parse(cli(["--json", "index", dir]).stdout).workspaceId;
    expect(cli(["workspace", "delete", dir]).code).toBe(2);
    expect(cli(["workspace", "delete", dir, "--yes"]).code).toBe(0);
    expect(JSON.parse(cli(["--json", "workspace", "list"]).stdout).map((w: { id: string }) => w.id)).not.toContain(id);
    expect(cli(["status", dir]).code).toBe(4);
  });

  it("watches: an edit reaches the edge in seconds, and edits made while the edge is down catch up", async () => {
    const dir = makeTree({ "watched.ts": "v0" });
    const child = spawn(
      process.execPath,
      [join(ROOT, "client/bin/sextant.js"), "--json", "watch", dir, "--debounce", "50"],
      {
        env: { ...process.env, ...env, SEXTANT_API_KEY: "", SEXTANT_BASE_URL: "" },
        stdio: ["ignore", "pipe", "pipe"],
      },
    );
    const events: { event: string; report?: { sync: { changed: number; added: number; converged: boolean } } }[] = [];
    let buffer = "";
    child.stdout.on("data", (d) => {
      buffer += d;
      let nl;
      while ((nl = buffer.indexOf("\n")) >= 0) {
        events.push(JSON.parse(buffer.slice(0, nl)));
        buffer = buffer.slice(nl + 1);
      }
    });
    const waitFor = async (predicate: () => boolean, ms: number) => {
      const deadline = Date.now() + ms;
      while (!predicate()) {
        if (Date.now() > deadline) throw new Error(`timed out; events: ${JSON.stringify(events)}`);
        await new Promise((r) => setTimeout(r, 50));
      }
    };
    try {
      await waitFor(() => events.some((e) => e.event === "sync"), 20_000);
      const before = events.length;
      writeTree(dir, { "watched.ts": "v1" });
      // The watcher's reconciling rescan is minutes apart, so a sync within the wait came from the save itself.
      await waitFor(() => events.slice(before).some((e) => e.event === "sync" && e.report!.sync.changed === 1), 10_000);

      const port = Number(new URL(edge.baseURL).port);
      await edge.stop();
      const down = events.length;
      writeTree(dir, { "made-while-down.ts": "x" });
      await waitFor(() => events.slice(down).some((e) => e.event === "error"), 10_000);
      edge = await startLocalEdge({ port, configDir: edge.configDir, persistTo: edge.persistTo });
      // Only a sync after the outage counts: the first sync of all also added one file.
      await waitFor(() => events.slice(down).some((e) => e.event === "sync" && e.report!.sync.added === 1), 40_000);
      const status = JSON.parse(cli(["--json", "status", dir]).stdout);
      expect(status.inSync).toBe(true);
      expect(status.edge.files).toBe(2);
    } finally {
      child.kill("SIGTERM");
    }
  }, 120_000);
});
