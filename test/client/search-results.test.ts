import { describe, expect, it } from "vitest";
import { chunkFile } from "../../client/index/chunker.js";
import { findSecrets, redact } from "../../client/index/secrets.js";
import { scanWorkspace } from "../../client/workspace/scanner.js";
import { searchWorkspace, type SearchOptions } from "../../client/workspace/search.js";
import { focusLine } from "../../client/workspace/snippet.js";
import { WorkspaceSecret } from "../../client/workspace/secret.js";
import type { OpenWorkspace } from "../../client/workspace/session.js";
import type { Sextant } from "../../client/sdk/client.js";
import type { SearchHit, SearchRequest } from "../../protocol/sync.js";
import { PARSE_DURATION, backdate, makeTree } from "../support/fixture.js";

const secret = WorkspaceSecret.generate();

/** The edge's answer stood in for: the hits are the chunks the index made of the files named. */
async function searchOver(
  root: string,
  indexed: Record<string, string>,
  pick: (path: string, i: number) => boolean,
  query = "query",
  options: SearchOptions = {},
) {
  const results: SearchHit[] = [];
  for (const [path, text] of Object.entries(indexed)) {
    (await chunkFile(path, text)).forEach((chunk, i) => {
      if (!pick(path, i)) return;
      results.push({
        path: secret.encryptPath(path),
        startLine: chunk.startLine,
        endLine: chunk.endLine,
        chunkId: secret.chunkId(chunk.text),
        score: 1 / (results.length + 1),
        channels: { vector: null, lexical: null },
      });
    });
  }
  const search = async (_id: string, request: SearchRequest) => ({
    protocol: 2,
    root: "0".repeat(64),
    results: results.slice(0, request.topK ?? 10),
  });
  const sextant = { workspaces: { search } };
  const ws = { entry: { root, workspaceId: "ws", baseURL: "http://edge" }, secret } as unknown as OpenWorkspace;
  return (await searchWorkspace(sextant as unknown as Sextant, ws, query, options)).hits;
}

describe("search results read from disk", () => {
  it("finds a piece of one long line fresh, and shows it capped instead of the whole line", async () => {
    const map = JSON.stringify({ version: 3, mappings: "AAAA,".repeat(10_000) });
    const root = makeTree({ "app.js.map": map });
    const hits = await searchOver(root, { "app.js.map": map }, (_, i) => i === 1);
    expect(hits).toHaveLength(1);
    expect(hits[0]!.stale).toBe(false);
    expect(hits[0]!.snippet.length).toBeLessThanOrEqual(2002);
    expect(hits[0]!.snippet.endsWith("\n…")).toBe(true);
  });

  it("shows the file as it is on disk, though the index holds it with its secrets removed", async () => {
    const raw =
      'export function connect() {\n  return open("postgres://admin:Zq8vN2xL4pR7@db.internal:5432/app");\n}\n';
    const uploaded = redact(raw, await findSecrets("db.ts", raw));
    expect(uploaded).not.toContain("Zq8vN2xL4pR7");
    const root = makeTree({ "db.ts": raw });
    const [hit] = await searchOver(root, { "db.ts": uploaded }, () => true);
    expect(hit!.stale).toBe(false);
    expect(hit!.snippet).toContain('open("postgres://admin:Zq8vN2xL4pR7@db.internal:5432/app");');
  });

  it("still marks a chunk stale when its file changed", async () => {
    const before = "export function a() {\n  return 1;\n}\n";
    const root = makeTree({ "a.ts": "export function a() {\n  return 2;\n}\n" });
    const hits = await searchOver(root, { "a.ts": before }, () => true);
    expect(hits.map((h) => h.stale)).toEqual([true]);
  });

  it("caps a long chunk at 20 lines", async () => {
    const text = Array.from({ length: 40 }, (_, i) => `line ${i}`).join("\n") + "\n";
    const root = makeTree({ "notes.txt": text });
    const [hit] = await searchOver(root, { "notes.txt": text }, () => true);
    expect(hit!.stale).toBe(false);
    expect(hit!.snippet.split("\n")).toEqual([...Array.from({ length: 20 }, (_, i) => `line ${i}`), "…"]);
  });
});

describe("the lines a snippet shows", () => {
  const licence = Array.from({ length: 8 }, (_, i) => `// Licensed under the terms of clause ${i}.`).join("\n");
  const source = `${licence}
/**
 * @param dir the directory given on the command line
 * @param options how to treat symlinks
 */
export function resolveWorkspaceRoot(dir: string, options: { follow: boolean }): string {
  const real = options.follow ? realpath(dir) : dir;
  return findMarker(real, ".git") ?? real;
}
`;
  const search = async (query: string) => {
    const root = makeTree({ "root.ts": source });
    const hits = await searchOver(root, { "root.ts": source }, () => true, query);
    expect(hits).toHaveLength(1);
    return hits[0]!;
  };

  it("start at the line holding most of the query's words", async () => {
    const hit = await search("how is the workspace root resolved when following symlinks");
    expect(hit.snippetLine).toBe(13);
    expect(hit.snippet.split("\n")[0]).toBe(
      "export function resolveWorkspaceRoot(dir: string, options: { follow: boolean }): string {",
    );
    const marker = await search("find the .git marker");
    expect(marker.snippet.split("\n")[0]).toBe('  return findMarker(real, ".git") ?? real;');
  });

  it("start at the definition when no line holds the query's words", async () => {
    const hit = await search("zebra");
    expect(hit.snippetLine).toBe(13);
    expect(hit.snippet.startsWith("export function resolveWorkspaceRoot(")).toBe(true);
  });

  it("know a definition behind any run of modifiers", () => {
    for (const line of [
      "public static final class Orbit {",
      "pub(crate) fn orbit() {",
      "export default async function orbit() {",
    ])
      expect(focusLine(`/**\n * @param x the x\n */\n${line}`, "zebra"), line).toBe(3);
  });

  it("start at the chunk's first line when it has neither", async () => {
    const text = "alpha\nbeta\ngamma\n";
    const root = makeTree({ "notes.txt": text });
    const [hit] = await searchOver(root, { "notes.txt": text }, () => true, "zebra");
    expect(hit!.snippetLine).toBe(1);
    expect(hit!.snippet).toBe("alpha\nbeta\ngamma");
  });
});

describe("generated files", () => {
  const files = {
    "src/app.ts": "export const app = 1;\n",
    "dist/app.js.map": "{}",
    "dist/app.min.js": "var a=1;",
    "dist/styles.min.css": "a{b:c}",
    "dist/bundle.js": `${"x=1;".repeat(5000)}\n${"y=2;".repeat(5000)}\n`,
  };
  const gitOnly = { useDefaults: false, globalExcludes: null } as const;

  it("are skipped by default and named with reason generated", async () => {
    const scan = await scanWorkspace(makeTree(files), secret, gitOnly);
    expect([...scan.files.keys()]).toEqual(["src/app.ts"]);
    expect(scan.skipped.generated).toBe(4);
    expect(scan.skippedFiles.map((f) => `${f.path} ${f.reason}`).sort()).toEqual([
      "dist/app.js.map generated",
      "dist/app.min.js generated",
      "dist/bundle.js generated",
      "dist/styles.min.css generated",
    ]);
  });

  it("are indexed with includeGenerated, and a warm scan follows the option when it changes", async () => {
    const root = makeTree(files);
    // Outside the racy window, so that a warm scan trusts what stat says.
    backdate(root, Object.keys(files));
    const first = await scanWorkspace(root, secret, gitOnly);
    const included = await scanWorkspace(root, secret, {
      ...gitOnly,
      includeGenerated: true,
      previous: first.files,
      previousDirs: first.dirs,
      previousStartedAt: first.startedAt,
      previousRules: first.rules,
      previousSkipped: first.skipped,
      previousSkippedFiles: first.skippedFiles,
    });
    expect([...included.files.keys()].sort()).toEqual(Object.keys(files).sort());
    expect(included.skipped.generated).toBe(0);
    // Back to the default: the bundle found by its content goes, though its stat vouches for it.
    const skipped = await scanWorkspace(root, secret, {
      ...gitOnly,
      previous: included.files,
      previousDirs: included.dirs,
      previousStartedAt: included.startedAt,
      previousRules: included.rules,
      previousSkipped: included.skipped,
      previousSkippedFiles: included.skippedFiles,
    });
    expect([...skipped.files.keys()]).toEqual(["src/app.ts"]);
    expect(skipped.skipped.generated).toBe(4);
  });
});

describe("copies of the same code", () => {
  const parse = `/** Parses a duration such as "1h 30m" into milliseconds. */\n${PARSE_DURATION}`;
  const files = {
    "node_modules/ms/dist/cjs/index.js": `${parse}exports.parseDuration = parseDuration;\n`,
    "node_modules/ms/dist/esm/index.js": `${parse}export { parseDuration };\n`,
    "node_modules/ms/dist/umd/index.js": parse.replace(/\n {2}/g, "\n    "),
    "node_modules/ms/src/index.js": parse,
    "src/timer.js": "export function startTimer(label) {\n  return { label, started: Date.now() };\n}\n",
  };
  const search = async (options: SearchOptions) =>
    searchOver(makeTree(files), files, () => true, "parse a duration", options);

  it("collapse into the best-ranked hit, naming the others, and still fill the page", async () => {
    const hits = await search({ topK: 2 });
    expect(hits.map((h) => h.path)).toEqual(["node_modules/ms/dist/cjs/index.js", "src/timer.js"]);
    expect(hits[0]!.copies.map((c) => c.path)).toEqual([
      "node_modules/ms/dist/esm/index.js",
      "node_modules/ms/dist/umd/index.js",
      "node_modules/ms/src/index.js",
    ]);
    expect(hits[1]!.copies).toEqual([]);
  });

  it("are all returned when collapsing is turned off", async () => {
    const hits = await search({ topK: 5, collapse: false });
    expect(hits.map((h) => h.path)).toEqual(Object.keys(files));
  });
});
