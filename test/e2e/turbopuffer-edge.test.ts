import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { makeTree, writeTree } from "../support/fixture.js";
import { sextantAsync, startLocalEdge, type LocalEdge } from "../support/local-edge.js";
import { scanDirectoryFor } from "../support/storage-scan.js";
import { startTurbopufferStandIn, type TurbopufferStandIn } from "../support/turbopuffer-standin.js";

/**
 * INDEX_BACKEND=turbopuffer on the real local edge: the official client runs inside workerd's
 * Durable Object and talks to the labelled local stand-in for Turbopuffer's hosted service.
 */
describe("Turbopuffer backend behind the local edge", () => {
  let tpuf: TurbopufferStandIn;
  let edge: LocalEdge;
  let cli: (args: string[]) => ReturnType<typeof sextantAsync>;

  beforeAll(async () => {
    tpuf = await startTurbopufferStandIn({ apiKey: "tpuf_test_key_0123456789" });
    edge = await startLocalEdge({
      vars: { INDEX_BACKEND: "turbopuffer", TURBOPUFFER_BASE_URL: tpuf.url, TURBOPUFFER_API_KEY: tpuf.apiKey },
    });
    const env = {
      SEXTANT_CONFIG_DIR: edge.configDir,
      SEXTANT_CACHE_DIR: mkdtempSync(join(tmpdir(), "sextant-cache-")),
    };
    cli = (args) => sextantAsync(args, env);
  });
  afterAll(async () => {
    await edge?.stop();
    await tpuf?.close();
  });

  it("indexes, searches, forgets a deleted file and deletes the namespace with the workspace", async () => {
    const dir = makeTree({
      "src/ephemeris.ts":
        "export function computeJulianEphemeris(epoch: number) { return epoch * 365.25; }\n" +
        "export function siderealDayLength() { return 86164.09; }\n",
      "src/telescope.py": "def calibrate_telescope_mount(azimuth, altitude):\n    return azimuth + altitude\n",
      "notes/observing.md": "Observing log: the nebula was faint tonight.\n",
    });
    const indexed = await cli(["--json", "index", dir]);
    expect(indexed.code, indexed.stderr + edge.output().slice(-2000)).toBe(0);

    const namespaces = new Set(tpuf.requests.map((r) => r.url.match(/namespaces\/([^/?]+)/)?.[1]).filter(Boolean));
    const namespace = [...namespaces].find((n) => !n!.endsWith(".pieces"))!;
    expect(namespace).toMatch(/^sextant-[0-9a-f]{64}$/);
    // The entries', and beside it their definition pieces' (ephemeris.ts's chunk defines two names).
    expect([...namespaces].sort()).toEqual([namespace, `${namespace}.pieces`]);
    expect(tpuf.documents(namespace)).toHaveLength(3);
    expect(tpuf.documents(`${namespace}.pieces`)).toHaveLength(2);

    const search = async (query: string, extra: string[] = []) =>
      JSON.parse((await cli(["--json", "search", query, dir, ...extra])).stdout) as { path: string }[];
    const before = tpuf.requests.length;
    expect((await search("calibrate the telescope mount"))[0]!.path).toBe("src/telescope.py");
    // Two BM25 rankings reach Turbopuffer: the question's terms, weighted by the built-in model (one
    // clause per weight), and the translation channel's words with their translations.
    const lexical = tpuf.requests
      .slice(before)
      .filter((r) => r.url.endsWith("/query") && JSON.stringify(r.body).includes('"BM25"'))
      .map((r) => JSON.stringify((r.body as { rank_by: unknown }).rank_by));
    expect(lexical).toHaveLength(2);
    for (const rankBy of lexical)
      expect(rankBy).toMatch(/^\["Sum",\[\["Product",[0-9.]+,\["terms","BM25",\["[0-9a-f]{8}"/);
    const tokens = lexical.map((r) => r.match(/"[0-9a-f]{8}"/g)!.length).sort((a, b) => a - b);
    expect(tokens[1]).toBeGreaterThan(tokens[0]!);
    // The longest questions fit one full-text query (Turbopuffer refuses one over 1,024 characters,
    // and so does the stand-in): the lightest of their terms and translations are left out.
    const common =
      "return value list string function object array number index key map set get add remove delete update " +
      "create find filter sort merge split join parse format read write open close start stop first last next " +
      "previous count size length empty clear copy clone compare equal match replace insert append";
    const long = `calibrate the telescope mount ${common} ${Array.from({ length: 100 }, (_, i) => `zq${i}x`).join(" ")}`;
    expect(long.length).toBeLessThanOrEqual(2000);
    const asked = tpuf.requests.length;
    expect((await search(long))[0]!.path).toBe("src/telescope.py");
    const longTokens = tpuf.requests
      .slice(asked)
      .filter((r) => r.url.endsWith("/query") && JSON.stringify(r.body).includes('"BM25"'))
      .map((r) => JSON.stringify((r.body as { rank_by: unknown }).rank_by).match(/"[0-9a-f]{8}"/g)!.length);
    expect(longTokens).toEqual([113, 113]);
    expect((await search("julian ephemeris epoch", ["--lang", "typescript"])).map((h) => h.path)).toEqual([
      "src/ephemeris.ts",
    ]);
    // The telescope's file matches better, but lies outside the directory searched.
    expect((await search("telescope observing log", ["--within", "notes"])).map((h) => h.path)).toEqual([
      "notes/observing.md",
    ]);

    rmSync(join(dir, "src/telescope.py"));
    expect((await cli(["index", dir])).code).toBe(0);
    expect((await search("calibrate the telescope mount")).map((h) => h.path)).not.toContain("src/telescope.py");
    expect(tpuf.documents(namespace)).toHaveLength(2);

    // Nothing but encrypted paths, language codes, vectors and keyed term tokens went out.
    const sent = JSON.stringify(tpuf.requests.map((r) => r.body));
    for (const needle of ["ephemeris", "Julian", "telescope", "calibrate", "nebula", "observing", "src/"])
      expect(sent.toLowerCase()).not.toContain(needle.toLowerCase());
    // And the embedded backend's R2 prefix was never used.
    expect(
      await scanDirectoryFor(edge.persistTo, ["computeJulianEphemeris", "calibrate_telescope_mount", "nebula"]),
    ).toEqual([]);

    // Turbopuffer down: search and index fail with a clear 502, nothing half-committed; then recovery.
    tpuf.failNext(10_000, 500);
    const failedSearch = await cli(["--json", "search", "telescope", dir]);
    expect(failedSearch.code).not.toBe(0);
    expect(failedSearch.stderr).toContain("upstream_failure");
    writeTree(dir, { "src/orbit.ts": "export const perihelionDistanceAu = 0.983;\n" });
    const failedIndex = await cli(["index", dir]);
    expect(failedIndex.code).not.toBe(0);
    expect(failedIndex.stderr).toContain("upstream_failure");
    tpuf.failNext(0, 500);
    expect((await cli(["index", dir])).code).toBe(0);
    expect((await search("perihelion distance"))[0]!.path).toBe("src/orbit.ts");

    const deleted = await cli(["workspace", "delete", dir, "--yes"]);
    expect(deleted.code, deleted.stderr).toBe(0);
    expect(tpuf.documents(namespace)).toBeUndefined();
    expect(tpuf.documents(`${namespace}.pieces`)).toBeUndefined();
  }, 180_000);
});
