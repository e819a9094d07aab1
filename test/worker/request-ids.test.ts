import { env, SELF } from "cloudflare:test";
import { Hono } from "hono";
import { beforeAll, describe, expect, it } from "vitest";
import { PROBLEM_CONTENT_TYPE } from "../../protocol/errors.js";
import { REQUEST_ID_HEADER } from "../../protocol/request-id.js";
import app from "../../workers/app.js";
import type { AppEnv } from "../../workers/app-env.js";
import { requestId } from "../../workers/middleware/request-id.js";
import { call, createAccount, MINTED_REQUEST_ID, ORIGIN, type Account } from "./harness.js";

/**
 * Every route the app registers, read from Hono's own list (the `ALL` entries are middleware), so
 * that a route added later is held to the request id rules without anyone adding it here.
 */
const ROUTES = [
  ...new Map(app.routes.filter((r) => r.method !== "ALL").map((r) => [`${r.method} ${r.path}`, r])).values(),
]
  .map(({ method, path }) => ({ method, path }))
  // Deleting goes last, so that the routes of the thing deleted still find it.
  .sort((a, b) => Number(a.method === "DELETE") - Number(b.method === "DELETE"));

/** Ids a client may send and must get back unchanged. */
const WELL_FORMED = ["editor.tab:42-a_B", "7".repeat(64)];

/**
 * Ids that must be replaced, not reflected: too long, empty, spaces, and characters with a meaning
 * in headers, logs or URLs. Each route gets the first two and one of the rest in turn; `/healthz`
 * gets them all.
 */
const MALFORMED = ["7".repeat(65), "has space", "", "a<b>", "a,b", "a;b", "a/b", "a%0d%0ab", 'a"b', "a=b", "a\tb"];
const malformedFor = (i: number) => [MALFORMED[0]!, MALFORMED[1]!, MALFORMED[2 + (i % (MALFORMED.length - 2))]!];

interface Fixture {
  account: Account;
  /** A second key of the account's user, and a workspace of its org, for the routes that delete them. */
  spareKeyId: string;
  workspaceId: string;
  taskId: string;
  lakeFile: string;
}
let f: Fixture;

beforeAll(async () => {
  const account = await createAccount({ plan: "pro" });
  const spare = await call("/v1/keys", { token: account.key.key, body: { name: "spare" } });
  const workspace = await call("/v1/workspaces", { token: account.key.key, body: { name: "ids" } });
  const taskId = "task_requestids00000000";
  await env.DB.prepare("INSERT INTO agent_tasks (id, org_id, user_id, model) VALUES (?, ?, ?, ?)")
    .bind(taskId, account.org.id, account.user.id, "chat-simulated")
    .run();
  const lakeFile = "lake/editor_events/day=2026-01-01/hour=00/part-000001.parquet";
  await env.LAKE.put(lakeFile, new Uint8Array([80, 65, 82, 49]));
  f = {
    account,
    spareKeyId: ((await spare.json()) as { id: string }).id,
    workspaceId: ((await workspace.json()) as { id: string }).id,
    taskId,
    lakeFile,
  };
});

/** A route's path with its parameters filled in with resources of the fixture's account, where there are any. */
function concrete(path: string): string {
  return path
    .replace("/errors/:code", "/errors/not_found")
    .replace(/^\/v1\/keys\/:id/, `/v1/keys/${f.spareKeyId}`)
    .replace(/^\/v1\/workspaces\/:id/, `/v1/workspaces/${f.workspaceId}`)
    .replace(/^\/v1\/agents\/tasks\/:id/, `/v1/agents/tasks/${f.taskId}`)
    .replace(/^\/admin\/agents\/tasks\/:id/, `/admin/agents/tasks/${f.taskId}`)
    .replace(":orgId", f.account.org.id)
    .replace(":keyId", f.spareKeyId)
    .replace("/admin/lake/files/*", `/admin/lake/files/${f.lakeFile}`)
    .replace(/:\w+/g, "unknown");
}

/** Queries that reach the success path of the routes that need one. */
const QUERIES: Record<string, () => string> = {
  "GET /admin/users": () => `?email=${encodeURIComponent("nobody@example.com")}`,
  "GET /admin/keys": () => `?orgId=${f.account.org.id}`,
  "GET /admin/lake/partitions": () => "?table=editor_events&day=2026-01-01",
};

/** The credential each family of routes takes: none for the dashboard's sign-in, the admin secret, an API key. */
function token(path: string): string | undefined {
  if (path.startsWith("/admin/dashboard")) return undefined;
  if (path.startsWith("/admin")) return env.ADMIN_SECRET;
  if (path.startsWith("/v1")) return f.account.key.key;
  return undefined;
}

/** Bodies that reach the success path of the routes that create things; any other body route gets `{}`. */
const BODIES: Record<string, unknown> = {
  "POST /v1/keys": { name: "k" },
  "POST /v1/workspaces": { name: "w" },
  "POST /admin/orgs": { name: "o" },
  "POST /v1/events": { events: [{ id: "evt-request-ids-1", type: "tab.rejected", at: Date.now() }] },
};

async function send(
  method: string,
  path: string,
  options: { token?: string; body?: unknown; id?: string; headers?: Record<string, string> },
): Promise<Response> {
  const headers: Record<string, string> = { ...options.headers };
  if (options.id !== undefined) headers[REQUEST_ID_HEADER] = options.id;
  const response = await call(path, {
    method,
    token: options.token,
    body: method === "GET" || method === "HEAD" || method === "OPTIONS" ? undefined : (options.body ?? {}),
    headers,
  });
  // A problem names the request by the same id as the header.
  if (response.headers.get("Content-Type") === PROBLEM_CONTENT_TYPE)
    expect(((await response.clone().json()) as { instance?: string }).instance).toBe(
      response.headers.get(REQUEST_ID_HEADER),
    );
  // Headers are all this reads: a stream (an agent task's events) is let go.
  await response.body?.cancel();
  return response;
}

it("reads a route list that covers the app's families", () => {
  const paths = new Set(ROUTES.map((r) => r.path));
  for (const path of ["/healthz", "/v1/chat/completions", "/v1/responses", "/admin/dashboard", "/admin/lake/files/*"])
    expect(paths).toContain(path);
  expect(ROUTES.length).toBeGreaterThan(50);
});

describe.each(ROUTES.map((route, i) => ({ ...route, i })))("$method $path", ({ method, path, i }) => {
  const target = () => concrete(path) + (QUERIES[`${method} ${path}`]?.() ?? "");
  const body = BODIES[`${method} ${path}`];

  it("carries a minted id when the client sends none, with and without credentials", async () => {
    for (const credential of [token(path), undefined]) {
      const response = await send(method, target(), { token: credential, body });
      expect(response.headers.get(REQUEST_ID_HEADER), `${response.status}`).toMatch(MINTED_REQUEST_ID);
    }
  });

  it("echoes a well-formed client id", async () => {
    for (const id of WELL_FORMED) {
      const response = await send(method, target(), { token: token(path), body, id });
      expect(response.headers.get(REQUEST_ID_HEADER), `${response.status}`).toBe(id);
    }
  });

  it("replaces a malformed client id with a minted one", async () => {
    for (const id of malformedFor(i)) {
      const response = await send(method, target(), { id });
      expect(response.headers.get(REQUEST_ID_HEADER), JSON.stringify(id)).toMatch(MINTED_REQUEST_ID);
    }
  });

  it("carries the id on a CORS preflight, which the edge refuses", async () => {
    const response = await send("OPTIONS", target(), {
      id: "preflight-1",
      headers: { Origin: "https://editor.example", "Access-Control-Request-Method": method },
    });
    expect(response.status).toBeGreaterThanOrEqual(400);
    expect(response.headers.get(REQUEST_ID_HEADER)).toBe("preflight-1");
  });
});

describe("responses outside the route list", () => {
  it("carries the id on a route that does not exist and on a method a path does not take", async () => {
    for (const [method, path] of [
      ["GET", "/nope"],
      ["PUT", "/v1/chat/completions"],
      ["GET", "/v1/models/chat-test"],
    ] as const) {
      const response = await send(method, path, { id: "unknown-route.1" });
      expect(response.status).toBe(404);
      expect(response.headers.get(REQUEST_ID_HEADER)).toBe("unknown-route.1");
    }
  });

  it("replaces every kind of malformed id", async () => {
    for (const id of MALFORMED) {
      const response = await send("GET", "/healthz", { id });
      expect(response.headers.get(REQUEST_ID_HEADER), JSON.stringify(id)).toMatch(MINTED_REQUEST_ID);
    }
  });

  it("carries the id on a HEAD request", async () => {
    const response = await send("HEAD", "/healthz", { id: "head:1" });
    expect(response.status).toBe(200);
    expect(response.headers.get(REQUEST_ID_HEADER)).toBe("head:1");
  });

  it("sets the id on a response a route built itself, streamed, and on one whose headers are immutable", async () => {
    const relayed = await fetchImmutable();
    const mini = new Hono<AppEnv>()
      .use(requestId)
      .get("/stream", () => new Response(new Blob(["data: 1\n\n"]).stream(), { headers: { "X-Own": "1" } }))
      .get("/immutable", () => relayed);
    const streamed = await mini.request("/stream", { headers: { [REQUEST_ID_HEADER]: "own:1" } });
    expect(streamed.headers.get(REQUEST_ID_HEADER)).toBe("own:1");
    expect(streamed.headers.get("X-Own")).toBe("1");
    expect(await streamed.text()).toBe("data: 1\n\n");
    const passed = await mini.request("/immutable", { headers: { [REQUEST_ID_HEADER]: "own:2" } });
    expect(passed.headers.get(REQUEST_ID_HEADER)).toBe("own:2");
    expect(await passed.json()).toMatchObject({ status: "ok" });
  });
});

/** A response passed on from `fetch`, whose headers cannot be changed. */
async function fetchImmutable(): Promise<Response> {
  const response = await SELF.fetch(`${ORIGIN}/healthz`);
  expect(() => response.headers.set("X-Probe", "1")).toThrow(TypeError);
  return response;
}
