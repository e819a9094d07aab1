import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { explainUncaught, explainUncaughtFile, QuietFilter } from "../../scripts/uncaught-log.js";

// Lines as the Worker tests' pool writes them in a full run's output; workerd's native stacks cut short.
const REFUSED = [
  "exception = kj/async-io-unix.c++:1538: disconnected: connect(): Connection refused",
  "stack: /x/node_modules/@cloudflare/workerd-linux-64/bin/workerd@52008e2 /x/node_modules/@cloudflare/workerd-linux-64/bin/workerd@5200ac5",
];
const LOST_PROMISE = "uncaught exception; source = Uncaught (in promise); stack = Error: Network connection lost.";
const LOST_CONTEXT = [
  "uncaught exception; exception = workerd/jsg/_virtual_includes/iterator/workerd/jsg/value.h:1480: disconnected: jsg.Error: Network connection lost.",
  "stack: /x/node_modules/@cloudflare/workerd-linux-64/bin/workerd@2f20430 /x/node_modules/@cloudflare/workerd-linux-64/bin/workerd@2f2102c",
];
/** The health object's alarm probing its three backends, none listening: each fetch caught. */
const PROBES = [...[1, 2, 3].flatMap(() => [...REFUSED, LOST_PROMISE]), ...[1, 2, 3].flatMap(() => LOST_CONTEXT)];
/** A test sending a Durable Object a bad commit over RPC and expecting the rejection. */
const RPC_THROW = [
  "uncaught exception; source = Uncaught (in promise); stack = TypeError: Invalid commit: [",
  "  {",
  '    "code": "custom",',
  '    "path": [',
  '      "upserts",',
  "      1",
  "    ],",
  '    "message": "`AAAA` is already upserted as upserts.0"',
  "  }",
  "]",
  "    at parse (/x/durable-objects/workspace-rpc.ts:164:30)",
  "    at parseCommit (/x/durable-objects/commit.ts:67:19)",
  "    at Workspace.commit (/x/durable-objects/workspace.ts:158:20)",
  "    at DurableObject.fn (x/node_modules/@cloudflare/vitest-pool-workers/dist/worker/lib/cloudflare/test-internal.mjs:362:45)",
];
const ORDINARY = [
  "exception = workerd/api/web-socket.c++:821: disconnected: WebSocket peer disconnected",
  " ✓  worker  test/worker/limits.test.ts (8 tests) 4611ms",
  '{"level":"warn","message":"no backend answered","pool":"embed","code":"upstream_failure","attempts":1}',
];

// Real ones: what workerd writes when an exception escapes a request, a waitUntil or an alarm.
/** A waitUntil promise (a D1 write) that rejected with nobody to catch it. */
const WAIT_UNTIL_REJECTED = [
  'uncaught exception; source = Uncaught (in promise); stack = Error: Failed query: update "api_keys" set "last_used_at" = ? where "api_keys"."id" = ?',
  "params: 1796656195968,key_9oywitjj74emcpbg059s",
  "    at D1PreparedQuery.queryWithCache (/x/node_modules/src/sqlite-core/session.ts:80:11)",
  "    at touchApiKey (/x/workers/db/accounts.ts:130:3)",
  'uncaught exception; exception = workerd/jsg/_virtual_includes/iterator/workerd/jsg/value.h:1480: failed: jsg.Error: Failed query: update "api_keys" set "last_used_at" = ? where "api_keys"."id" = ?',
];
/** A fetch to a closed port under waitUntil with no catch: the pair once more, with no refused connection of its own. */
const FETCH_ESCAPED = [...REFUSED, LOST_PROMISE, LOST_CONTEXT[0]!, LOST_PROMISE, LOST_CONTEXT[0]!];
/** A Worker that awaits a Durable Object's RPC call without handling its rejection: the callee's line, then its own. */
const RPC_UNHANDLED = [
  "uncaught exception; source = Uncaught (in promise); stack = TypeError: boom",
  "    at Workspace.commit (/x/durable-objects/workspace.ts:158:20)",
  "    at DurableObject.fn (x/node_modules/@cloudflare/vitest-pool-workers/dist/worker/lib/cloudflare/test-internal.mjs:362:45)",
  "uncaught exception; source = Uncaught (in promise); stack = TypeError: boom",
  "    at async Object.fetch (/x/workers/index.ts:16:34)",
  "uncaught exception; exception = workerd/jsg/_virtual_includes/iterator/workerd/jsg/value.h:1480: failed: jsg.TypeError: boom",
];
/** An object's method handing waitUntil a promise that rejects: its stack ends in the RPC entry too. */
const OBJECT_WAIT_UNTIL = [
  "uncaught exception; source = Uncaught (in promise); stack = Error: waitUntil in the object",
  "    at Workspace.commit (/x/durable-objects/workspace.ts:160:20)",
  "    at DurableObject.fn (x/node_modules/@cloudflare/vitest-pool-workers/dist/worker/lib/cloudflare/test-internal.mjs:362:45)",
  "uncaught exception; exception = workerd/jsg/_virtual_includes/iterator/workerd/jsg/value.h:1480: failed: jsg.Error: waitUntil in the object",
];

const log = (...parts: string[][]) => parts.flat().join("\n");
/** The 1-based lines of `lines` that say `uncaught exception` from `from` on. */
const uncaughtLines = (lines: string[], from = 0) =>
  lines.flatMap((text, i) => (i >= from && /uncaught exception/i.test(text) ? [i + 1] : []));

describe("the uncaught exception rules", () => {
  const dir = mkdtempSync(join(tmpdir(), "sextant-uncaught-"));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it("explain an object restarted on purpose, and no other abort", () => {
    const restarted =
      "uncaught exception; exception = workerd/api/actor-state.c++:1142: failed: broken.outputGateBroken; jsg.Error: restarted by an operator";
    const other =
      "uncaught exception; exception = workerd/api/actor-state.c++:1142: failed: broken.outputGateBroken; jsg.Error: something else";
    const report = explainUncaught(log([restarted, "stack: workerd@1", other]));
    expect(report.explained["operator-restart"]).toBe(1);
    expect(report.unexplained.map((at) => at.line)).toEqual([3]);
    const filter = new QuietFilter();
    expect(filter.write(`${restarted}\nstack: workerd@1\n${other}\n`) + filter.end()).toBe(`${other}\n`);
  });

  it("explain a lake fault a test injected, and no other exception thrown outside the pool", () => {
    const injected = [
      "uncaught exception; source = Uncaught (in promise); stack = Error: injected lake fault: the file was written, not committed",
      "    at /x/durable-objects/lake/partition.ts:131:15",
    ];
    const other = [
      "uncaught exception; source = Uncaught (in promise); stack = Error: a real fault",
      "    at /x/durable-objects/lake/partition.ts:140:15",
    ];
    const report = explainUncaught(log(injected, other));
    expect(report.explained["injected-fault"]).toBe(1);
    expect(report.unexplained.map((at) => at.line)).toEqual([3]);
    const filter = new QuietFilter();
    expect(filter.write(`${[...injected, ...other].join("\n")}\n`) + filter.end()).toBe(`${other.join("\n")}\n`);
  });

  it("explain a passing run's probes of closed ports and an object's refusals over RPC, and nothing is left", () => {
    const report = explainUncaught(log(ORDINARY, PROBES, RPC_THROW, REFUSED, [LOST_PROMISE], LOST_CONTEXT, PROBES));
    expect(report).toEqual({
      explained: { "refused-connect": 14, "rpc-throw": 1, "operator-restart": 0, "injected-fault": 0 },
      unexplained: [],
    });
  });

  it("read colours and Windows line ends the same, from a file", async () => {
    const file = join(dir, "output.log");
    writeFileSync(file, [...PROBES, ...RPC_THROW].map((line) => `\x1b[90m${line}\x1b[39m`).join("\r\n"));
    expect(await explainUncaughtFile(file)).toEqual({
      explained: { "refused-connect": 6, "rpc-throw": 1, "operator-restart": 0, "injected-fault": 0 },
      unexplained: [],
    });
  });

  it("report a waitUntil promise that rejected, both its lines", () => {
    const lines = [...PROBES, ...WAIT_UNTIL_REJECTED, ...RPC_THROW];
    const report = explainUncaught(lines.join("\n"));
    expect(report.unexplained.map((at) => at.line)).toEqual(
      uncaughtLines(WAIT_UNTIL_REJECTED).map((n) => n + PROBES.length),
    );
    expect(report.explained).toEqual({
      "refused-connect": 6,
      "rpc-throw": 1,
      "operator-restart": 0,
      "injected-fault": 0,
    });
  });

  it("report a fetch's rejection that escaped, beside fetches that were caught", () => {
    const lines = [...PROBES, ...FETCH_ESCAPED];
    const report = explainUncaught(lines.join("\n"));
    expect(report.explained["refused-connect"]).toBe(8);
    expect(report.unexplained).toHaveLength(2);
    expect(report.unexplained.map((at) => at.text)).toEqual([LOST_PROMISE, LOST_CONTEXT[0]]);
  });

  it("report connection-lost lines with no refused connection to pair with", () => {
    expect(explainUncaught(log([LOST_PROMISE], LOST_CONTEXT)).unexplained.map((at) => at.line)).toEqual([1, 2]);
  });

  it("report the caller of an RPC that did not handle its rejection, and an object's waitUntil that rejected", () => {
    const unhandled = explainUncaught(RPC_UNHANDLED.join("\n"));
    expect(unhandled.explained["rpc-throw"]).toBe(1);
    expect(unhandled.unexplained.map((at) => at.line)).toEqual(uncaughtLines(RPC_UNHANDLED, 1));
    const waitUntil = explainUncaught(OBJECT_WAIT_UNTIL.join("\n"));
    expect(waitUntil.unexplained.map((at) => at.line)).toEqual([4]);
  });

  it("report any other uncaught exception, however it is written", () => {
    const lines = [
      "uncaught exception; source = Uncaught; stack = Error: handler threw",
      "    at Object.fetch (/x/workers/index.ts:3:9)",
      "workerd/server/server.c++:5492: error: Uncaught exception: kj/compat/http.c++:2330: failed: invalid Content-Length header value",
      // An RPC entry's frame that is not the outermost does not make the exception the caller's.
      "uncaught exception; source = Uncaught (in promise); stack = Error: later",
      "    at DurableObject.fn (x/node_modules/@cloudflare/vitest-pool-workers/dist/worker/lib/cloudflare/test-internal.mjs:362:45)",
      "    at alarm (/x/durable-objects/workspace.ts:9:1)",
    ];
    expect(explainUncaught(lines.join("\n")).unexplained.map((at) => at.line)).toEqual([1, 3, 4]);
  });
});

describe("what npm test prints of vitest's output", () => {
  /** `text` through a filter in pieces of `size` bytes, as a pipe may cut it. */
  function printed(text: string, size: number): string {
    const filter = new QuietFilter();
    const bytes = Buffer.from(text);
    let out = "";
    for (let at = 0; at < bytes.length; at += size) out += filter.write(bytes.subarray(at, at + size));
    return out + filter.end();
  }

  it("leaves out the lines the rules name, and shows everything else whole, however the pipe cuts it", () => {
    const shown = [ORDINARY[0]!, ...WAIT_UNTIL_REJECTED, ORDINARY[1]!, ...RPC_UNHANDLED.slice(3), "tést ✓ done"];
    const text = log(PROBES, [ORDINARY[0]!], RPC_THROW, WAIT_UNTIL_REJECTED, [ORDINARY[1]!], RPC_UNHANDLED, [
      "tést ✓ done",
    ]);
    for (const size of [1, 7, 64, 1 << 20]) expect(printed(text + "\n", size)).toBe(shown.join("\n") + "\n");
    // A last line with no line end stays so.
    expect(printed(log([ORDINARY[2]!], PROBES, ["tail"]), 5)).toBe(`${ORDINARY[2]}\ntail`);
  });

  it("shows a thrown exception whose stack does not end in the RPC entry, with its stack", () => {
    const lines = [
      "uncaught exception; source = Uncaught; stack = Error: handler threw",
      "    at Object.fetch (/x/workers/index.ts:3:9)",
      ORDINARY[1]!,
    ];
    expect(printed(lines.join("\n"), 3)).toBe(lines.join("\n"));
  });
});
