import { getEventListeners } from "node:events";
import { describe, expect, it } from "vitest";
import { generateApiKey } from "../../protocol/api-key.js";
import { PROBLEM_CONTENT_TYPE, type ErrorCode } from "../../protocol/errors.js";
import {
  APIConnectionError,
  APITimeoutError,
  AuthenticationError,
  InternalServerError,
  InvalidResponseError,
  NotFoundError,
  RateLimitError,
  Sextant,
  SextantError,
} from "../../client/sdk/index.js";
import { retryDelay } from "../../client/sdk/http.js";

const me = {
  org: { id: "org_1", name: "Acme", plan: "pro", createdAt: "2026-01-01T00:00:00.000Z" },
  user: {
    id: "usr_1",
    orgId: "org_1",
    email: "a@acme.dev",
    name: null,
    role: "owner",
    createdAt: "2026-01-01T00:00:00.000Z",
  },
  key: {
    id: "key_1",
    orgId: "org_1",
    userId: "usr_1",
    name: "k",
    prefix: "sxt_abcdefgh",
    createdAt: "2026-01-01T00:00:00.000Z",
    expiresAt: null,
    revokedAt: null,
    lastUsedAt: null,
  },
};

const json = (body: unknown, status = 200, headers: Record<string, string> = {}) =>
  new Response(JSON.stringify(body), { status, headers: { "Content-Type": "application/json", ...headers } });

const problem = (status: number, code: ErrorCode, headers: Record<string, string> = {}) =>
  new Response(
    JSON.stringify({ type: `/errors/${code}`, title: code, status, detail: `${code} detail`, instance: "req-9", code }),
    { status, headers: { "Content-Type": PROBLEM_CONTENT_TYPE, ...headers } },
  );

/** A scripted `fetch`: answers each call with the next response and records what it was sent. */
function scripted(...responses: (Response | Error | (() => Promise<Response>))[]) {
  const calls: { url: string; init: RequestInit }[] = [];
  const fetch = async (input: RequestInfo | URL, init: RequestInit = {}) => {
    calls.push({ url: String(input), init });
    const next = responses.shift();
    if (!next) throw new Error("no more scripted responses");
    if (next instanceof Error) throw next;
    return typeof next === "function" ? next() : next;
  };
  return { fetch: fetch as typeof globalThis.fetch, calls };
}

const client = (fetch: typeof globalThis.fetch, extra: Partial<ConstructorParameters<typeof Sextant>[0]> = {}) =>
  new Sextant({ apiKey: generateApiKey(), baseURL: "https://edge.example/", fetch, maxRetries: 2, ...extra });

describe("Sextant SDK", () => {
  it("sends the key as a bearer token and validates the response", async () => {
    const { fetch, calls } = scripted(json(me));
    const apiKey = generateApiKey();
    const result = await new Sextant({ apiKey, baseURL: "https://edge.example/base", fetch }).me();
    expect(result.org.name).toBe("Acme");
    expect(calls[0]!.url).toBe("https://edge.example/base/v1/me");
    const headers = calls[0]!.init.headers as Record<string, string>;
    expect(headers.Authorization).toBe(`Bearer ${apiKey}`);
    expect(headers["X-Request-Id"]).toMatch(/^sdk-/);
  });

  it("refuses a missing or malformed key before making any request", () => {
    const { fetch, calls } = scripted();
    expect(() => new Sextant({ apiKey: "sk-123", fetch })).toThrow(SextantError);
    expect(() => new Sextant({ apiKey: "", fetch })).toThrow(/No API key/);
    expect(calls).toHaveLength(0);
  });

  it("throws a typed error carrying status, code and request id", async () => {
    const { fetch } = scripted(problem(404, "not_found"));
    const error = await client(fetch)
      .keys.revoke("key_x")
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(NotFoundError);
    expect(error).toMatchObject({ status: 404, code: "not_found", requestId: "req-9" });
  });

  it("maps a non-problem error body by its status", async () => {
    const { fetch } = scripted(new Response("bad gateway", { status: 401 }));
    const error = await client(fetch, { maxRetries: 0 })
      .me()
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(AuthenticationError);
    expect(error).toMatchObject({ code: "unauthenticated" });
  });

  it("retries 429 and 503 for any method, keeping one request id", async () => {
    const { fetch, calls } = scripted(
      problem(429, "rate_limited", { "Retry-After": "0" }),
      problem(503, "unavailable", { "Retry-After": "0" }),
      json({ ...me.key, key: generateApiKey() }, 201),
    );
    const created = await client(fetch).keys.create({ name: "x" });
    expect(created.key).toMatch(/^sxt_/);
    expect(calls).toHaveLength(3);
    const ids = calls.map((c) => (c.init.headers as Record<string, string>)["X-Request-Id"]);
    expect(new Set(ids).size).toBe(1);
  });

  it("waits as long as Retry-After says", async () => {
    const { fetch } = scripted(problem(429, "rate_limited", { "Retry-After": "0.3" }), json(me));
    const started = performance.now();
    await client(fetch).me();
    expect(performance.now() - started).toBeGreaterThanOrEqual(290);
  });

  it("gives up after maxRetries with the last error", async () => {
    const { fetch, calls } = scripted(
      problem(429, "rate_limited", { "Retry-After": "0" }),
      problem(429, "rate_limited", { "Retry-After": "0" }),
      problem(429, "rate_limited", { "Retry-After": "0" }),
    );
    await expect(client(fetch).me()).rejects.toBeInstanceOf(RateLimitError);
    expect(calls).toHaveLength(3);
  });

  it("retries a 500 for an idempotent call but never for a POST", async () => {
    const get = scripted(problem(500, "internal", { "Retry-After": "0" }), json(me));
    await client(get.fetch).me();
    expect(get.calls).toHaveLength(2);
    const post = scripted(problem(500, "internal", { "Retry-After": "0" }));
    await expect(client(post.fetch).keys.create({ name: "x" })).rejects.toBeInstanceOf(InternalServerError);
    expect(post.calls).toHaveLength(1);
  });

  it("reports an unreachable edge as a connection error", async () => {
    const { fetch } = scripted(new TypeError("fetch failed"));
    await expect(client(fetch, { maxRetries: 0 }).me()).rejects.toBeInstanceOf(APIConnectionError);
  });

  it("times out a slow attempt and reports it as a timeout", async () => {
    const hang = (init?: RequestInit) =>
      new Promise<Response>((_, reject) => init?.signal?.addEventListener("abort", () => reject(init.signal!.reason)));
    const fetch = ((_: unknown, init?: RequestInit) => hang(init)) as typeof globalThis.fetch;
    await expect(client(fetch, { maxRetries: 0, timeout: 50 }).me()).rejects.toBeInstanceOf(APITimeoutError);
  });

  it("aborts at once when the caller's signal fires, without retrying", async () => {
    let calls = 0;
    const fetch = ((_: unknown, init?: RequestInit) => {
      calls++;
      return new Promise<Response>((_, reject) =>
        init?.signal?.addEventListener("abort", () => reject(init.signal!.reason)),
      );
    }) as typeof globalThis.fetch;
    const controller = new AbortController();
    const pending = client(fetch).me({ signal: controller.signal });
    setTimeout(() => controller.abort(), 20);
    await expect(pending).rejects.toMatchObject({ name: "AbortError" });
    expect(calls).toBe(1);
  });

  it("rejects a 2xx body that does not match the protocol", async () => {
    const { fetch } = scripted(json({ hello: "world" }));
    await expect(client(fetch).me()).rejects.toBeInstanceOf(InvalidResponseError);
  });
});

describe("retries under a long-lived signal", () => {
  it("leaves no abort listener behind on the caller's signal, however many retries it waited for", async () => {
    const controller = new AbortController();
    const busy = () => problem(503, "unavailable", { "Retry-After": "0" });
    const { fetch } = scripted(...Array.from({ length: 12 }, busy));
    const sdk = client(fetch, { maxRetries: 3 });
    for (let i = 0; i < 3; i++) await expect(sdk.me({ signal: controller.signal })).rejects.toThrow();
    expect(getEventListeners(controller.signal, "abort")).toHaveLength(0);
  });
});

describe("retryDelay", () => {
  it("reads Retry-After in seconds and as an HTTP date, and falls back to backoff", () => {
    expect(retryDelay(new Headers({ "Retry-After": "2" }), 0)).toBe(2000);
    const now = Date.parse("2026-01-01T00:00:00Z");
    expect(retryDelay(new Headers({ "Retry-After": "Thu, 01 Jan 2026 00:00:05 GMT" }), 0, now)).toBe(5000);
    const fallback = retryDelay(new Headers({ "Retry-After": "soon" }), 1);
    expect(fallback).toBeGreaterThan(700);
    expect(fallback).toBeLessThanOrEqual(1000);
    // An absurd Retry-After is not obeyed blindly.
    expect(retryDelay(new Headers({ "Retry-After": "86400" }), 0)).toBeLessThanOrEqual(500);
  });
});
