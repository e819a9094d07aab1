import { createExecutionContext, env, waitOnExecutionContext } from "cloudflare:test";
import { Hono } from "hono";
import { requestId } from "hono/request-id";
import { describe, expect, it } from "vitest";
import worker from "../../workers/index.js";
import { ERROR_CODES } from "../../protocol/errors.js";
import { Health, Org } from "../../protocol/schemas.js";
import { problemResponse, thrownAsErrors, toApiError } from "../../workers/problem.js";
import { call, createAccount, expectJson, expectProblem, ORIGIN } from "./harness.js";

/**
 * A POST through the Worker's real fetch handler whose body is `chunks` and then, unless `end`
 * says how, never ends; with a one-second body timeout.
 */
async function postStreamed(
  path: string,
  token: string,
  chunks: string[],
  end: "never" | "error" | "close" = "never",
): Promise<{ response: Response; ms: number }> {
  const body = new ReadableStream<Uint8Array>({
    start(controller) {
      for (const chunk of chunks) controller.enqueue(new TextEncoder().encode(chunk));
      if (end === "error") controller.error(new Error("connection reset"));
      if (end === "close") controller.close();
    },
  });
  const request = new Request(`${ORIGIN}${path}`, {
    method: "POST",
    headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json", "X-Request-Id": "slow-1" },
    body,
  });
  const ctx = createExecutionContext();
  const started = Date.now();
  const response = await worker.fetch(request, { ...env, BODY_TIMEOUT_SECONDS: "1" } as unknown as Env, ctx);
  const ms = Date.now() - started;
  await waitOnExecutionContext(ctx);
  return { response, ms };
}

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

  it("answers a request body that stops arriving with a problem+json 408 after BODY_TIMEOUT_SECONDS", async () => {
    const { response, ms } = await postStreamed("/admin/orgs", env.ADMIN_SECRET, ['{"name": "Sl']);
    const problem = await expectProblem(response, 408, "request_timeout");
    expect(problem.instance).toBe("slow-1");
    // Not before the timeout; how long after is the machine's business (the test's own timeout bounds it).
    expect(ms).toBeGreaterThanOrEqual(950);
  });

  it("times out a stalled body on the gateway, whose read starts before the key is checked", async () => {
    const { key } = await createAccount();
    const { response } = await postStreamed("/v1/completions", key.key, ['{"model": "tab-test", "pro']);
    await expectProblem(response, 408, "request_timeout");
  });

  it("reads a body that arrives in pieces within the timeout", async () => {
    const { response } = await postStreamed("/admin/orgs", env.ADMIN_SECRET, ['{"name": ', '"Chunked"}'], "close");
    expect((await expectJson(response, 201, Org)).name).toBe("Chunked");
  });

  it("answers a request body whose stream breaks with a problem+json 400, not a 500", async () => {
    const { response } = await postStreamed("/admin/orgs", env.ADMIN_SECRET, ['{"name": "Br'], "error");
    const problem = await expectProblem(response, 400, "invalid_request");
    expect(problem.detail).toContain("could not be read");
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
