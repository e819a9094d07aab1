import { env, SELF } from "cloudflare:test";
import { expect } from "vitest";
import { PROBLEM_CONTENT_TYPE, type ErrorCode } from "../../protocol/errors.js";
import { REQUEST_ID } from "../../protocol/request-id.js";
import { ApiKeyInfo, CreatedApiKey, Org, Problem, User } from "../../protocol/schemas.js";

export const ORIGIN = "https://edge.test";

export interface CallOptions {
  method?: string;
  token?: string;
  body?: unknown;
  headers?: Record<string, string>;
}

/** The `X-Request-Id` each response of `call` was asked with (null: none), for `expectProblem`. */
const sentRequestIds = new WeakMap<Response, string | null>();

/** A request id the edge echoes is one `REQUEST_ID` admits; it mints a v4 UUID otherwise. */
const ECHOED_REQUEST_ID = REQUEST_ID;
export const MINTED_REQUEST_ID = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

/** One request to the Worker under test, through its real fetch handler. */
export async function call(path: string, options: CallOptions = {}): Promise<Response> {
  const headers = new Headers(options.headers);
  if (options.token) headers.set("Authorization", `Bearer ${options.token}`);
  let body: BodyInit | undefined;
  if (options.body !== undefined) {
    body = typeof options.body === "string" ? options.body : JSON.stringify(options.body);
    if (!headers.has("Content-Type")) headers.set("Content-Type", "application/json");
  }
  const response = await SELF.fetch(`${ORIGIN}${path}`, {
    method: options.method ?? (body ? "POST" : "GET"),
    headers,
    body,
  });
  sentRequestIds.set(response, headers.get("X-Request-Id"));
  return response;
}

export const adminCall = (path: string, options: Omit<CallOptions, "token"> = {}) =>
  call(`/admin${path}`, { ...options, token: env.ADMIN_SECRET });

/** Asserts the RFC 9457 envelope, the stable code and that `instance` is the echoed request id. */
/** The problem document, checked against the closed set of codes; extension members are kept. */
export async function expectProblem(
  response: Response,
  status: number,
  code: ErrorCode,
): Promise<Problem & Record<string, unknown>> {
  const text = await response.text();
  expect(response.status, text).toBe(status);
  expect(response.headers.get("Content-Type")).toBe(PROBLEM_CONTENT_TYPE);
  const problem = Problem.parse(JSON.parse(text));
  expect(problem.code).toBe(code);
  expect(problem.status).toBe(status);
  expect(problem.type).toBe(`/errors/${code}`);
  // The caller's id echoed, or one minted in its place; a response that did not come from `call` is
  // held to the characters the edge echoes.
  const sent = sentRequestIds.get(response);
  if (sent === undefined) expect(problem.instance).toMatch(ECHOED_REQUEST_ID);
  else if (sent !== null && ECHOED_REQUEST_ID.test(sent)) expect(problem.instance).toBe(sent);
  else expect(problem.instance).toMatch(MINTED_REQUEST_ID);
  expect(problem.instance).toBe(response.headers.get("X-Request-Id"));
  return { ...JSON.parse(text), ...problem };
}

export async function expectJson<T>(response: Response, status: number, schema: { parse(v: unknown): T }): Promise<T> {
  const text = await response.text();
  expect(response.status, text).toBe(status);
  return schema.parse(JSON.parse(text));
}

let counter = 0;

export interface Account {
  org: Org;
  user: User;
  key: CreatedApiKey;
}

/** Creates an org, a user and a key through the real admin API. */
export async function createAccount(
  options: { plan?: Org["plan"]; role?: User["role"]; org?: Org; expiresAt?: string } = {},
): Promise<Account> {
  const n = ++counter;
  const org =
    options.org ??
    (await expectJson(
      await adminCall("/orgs", { body: { name: `Org ${n}`, plan: options.plan ?? "free" } }),
      201,
      Org,
    ));
  const user = await expectJson(
    await adminCall(`/orgs/${org.id}/users`, {
      body: { email: `user${n}-${crypto.randomUUID()}@example.com`, role: options.role ?? "owner" },
    }),
    201,
    User,
  );
  const key = await expectJson(
    await adminCall("/keys", {
      body: { userId: user.id, name: `key ${n}`, ...(options.expiresAt ? { expiresAt: options.expiresAt } : {}) },
    }),
    201,
    CreatedApiKey,
  );
  return { org, user, key };
}

export { ApiKeyInfo };

/** An encrypted path segment's shape: one character repeated to the 43 a segment needs at least. */
export const seg = (c: string) => c.repeat(43);
/** A keyed hash's shape: one hex digit repeated 64 times. */
export const hex = (c: string) => c.repeat(64);
/** A fresh 32-byte vector key, base64url, as the client sends it in `Sextant-Vector-Key`. */
export const vectorKeyOf = () =>
  btoa(String.fromCharCode(...crypto.getRandomValues(new Uint8Array(32))))
    .replace(/\+/g, "-")
    .replace(/\//g, "_")
    .replace(/=+$/, "");
