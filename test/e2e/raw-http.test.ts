import { connect } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PROBLEM_CONTENT_TYPE } from "../../protocol/errors.js";
import { Problem } from "../../protocol/schemas.js";
import { savedLocalEdge, startLocalEdge, type LocalEdge } from "../support/local-edge.js";

interface Exchange {
  status: number;
  headers: Map<string, string>;
  body: string;
  /** Milliseconds from sending to the first byte of the answer. */
  answeredMs: number;
  /** Whether the edge closed the connection within the wait. */
  closed: boolean;
}

/**
 * Writes `request` to the edge byte for byte, as no HTTP client would, and reads what comes back
 * until the edge closes the connection or `waitMs` passes.
 */
function exchange(edge: LocalEdge, request: string, waitMs = 4000): Promise<Exchange> {
  const { hostname, port } = new URL(edge.baseURL);
  return new Promise((resolve, reject) => {
    const socket = connect(Number(port), hostname);
    const started = Date.now();
    let answeredMs = -1;
    let raw = "";
    const done = (closed: boolean) => {
      clearTimeout(timer);
      socket.destroy();
      const [head = "", body = ""] = raw.split(/\r\n\r\n(.*)/s);
      const [statusLine = "", ...lines] = head.split("\r\n");
      const status = Number(statusLine.split(" ")[1]);
      if (!Number.isInteger(status)) return reject(new Error(`No HTTP answer: ${JSON.stringify(raw)}`));
      const headers = new Map(
        lines.map((line) => [line.slice(0, line.indexOf(":")).toLowerCase(), line.slice(line.indexOf(":") + 1).trim()]),
      );
      resolve({ status, headers, body, answeredMs, closed });
    };
    const timer = setTimeout(() => done(false), waitMs);
    socket.on("data", (chunk) => {
      if (answeredMs < 0) answeredMs = Date.now() - started;
      raw += chunk.toString("latin1");
    });
    socket.on("error", () => {});
    socket.on("close", () => done(true));
    socket.write(Buffer.from(request, "latin1"));
  });
}

function expectProblem(answer: Exchange, status: number, code: string): Problem {
  expect(answer.status, answer.body).toBe(status);
  expect(answer.headers.get("content-type")).toBe(PROBLEM_CONTENT_TYPE);
  const problem = Problem.parse(JSON.parse(answer.body));
  expect(problem.code).toBe(code);
  // No request here sends an X-Request-Id: the edge mints a v4 UUID.
  expect(problem.instance).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  expect(answer.headers.get("x-request-id")).toBe(problem.instance);
  return problem;
}

/** Malformed HTTP sent over a raw socket to the local edge that `npm start` runs. */
describe("malformed HTTP at the local edge", () => {
  let edge: LocalEdge;
  let admin: string;

  beforeAll(async () => {
    edge = await startLocalEdge({ vars: { BODY_TIMEOUT_SECONDS: "1" } });
    admin = `Authorization: Bearer ${savedLocalEdge(edge).adminSecret}\r\n`;
  });
  afterAll(async () => {
    await edge?.stop();
  });

  it("answers a body that stops short of its Content-Length with a problem+json 408 and closes the connection", async () => {
    const answer = await exchange(
      edge,
      `POST /admin/orgs HTTP/1.1\r\nHost: x\r\n${admin}Content-Type: application/json\r\n` +
        `Content-Length: 100\r\n\r\n{"name": "Sl`,
    );
    expectProblem(answer, 408, "request_timeout");
    expect(answer.answeredMs).toBeGreaterThanOrEqual(950);
    expect(answer.closed).toBe(true);
  });

  it("refuses a request before its stalled body is read, and workerd closes the connection soon after", async () => {
    const answer = await exchange(
      edge,
      "POST /v1/keys HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{",
    );
    // 401, not the 408 that waiting out the stalled body would have given.
    expectProblem(answer, 401, "unauthenticated");
    expect(answer.closed).toBe(true);
  });

  it("answers a chunked body that never ends with a problem+json 408", async () => {
    const answer = await exchange(
      edge,
      `POST /admin/orgs HTTP/1.1\r\nHost: x\r\n${admin}Content-Type: application/json\r\n` +
        `Transfer-Encoding: chunked\r\n\r\n5\r\n{"nam\r\n`,
    );
    expectProblem(answer, 408, "request_timeout");
  });

  it("answers malformed chunked framing with a problem+json 400, not a 500", async () => {
    const answer = await exchange(
      edge,
      `POST /admin/orgs HTTP/1.1\r\nHost: x\r\n${admin}Content-Type: application/json\r\n` +
        `Transfer-Encoding: chunked\r\n\r\nzz\r\n`,
    );
    expectProblem(answer, 400, "invalid_request");
  });

  it("answers a method no route takes with a problem+json 404", async () => {
    expectProblem(
      await exchange(edge, "PROPFIND /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"),
      404,
      "not_found",
    );
  });

  /**
   * What docs/http-api.md's "Errors" section says workerd answers itself, before the Worker runs: no
   * request id and no problem document. A workerd that starts passing any of these to the Worker
   * fails here, and that page must change with it.
   */
  const runtime: [string, string, number][] = [
    ["an unknown method", "FOO /healthz HTTP/1.1\r\nHost: x\r\n\r\n", 501],
    ["a negative Content-Length", "POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n", 500],
    [
      "two different Content-Lengths",
      "POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n{}",
      500,
    ],
    ["an unknown Transfer-Encoding", "POST /healthz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", 500],
    ["the request target *", "OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n", 500],
    ["an absolute request target", "GET http://127.0.0.1/healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 500],
    ["an invalid Host", "GET /healthz HTTP/1.1\r\nHost: a b\r\n\r\n", 500],
    ["CONNECT", "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n", 500],
    ["no Host", "GET /healthz HTTP/1.1\r\n\r\n", 400],
    ["headers over workerd's limit", `GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ${"a".repeat(200_000)}\r\n\r\n`, 431],
  ];
  for (const [what, request, status] of runtime) {
    it(`leaves ${what} to workerd: ${status}, without a request id or a problem document`, async () => {
      const answer = await exchange(edge, request, 1000);
      expect(answer.status, answer.body).toBe(status);
      expect(answer.headers.has("x-request-id")).toBe(false);
      expect(answer.headers.get("content-type")).not.toBe(PROBLEM_CONTENT_TYPE);
    });
  }
});
