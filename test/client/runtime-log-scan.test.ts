import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { isRuntimeFault, scanRuntimeLogFiles } from "../../scripts/runtime-log-scan.js";

// As workerd writes them (the first two coloured red by Miniflare), each cut after its first sentence.
const CROSS_REQUEST =
  "\x1b[31m✘ [ERROR] Uncaught (in promise) Error: Cannot perform I/O on behalf of a different request. " +
  "I/O objects (such as streams, request/response bodies, and others) created in the context of one request " +
  "handler cannot be accessed from a different request's handler. (I/O type: Writable)\x1b[39m";
const CROSS_OBJECT =
  "\x1b[31mError: Cannot perform I/O on behalf of a different Durable Object. I/O objects (such as streams, " +
  "request/response bodies, and others) created in the context of one Durable Object cannot be accessed from a " +
  "different Durable Object.\x1b[39m";
const HUNG =
  "Error: The Workers runtime canceled this request because it detected that your Worker's code had hung and " +
  "would never generate a response. Refer to: https://developers.cloudflare.com/workers/observability/errors/";
const ORDINARY = [
  "[wrangler:info] GET /healthz 200 OK (3ms)",
  " ✓ |node| test/e2e/raw-http.test.ts (7 tests) 5012ms",
  "a retry goes out as a different request after the edge hung up",
];

describe("the runtime log scan", () => {
  const dir = mkdtempSync(join(tmpdir(), "sextant-log-scan-"));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it("flags the runtime's cross-request, cross-object and hung-request messages and nothing else", () => {
    for (const line of [CROSS_REQUEST, CROSS_OBJECT, HUNG]) expect(isRuntimeFault(line)).toBe(true);
    for (const line of ORDINARY) expect(isRuntimeFault(line)).toBe(false);
  });

  it("names each offending line by its file and line number, across files", async () => {
    const output = join(dir, "output.log");
    const edge = join(dir, "edge.log");
    const clean = join(dir, "clean.log");
    writeFileSync(output, [ORDINARY[0], ORDINARY[1], HUNG, ""].join("\n"));
    writeFileSync(edge, [CROSS_REQUEST, ...ORDINARY, "x".repeat(2 ** 20), CROSS_OBJECT].join("\r\n"));
    writeFileSync(clean, ORDINARY.join("\n"));
    expect(await scanRuntimeLogFiles([output, edge, clean])).toEqual([
      { file: output, line: 3, text: HUNG },
      { file: edge, line: 1, text: CROSS_REQUEST },
      { file: edge, line: 6, text: CROSS_OBJECT },
    ]);
  });

  it("passes logs without them", async () => {
    const clean = join(dir, "only-ordinary.log");
    writeFileSync(clean, ORDINARY.join("\n"));
    expect(await scanRuntimeLogFiles([clean])).toEqual([]);
  });
});
