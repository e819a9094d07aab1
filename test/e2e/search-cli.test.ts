import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PARSE_DURATION, makeTree } from "../support/fixture.js";
import { openWorkspace } from "../../client/workspace/session.js";
import { searchWorkspace } from "../../client/workspace/search.js";
import type { SearchRequest, SearchResponse } from "../../protocol/sync.js";
import { sextant, type LocalEdge, startEdgeWithCli, withCliSdk } from "../support/local-edge.js";

const LICENCE = Array.from({ length: 8 }, (_, i) => `// Licensed under the terms of clause ${i + 1}.`).join("\n");
const DURATION = `${LICENCE}\n${PARSE_DURATION}`;

/** `sextant search` and `index` as a person reads them: generated files skipped, copies folded, the matching line shown. */
describe("sextant search, human output", () => {
  let edge: LocalEdge;
  let env: Record<string, string>;
  let cli: (args: string[]) => ReturnType<typeof sextant>;
  let dir: string;

  beforeAll(async () => {
    ({ edge, env, cli } = await startEdgeWithCli());
    dir = makeTree({
      "src/duration.js": DURATION,
      "lib/cjs/duration.js": `${DURATION}module.exports = { parseDuration };\n`,
      "lib/duration.js.map": JSON.stringify({ version: 3, mappings: "AAAA,".repeat(10_000) }),
      "src/timer.js": "export function startTimer(label) {\n  return { label, started: Date.now() };\n}\n",
    });
  });
  afterAll(async () => {
    await edge?.stop();
  });

  it("skips a source map as generated, and indexes it when asked", () => {
    const run = cli(["index", dir]);
    expect(run.code, run.stderr).toBe(0);
    expect(run.stdout).toContain("skipped lib/duration.js.map: generated");
    const included = cli(["--json", "index", dir, "--include-generated"]);
    expect(included.code, included.stderr).toBe(0);
    expect(JSON.parse(included.stdout)).toMatchObject({ files: 4, skipped: { generated: 0 } });
    const status = cli(["--json", "status", dir, "--include-generated"]);
    expect(JSON.parse(status.stdout)).toMatchObject({ inSync: true });
    const back = cli(["--json", "index", dir]);
    expect(JSON.parse(back.stdout)).toMatchObject({ files: 3, skipped: { generated: 1 } });
  });

  it("folds a copy into one result and shows the line that matched", () => {
    const run = cli(["search", "parse a duration", dir, "-k", "2"]);
    expect(run.code, run.stderr).toBe(0);
    const [first, second] = run.stdout.trim().split("\n\n");
    expect(first).toMatch(/^(src|lib\/cjs)\/duration\.js:1-\d+ {2}/);
    expect(first).toMatch(/\n {4}\(also in 1 file: (lib\/cjs|src)\/duration\.js\)\n/);
    expect(first).toContain("\n    … (from line 9)\n    function parseDuration(text, options) {\n");
    expect(first).not.toContain("Licensed");
    expect(second).toMatch(/^src\/timer\.js:/);
  });

  it("sends the question's words with their translations, and the edge ranks them as a third channel", async () => {
    await withCliSdk(edge, env, async (sdk) => {
      const sent: SearchRequest[] = [];
      const answers: SearchResponse[] = [];
      const search = sdk.workspaces.search.bind(sdk.workspaces);
      sdk.workspaces.search = async (id, body, opts) => {
        sent.push(body);
        const answer = await search(id, body, opts);
        answers.push(answer);
        return answer;
      };
      const { hits } = await searchWorkspace(sdk, await openWorkspace(sdk, dir), "remove the timer's label", {
        topK: 3,
      });
      expect(hits.length).toBeGreaterThan(0);
      const words = sent[0]!.translations!;
      expect(words.map((w) => w.term)).toEqual(expect.arrayContaining(["remov", "tim", "label"]));
      expect(words.find((w) => w.term === "remov")!.alternatives.length).toBeGreaterThan(10);
      expect(answers[0]!.results.some((r) => typeof r.channels.translation === "number")).toBe(true);
    });
  });

  it("searches below the directory it is run on, and refuses a --within outside the workspace", () => {
    const below = cli(["--json", "search", "parse a duration", join(dir, "src"), "-k", "5"]);
    expect(below.code, below.stderr).toBe(0);
    const paths = (JSON.parse(below.stdout) as { path: string }[]).map((h) => h.path);
    expect(paths.length).toBeGreaterThan(0);
    expect(paths.every((p) => p.startsWith("src/"))).toBe(true);
    const absolute = cli(["--json", "search", "parse a duration", dir, "--within", join(dir, "lib")]);
    expect(absolute.code, absolute.stderr).toBe(0);
    expect((JSON.parse(absolute.stdout) as { path: string }[]).every((h) => h.path.startsWith("lib/"))).toBe(true);
    for (const outside of ["../..", "/etc"]) {
      const refused = cli(["search", "parse a duration", dir, "--within", outside]);
      expect(refused.code).toBe(2);
      expect(refused.stderr).toContain("is outside the workspace root");
    }
  });
});
