import { createExecutionContext, env, waitOnExecutionContext } from "cloudflare:test";
import { Hono } from "hono";
import { requestId } from "hono/request-id";
import { describe, expect, it } from "vitest";
import worker from "../../workers/index.js";
import { ERROR_CODES } from "../../protocol/errors.js";
import { Health } from "../../protocol/schemas.js";
import { problemResponse, thrownAsErrors, toApiError } from "../../workers/problem.js";
import { call, expectJson, expectProblem, ORIGIN } from "./harness.js";

describe("HTTP conventions", () => {
  it("serves /healthz without credentials", async () => {
    const health = await expectJson(await call("/healthz"), 200, Health);
    expect(health.status).toBe("ok");
  });

  it("mints a request id when none is sent and echoes it", async () => {
    const response = await call("/healthz");
    expect(response.headers.get("X-Request-Id")).toMatch(/^[0-9a-f-]{36}$/);
  });

  it("echoes a caller's request id", async () => {
    const response = await call("/healthz", { headers: { "X-Request-Id": "editor-42_abc" } });
    expect(response.headers.get("X-Request-Id")).toBe("editor-42_abc");
  });

  it("replaces a request id with unsafe characters instead of reflecting it", async () => {
    const response = await call("/healthz", { headers: { "X-Request-Id": "<script>" } });
    expect(response.headers.get("X-Request-Id")).not.toBe("<script>");
  });

  it("answers an unknown route with a problem+json 404 carrying the request id", async () => {
    const problem = await expectProblem(
      await call("/nope", { headers: { "X-Request-Id": "req-1" } }),
      404,
      "not_found",
    );
    expect(problem.instance).toBe("req-1");
  });

  it("answers an unknown method on a known path with a problem+json 404", async () => {
    await expectProblem(await call("/healthz", { method: "DELETE" }), 404, "not_found");
  });

  it("documents every error code at its problem type", async () => {
    for (const code of Object.keys(ERROR_CODES)) {
      const response = await call(`/errors/${code}`);
      expect(response.status).toBe(200);
      expect(await response.json()).toMatchObject({
        code,
        status: ERROR_CODES[code as keyof typeof ERROR_CODES].status,
      });
    }
    await expectProblem(await call("/errors/teapot"), 404, "not_found");
  });

  it("refuses to serve with an invalid environment, as a problem+json 500 that hides the detail", async () => {
    const ctx = createExecutionContext();
    const response = await worker.fetch(
      new Request(`${ORIGIN}/healthz`),
      { ...env, MAX_BODY_BYTES: "lots" } as unknown as Env,
      ctx,
    );
    await waitOnExecutionContext(ctx);
    const problem = await expectProblem(response, 500, "internal");
    expect(problem.detail).not.toContain("MAX_BODY_BYTES");
  });

  it("turns a thrown value that is not an Error into a problem+json 500 with the request id", async () => {
    const app = new Hono()
      .use(requestId({ headerName: "X-Request-Id" }))
      .use(thrownAsErrors)
      .get("/", () => {
        throw "a bare string";
      });
    app.onError((err, c) => problemResponse(c, toApiError(err, c.get("requestId"))));
    const problem = await expectProblem(
      await app.request("/", { headers: { "X-Request-Id": "bare-1" } }),
      500,
      "internal",
    );
    expect(problem.instance).toBe("bare-1");
    expect(problem.detail).not.toContain("a bare string");
  });
});
