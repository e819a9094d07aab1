import fc from "fast-check";
import { beforeAll, describe, expect, it } from "vitest";
import { ERROR_CODES, PROBLEM_CONTENT_TYPE } from "../../protocol/errors.js";
import { Problem, Workspace, WorkspaceDetail } from "../../protocol/schemas.js";
import {
  CommitResponse,
  DiffResponse,
  MAX_DEPTH,
  MAX_FILE_BYTES,
  SearchResponse,
  SYNC_PROTOCOL,
  TreeStatus,
  VECTOR_KEY_HEADER,
} from "../../protocol/sync.js";
import { call, createAccount, expectJson, type Account } from "./harness.js";

// Stand-ins for encrypted segments: few, so that commits collide on paths as often as possible.
const SEGMENTS = ["A", "B", "C"].map((c) => c.repeat(43));
const DEEPEST = Array.from({ length: MAX_DEPTH }, (_, i) => SEGMENTS[i % 3]).join("/");
const hex = (c: string) => c.repeat(64);
const TEXTS = ["alpha beta", "gamma delta", "epsilon", " ", ""];
/** The id a client would send for each text; a hostile chunk takes any id instead. */
const idOf = (text: string) => hex(String(TEXTS.indexOf(text)));
const QUERY = "alpha beta gamma delta epsilon";
const VECTOR_KEY = btoa(String.fromCharCode(...crypto.getRandomValues(new Uint8Array(32))))
  .replace(/\+/g, "-")
  .replace(/\//g, "_")
  .replace(/=+$/, "");

const path = fc.oneof(
  {
    weight: 12,
    arbitrary: fc.array(fc.constantFrom(...SEGMENTS), { minLength: 1, maxLength: 3 }).map((s) => s.join("/")),
  },
  {
    weight: 1,
    arbitrary: fc.constantFrom(
      DEEPEST,
      DEEPEST.slice(0, DEEPEST.lastIndexOf("/")),
      `${DEEPEST}/${SEGMENTS[0]}`,
      "src/index.ts",
      "",
    ),
  },
);

/** Raw JSON number tokens, and a few that are not numbers or not JSON at all. */
const size = fc.oneof(
  { weight: 8, arbitrary: fc.nat(1000).map(String) },
  {
    weight: 2,
    arbitrary: fc.constantFrom(
      String(MAX_FILE_BYTES),
      String(MAX_FILE_BYTES + 1),
      String(Number.MAX_SAFE_INTEGER),
      "9007199254740993",
      "18014398509482070",
      "1e400",
      "-1e400",
      "-0",
      "0.0",
      "-1",
      "1.5",
      "1e-7",
      '"12"',
      "null",
      "NaN",
      "Infinity",
    ),
  },
);

const lines = fc.oneof(
  {
    weight: 16,
    arbitrary: fc.tuple(fc.integer({ min: 1, max: 9 }), fc.nat(2)).map(([s, d]) => [String(s), String(s + d)]),
  },
  {
    weight: 1,
    arbitrary: fc
      .tuple(fc.integer({ min: 2, max: 9 }), fc.integer({ min: 1, max: 8 }))
      .map(([s, e]) => [String(s), String(Math.min(e, s - 1))]),
  },
  {
    weight: 1,
    arbitrary: fc.tuple(
      fc.constantFrom("0", "-1", "2.5", "1e400", "9007199254740993", "null"),
      fc.constantFrom("1", "0", "1e400"),
    ),
  },
);

const chunk = fc
  .record({
    text: fc.oneof(
      { weight: 12, arbitrary: fc.constantFrom(...TEXTS.slice(0, 3), " ") },
      { weight: 1, arbitrary: fc.constant("") },
    ),
    hostileId: fc.oneof(
      { weight: 12, arbitrary: fc.constant(null) },
      { weight: 1, arbitrary: fc.constantFrom(hex("a"), hex("b")) },
    ),
    lines,
  })
  .map(
    ({ text, hostileId, lines: [start, end] }) =>
      `{"id":"${hostileId ?? idOf(text)}","text":${JSON.stringify(text)},"startLine":${start},"endLine":${end}}`,
  );

const upsert = fc
  .record({
    path,
    hash: fc.oneof(
      { weight: 19, arbitrary: fc.constantFrom(hex("1"), hex("2")) },
      { weight: 1, arbitrary: fc.constant("abc") },
    ),
    size,
    chunks: fc.array(chunk, { maxLength: 3 }),
  })
  .map(
    (u) => `{"path":${JSON.stringify(u.path)},"hash":"${u.hash}","size":${u.size},"chunks":[${u.chunks.join(",")}]}`,
  );

const commit = fc
  .record({ upserts: fc.array(upsert, { maxLength: 4 }), deletes: fc.array(path, { maxLength: 3 }) })
  .map(
    ({ upserts, deletes }) =>
      `{"protocol":${SYNC_PROTOCOL},"upserts":[${upserts.join(",")}],"deletes":[${deletes.map((d) => JSON.stringify(d)).join(",")}]}`,
  );

type Files = Map<string, { hash: string; size: number }>;

/** What an accepted commit must leave: its deletes, then its upserts, each replacing what stood in its way. */
function applyModel(files: Files, body: string): void {
  const { upserts, deletes } = JSON.parse(body) as {
    upserts: { path: string; hash: string; size: number }[];
    deletes: string[];
  };
  const dropUnder = (p: string) => {
    for (const f of [...files.keys()]) if (f === p || f.startsWith(`${p}/`)) files.delete(f);
  };
  deletes.forEach(dropUnder);
  for (const u of upserts) {
    dropUnder(u.path);
    for (let at = u.path.lastIndexOf("/"); at > 0; at = u.path.lastIndexOf("/", at - 1))
      files.delete(u.path.slice(0, at));
    files.set(u.path, { hash: u.hash, size: u.size });
  }
}

describe("the commit route under hostile commits", () => {
  let account: Account;
  beforeAll(async () => {
    account = await createAccount({ plan: "pro" });
  });

  it("never answers 5xx, always leaves a readable tree that matches what it accepted, and searches only its files", async () => {
    const token = account.key.key;
    const outcomes = { accepted: 0, refused: 0 };
    await fc.assert(
      fc.asyncProperty(fc.array(commit, { minLength: 1, maxLength: 4 }), async (commits) => {
        const ws = await expectJson(
          await call("/v1/workspaces", { token, body: { name: SEGMENTS[0] } }),
          201,
          Workspace,
        );
        const files: Files = new Map();
        for (const body of commits) {
          const response = await call(`/v1/workspaces/${ws.id}/tree/commit`, {
            token,
            body,
            headers: { [VECTOR_KEY_HEADER]: VECTOR_KEY },
          });
          const text = await response.text();
          expect(response.status, text).toBeLessThan(500);
          if (response.status === 200) {
            CommitResponse.parse(JSON.parse(text));
            applyModel(files, body);
            outcomes.accepted++;
          } else {
            expect(response.headers.get("Content-Type")).toBe(PROBLEM_CONTENT_TYPE);
            const problem = Problem.parse(JSON.parse(text));
            expect(ERROR_CODES[problem.code].status).toBe(response.status);
            outcomes.refused++;
          }

          // Read back as the client reads it: `sextant status` and the SDK's workspaces.get, then `sextant index`.
          const detail = await expectJson(await call(`/v1/workspaces/${ws.id}`, { token }), 200, WorkspaceDetail);
          const tree = await expectJson(await call(`/v1/workspaces/${ws.id}/tree`, { token }), 200, TreeStatus);
          const diff = await expectJson(
            await call(`/v1/workspaces/${ws.id}/tree/diff`, { token, body: { protocol: SYNC_PROTOCOL, dirs: [""] } }),
            200,
            DiffResponse,
          );
          expect(diff.truncated).toEqual([]);
          const held = new Map(diff.nodes.filter((n) => n.kind === "f").map((n) => [n.path, n.hash]));
          expect(held).toEqual(new Map([...files].map(([p, f]) => [p, f.hash])));
          const bytes = [...files.values()].reduce((n, f) => n + f.size, 0);
          expect(tree).toMatchObject({ root: detail.tree.root, files: files.size, bytes });
          expect(detail.tree.root).toBe(diff.root);

          const found = await expectJson(
            await call(`/v1/workspaces/${ws.id}/search`, {
              token,
              body: { protocol: SYNC_PROTOCOL, query: QUERY, topK: 50 },
              headers: { [VECTOR_KEY_HEADER]: VECTOR_KEY },
            }),
            200,
            SearchResponse,
          );
          for (const hit of found.results) expect(held.has(hit.path), hit.path).toBe(true);
        }
      }),
      { numRuns: 40 },
    );
    // Both outcomes, often: a generator whose commits were all refused (or all taken) would prove little.
    expect(outcomes.accepted).toBeGreaterThan(10);
    expect(outcomes.refused).toBeGreaterThan(10);
  }, 120_000);
});
