import { rmSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { makeTree, writeTree } from "../support/fixture.js";
import { restartableEdge } from "../support/local-edge.js";
import { startOpenAIStandIn, type OpenAIStandIn } from "../support/openai-standin.js";
import { scanDirectoryFor } from "../support/storage-scan.js";

const MODEL = "standin-embed-768";
const BATCH = 3;

const FILES = {
  "src/auth/revoke.ts": `/** Revokes an API key: marks it revoked and evicts it from the key cache. */
export function revokeApiKey(keyId: string): void {
  markKeyRevoked(keyId);
  evictKeyFromCache(keyId);
}
`,
  "src/render/table.ts": `/** Renders rows as a Markdown table. */
export function renderMarkdownTable(rows: string[][]): string {
  return rows.map((row) => "| " + row.join(" | ") + " |").join("\\n");
}
`,
  "src/tree/merkle.py": `def compute_merkle_root(children):
    """The Merkle root of a directory: the hash of its sorted children's hashes."""
    return sha256(b"".join(sorted(children)))
`,
  "src/orbit/kepler.ts": `/** Solves Kepler's equation for the eccentric anomaly by Newton iteration. */
export function solveKeplerEquation(meanAnomaly: number, eccentricity: number): number {
  return meanAnomaly + eccentricity * Math.sin(meanAnomaly);
}
`,
  "src/net/backoff.ts": `/** Exponential backoff with jitter between retries of a failed request. */
export function backoffDelay(attempt: number): number {
  return Math.min(30_000, 2 ** attempt * 500) * (0.75 + Math.random() / 4);
}
`,
  "docs/billing.md": `# Billing

Invoices are computed monthly from usage, with tax added per country.
`,
  "src/cache/lru.ts": `/** A least-recently-used cache with a fixed capacity. */
export class LruCache<K, V> {
  readonly #entries = new Map<K, V>();
  constructor(readonly capacity: number) {}
}
`,
};

/**
 * The real local edge configured with `EMBEDDER=openai` against the stand-in, driven by the real
 * CLI: commits embed chunk texts in batches, searches embed the query, an outage of the embedding
 * service fails `sextant index` clearly without leaving half a commit, and a workspace built by
 * another embedder stays searchable until `sextant index` moves it to this one.
 */
describe("an OpenAI-compatible embedder behind the local edge", () => {
  let standIn: OpenAIStandIn;
  const local = restartableEdge();
  const { cli, json, start, env } = local;
  const openai = () => ({
    EMBEDDER: "openai",
    EMBEDDING_BASE_URL: standIn.url,
    EMBEDDING_MODEL: MODEL,
    EMBEDDING_API_KEY: standIn.apiKey,
    EMBEDDING_BATCH: String(BATCH),
  });
  /** A directory indexed while the edge still ran the built-in embedder. */
  let builtinDir: string;

  beforeAll(async () => {
    standIn = await startOpenAIStandIn();
    await start();
    // Several files: BM25 skips a term found in more than a third of the chunks, as a stop word.
    builtinDir = makeTree({
      "notes/orbit.ts": "export const orbitalPeriod = 90;",
      "notes/tide.ts": "export const tideHeight = 3;",
      "notes/wind.ts": "export const windSpeed = 12;",
      "notes/rain.ts": "export const rainfallDepth = 7;",
    });
    expect((await cli(["index", builtinDir])).code).toBe(0);
  }, 180_000);
  afterAll(async () => {
    await local.stop();
    await standIn?.close();
  });

  it("answers a clear 500 on the routes that embed when the settings are incomplete, and nowhere else", async () => {
    await start({ EMBEDDER: "openai", EMBEDDING_BASE_URL: standIn.url });
    const search = await cli(["search", "orbital period", builtinDir]);
    expect(search.code).toBe(5);
    expect(search.stderr).toContain("embedder is misconfigured");
    expect(search.stderr).toContain("EMBEDDING_MODEL: required when EMBEDDER is openai");
    expect(search.stderr).toContain("EMBEDDING_API_KEY: required when EMBEDDER is openai");
    expect(search.stderr).toContain("[internal");
    expect((await json(["workspace", "list"])).length).toBe(1);
    expect((await json(["status", builtinDir])).inSync).toBe(true);
  }, 120_000);

  it("indexes through the embedding service in batches and finds the right file first", async () => {
    await start(openai());
    const dir = makeTree(FILES);
    const before = standIn.requests.length;
    const report = await json(["index", dir]);
    expect(report).toMatchObject({ created: true, files: Object.keys(FILES).length, sync: { converged: true } });

    const commits = standIn.requests.slice(before);
    expect(commits.length).toBeGreaterThanOrEqual(Math.ceil(Object.keys(FILES).length / BATCH));
    for (const request of commits) {
      expect(request.status).toBe(200);
      expect(request.inputs.length).toBeLessThanOrEqual(BATCH);
      expect(request.headers.authorization).toBe(`Bearer ${standIn.apiKey}`);
      expect(request.body).toMatchObject({ model: MODEL, encoding_format: "float" });
    }
    const sent = commits.flatMap((r) => r.inputs);
    for (const name of ["revokeApiKey", "renderMarkdownTable", "compute_merkle_root", "LruCache", "Invoices"]) {
      expect(sent.filter((text) => text.includes(name))).toHaveLength(1);
    }

    const asked = standIn.requests.length;
    const hits = await json(["search", "revoke an api key and evict it from the cache", dir, "-k", "3"]);
    expect(hits[0].path).toBe("src/auth/revoke.ts");
    expect(standIn.requests.slice(asked).map((r) => r.inputs)).toEqual([
      ["revoke an api key and evict it from the cache"],
    ]);
    expect((await json(["search", "solve kepler equation eccentric anomaly", dir, "-k", "1"]))[0].path).toBe(
      "src/orbit/kepler.ts",
    );
    // The key and the text stop in the request, as with the built-in embedder.
    expect(local.edge.output()).not.toContain(standIn.apiKey);
    const names = ["revokeApiKey", "evictKeyFromCache", "renderMarkdownTable", "compute_merkle_root"];
    for (const name of names) expect(local.edge.output()).not.toContain(name);
    expect(await scanDirectoryFor(env.PERSIST_TO!, [...names, standIn.apiKey])).toEqual([]);
  }, 120_000);

  it("fails `sextant index` clearly during an outage, commits nothing, and completes after recovery", async () => {
    const dir = makeTree({ "a.ts": "export const alpha = 1;", "b.ts": "export const beta = 2;" });
    expect((await cli(["index", dir])).code).toBe(0);
    writeTree(dir, {
      "a.ts": "export const alpha = 10;",
      "c.ts": "/** Rotates the signing certificate. */\nexport function rotateCertificate() {}",
    });

    standIn.failNext(Infinity, 500);
    const failed = await cli(["index", dir]);
    expect(failed.code).toBe(5);
    expect(failed.stderr).toContain("The embedding service failed (HTTP 500");
    expect(failed.stderr).toContain("[upstream_failure");
    const during = await json(["status", dir]);
    expect(during).toMatchObject({ inSync: false, edge: { files: 2 } });

    standIn.reset();
    const recovered = await json(["index", dir]);
    expect(recovered.sync.converged).toBe(true);
    expect(await json(["status", dir])).toMatchObject({ inSync: true, edge: { files: 3 } });
    expect((await json(["search", "rotate the signing certificate", dir, "-k", "1"]))[0].path).toBe("c.ts");
  }, 120_000);

  it("embeds only what the workspace has not seen: an edited function, not its unchanged neighbours or a moved file", async () => {
    const body = (name: string, extra = "") =>
      `export function ${name}(samples: number[]): number {\n` +
      Array.from(
        { length: 18 },
        (_, i) => `  const step${i} = samples.length * ${i + 1} + ${name.length}; ${extra}\n`,
      ).join("") +
      `  return samples.reduce((a, b) => a + b, 0);\n}\n`;
    const names = ["integrateOrbit", "propagateKepler", "refineEphemeris", "solveLambert"];
    const source = (changed?: string) => names.map((n) => body(n, n === changed ? "// revised" : "")).join("\n");
    const dir = makeTree({ "src/astro/mechanics.ts": source() });
    const sentSince = (from: number) => standIn.requests.slice(from).flatMap((r) => r.inputs);

    let from = standIn.requests.length;
    await json(["index", dir]);
    const first = sentSince(from);
    expect(first.length).toBeGreaterThanOrEqual(4);

    from = standIn.requests.length;
    writeTree(dir, { "src/astro/mechanics.ts": source("propagateKepler") });
    await json(["index", dir]);
    const second = sentSince(from);
    expect(second).toHaveLength(1);
    expect(second[0]).toContain("propagateKepler");

    from = standIn.requests.length;
    rmSync(join(dir, "src/astro/mechanics.ts"));
    writeTree(dir, { "lib/orbits.ts": source("propagateKepler") });
    await json(["index", dir]);
    expect(sentSince(from)).toEqual([]);
    const hits = await json(["search", "refine the ephemeris", dir, "-k", "1"]);
    expect(hits[0].path).toBe("lib/orbits.ts");
  }, 120_000);

  it("keeps a workspace indexed by another embedder searchable, and `sextant index` moves it to this one", async () => {
    const old = await json(["search", "orbital period", builtinDir, "-k", "1"]);
    expect(old[0].path).toBe("notes/orbit.ts");

    const moved = await json(["index", builtinDir]);
    expect(moved.sync.reembed).toMatchObject({ to: MODEL, files: 4, moved: true });
    expect(moved.sync.converged).toBe(true);
    expect((await json(["search", "orbital period", builtinDir, "-k", "1"]))[0].path).toBe("notes/orbit.ts");
  }, 60_000);
});
