import { SELF } from "cloudflare:test";
import OpenAI from "openai";
import { beforeAll, describe, expect, it } from "vitest";
import { PROBLEM_CONTENT_TYPE } from "../../protocol/errors.js";
import { gateway } from "../../workers/gateway/routes.js";
import { isOpenAIPath } from "../../workers/openai-errors.js";
import { call, createAccount, expectProblem, ORIGIN, type Account } from "./harness.js";

/**
 * The official `openai` SDK against the Worker's real fetch handler: what its users switch on
 * (`instanceof`, `error.type`, `error.code`, `error.param`) must be what OpenAI's API answers.
 */
const client = (apiKey: string) =>
  new OpenAI({
    apiKey,
    baseURL: `${ORIGIN}/v1`,
    maxRetries: 0,
    timeout: 30_000,
    fetch: (input, init) => SELF.fetch(input, init),
  });

type APIError = InstanceType<typeof OpenAI.APIError>;

async function refusal(request: Promise<unknown> | (() => Promise<unknown>)): Promise<APIError> {
  const err = await (typeof request === "function" ? request() : request).then(
    () => undefined,
    (e: unknown) => e,
  );
  if (!(err instanceof OpenAI.APIError)) throw new Error(`expected an APIError, got ${String(err)}`);
  // The SDK reads the id from the header: the same one the problem document names.
  expect(err.requestID).toMatch(/^[0-9a-f-]{36}$/);
  return err;
}

const chat = { model: "chat-none", messages: [{ role: "user" as const, content: "x" }] };

let account: Account;
beforeAll(async () => {
  account = await createAccount({ plan: "pro" });
});

describe("the OpenAI-compatible routes' errors, through the openai SDK", () => {
  it("names every route of the gateway as OpenAI-compatible, and no other route", () => {
    for (const route of gateway.routes) expect(isOpenAIPath(`/v1${route.path}`), route.path).toBe(true);
    for (const path of ["/v1/me", "/v1/keys", "/v1/workspaces", "/v1/events", "/v1/usage", "/v1/agents/tasks"])
      expect(isOpenAIPath(path), path).toBe(false);
  });

  it("answers a wrong key with AuthenticationError, invalid_request_error and invalid_api_key on each route", async () => {
    const sdk = client("sxt_not-a-real-key");
    for (const request of [
      () => sdk.models.list(),
      () => sdk.completions.create({ model: "tab-test", prompt: "x" }),
      () => sdk.chat.completions.create(chat),
      () => sdk.responses.create({ model: "chat-none", input: "x" }),
      () => sdk.embeddings.create({ model: "embed-none", input: "x" }),
    ]) {
      const err = await refusal(request);
      expect(err).toBeInstanceOf(OpenAI.AuthenticationError);
      expect({ type: err.type, code: err.code, param: err.param }).toEqual({
        type: "invalid_request_error",
        code: "invalid_api_key",
        param: null,
      });
    }
  });

  it("answers an unknown model with NotFoundError and model_not_found", async () => {
    const sdk = client(account.key.key);
    for (const request of [
      () => sdk.completions.create({ model: "no-such-model", prompt: "x" }),
      () => sdk.chat.completions.create({ ...chat, model: "no-such-model" }),
      () => sdk.responses.create({ model: "no-such-model", input: "x" }),
      () => sdk.embeddings.create({ model: "no-such-model", input: "x" }),
    ]) {
      const err = await refusal(request);
      expect(err).toBeInstanceOf(OpenAI.NotFoundError);
      expect(err.message).toContain("No model named no-such-model");
      expect({ type: err.type, code: err.code }).toEqual({ type: "invalid_request_error", code: "model_not_found" });
    }
  });

  it("answers a bad body with BadRequestError, invalid_request_error, OpenAI's code and the field as param", async () => {
    const sdk = client(account.key.key);
    const cases: [() => Promise<unknown>, string, string | null][] = [
      [() => sdk.chat.completions.create({ ...chat, messages: [] }), "empty_array", "messages"],
      [() => sdk.chat.completions.create({ messages: chat.messages } as never), "missing_required_parameter", "model"],
      [() => sdk.chat.completions.create({ ...chat, model: 42 } as never), "invalid_type", "model"],
      [
        () => sdk.chat.completions.create({ ...chat, messages: [{ role: 7, content: "x" }] } as never),
        "invalid_type",
        "messages[0].role",
      ],
      [() => sdk.completions.create({ model: "tab-test", prompt: "x", n: 2 }), "invalid_value", "n"],
      [() => sdk.responses.create({ model: " ", input: "x" }), "invalid_value", "model"],
    ];
    for (const [request, code, param] of cases) {
      const err = await refusal(request);
      expect(err).toBeInstanceOf(OpenAI.BadRequestError);
      expect({ type: err.type, code: err.code, param: err.param }).toEqual({
        type: "invalid_request_error",
        code,
        param,
      });
    }
  });

  it("answers malformed JSON with invalid_request_error and no code, as OpenAI does", async () => {
    const response = await call("/v1/chat/completions", { token: account.key.key, body: '{"model": ' });
    const problem = await expectProblem(response, 400, "invalid_request");
    expect(problem.error).toEqual({
      message: problem.detail,
      type: "invalid_request_error",
      code: null,
      param: null,
    });
  });

  // A tokens limit (type `tokens`) needs tokens spent, which needs a backend: test/e2e/gateway.test.ts.
  it("answers a request limit with RateLimitError, rate_limit_exceeded and type requests", async () => {
    // The free plan's embeddings take 5 requests a minute here (vitest.config.ts).
    const free = await createAccount({ plan: "free" });
    const sdk = client(free.key.key);
    let err: APIError | undefined;
    for (let i = 0; i < 10 && !(err instanceof OpenAI.RateLimitError); i++)
      err = await refusal(sdk.embeddings.create({ model: "embed-none", input: "x" }));
    expect(err).toBeInstanceOf(OpenAI.RateLimitError);
    expect({ type: err!.type, code: err!.code }).toEqual({ type: "requests", code: "rate_limit_exceeded" });
    expect(err!.headers?.get("retry-after")).toMatch(/^\d+$/);
  });

  it("answers a failure on the backends' side with InternalServerError and server_error", async () => {
    // The tab pool's backends listen nowhere (vitest.config.ts).
    const err = await refusal(client(account.key.key).completions.create({ model: "tab-test", prompt: "x" }));
    expect(err).toBeInstanceOf(OpenAI.InternalServerError);
    expect(err.status).toBeGreaterThanOrEqual(502);
    expect({ type: err.type, code: err.code, param: err.param }).toEqual({
      type: "server_error",
      code: null,
      param: null,
    });
  });

  it("keeps the problem document and Sextant's code beside OpenAI's envelope", async () => {
    const response = await call("/v1/chat/completions", { token: "sxt_not-a-real-key", body: chat });
    expect(response.headers.get("Content-Type")).toBe(PROBLEM_CONTENT_TYPE);
    const problem = await expectProblem(response, 401, "unauthenticated");
    expect(problem.error).toMatchObject({ type: "invalid_request_error", code: "invalid_api_key" });
  });
});

describe("Sextant's own routes", () => {
  it("keep Sextant's codes in the envelope", async () => {
    const problem = await expectProblem(await call("/v1/me", { token: "sxt_not-a-real-key" }), 401, "unauthenticated");
    expect(problem.error).toEqual({ message: problem.detail, type: "unauthenticated", code: "unauthenticated" });
    const missing = await expectProblem(await call("/v1/nope", { token: account.key.key }), 404, "not_found");
    expect(missing.error).toMatchObject({ type: "not_found", code: "not_found" });
  });
});
