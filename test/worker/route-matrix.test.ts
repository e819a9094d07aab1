import { env } from "cloudflare:test";
import { beforeAll, describe, it } from "vitest";
import { generateApiKey } from "../../protocol/api-key.js";
import { SYNC_PROTOCOL, VECTOR_KEY_HEADER } from "../../protocol/sync.js";
import { adminCall, call, createAccount, expectProblem, type Account } from "./harness.js";

/**
 * Every authenticated route, held to the same security and input rules by one table:
 * a new route is covered by adding a line here.
 */
interface Route {
  method: string;
  path: (ids: Ids) => string;
  /** A valid body, for routes that take one. */
  body?: unknown;
  /** Addresses one org's resource by id, so another org must get 404. */
  tenant?: true;
  headers?: Record<string, string>;
  /** Takes fields it does not know (OpenAI's API passes them on to the backend). */
  loose?: true;
  /** For a loose route: a body with a known field mistyped (default: `model: 42`). */
  mistyped?: object;
}
interface Ids {
  keyId: string;
  workspaceId: string;
  orgId: string;
  taskId: string;
  tasksetId: string;
  sessionId: string;
  runId: string;
  evalId: string;
}

const customerRoutes: Route[] = [
  { method: "GET", path: () => "/v1/me" },
  { method: "GET", path: () => "/v1/keys" },
  { method: "POST", path: () => "/v1/keys", body: { name: "k" } },
  { method: "GET", path: () => "/v1/envs/keys" },
  { method: "PUT", path: () => "/v1/envs/keys", body: { publicKey: "CQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQk" } },
  { method: "GET", path: () => "/v1/envs/rows/rollouts?day=2026-01-01&hour=00" },
  { method: "DELETE", path: (ids) => `/v1/keys/${ids.keyId}`, tenant: true },
  { method: "GET", path: () => "/v1/workspaces" },
  { method: "POST", path: () => "/v1/workspaces", body: { name: "w" } },
  { method: "GET", path: (ids) => `/v1/workspaces/${ids.workspaceId}`, tenant: true },
  { method: "GET", path: (ids) => `/v1/workspaces/${ids.workspaceId}/tree`, tenant: true },
  {
    method: "POST",
    path: (ids) => `/v1/workspaces/${ids.workspaceId}/tree/diff`,
    body: { protocol: SYNC_PROTOCOL, dirs: [""] },
    tenant: true,
  },
  {
    method: "POST",
    path: (ids) => `/v1/workspaces/${ids.workspaceId}/tree/reembed`,
    body: { protocol: SYNC_PROTOCOL },
    tenant: true,
  },
  {
    method: "POST",
    path: (ids) => `/v1/workspaces/${ids.workspaceId}/tree/commit`,
    body: { protocol: SYNC_PROTOCOL, upserts: [] },
    tenant: true,
  },
  {
    method: "POST",
    path: (ids) => `/v1/workspaces/${ids.workspaceId}/tree/stage`,
    body: {
      protocol: SYNC_PROTOCOL,
      path: "p".repeat(43),
      hash: "1".repeat(64),
      part: 0,
      chunks: [{ id: "2".repeat(64), text: "x", startLine: 1, endLine: 1 }],
    },
    headers: { [VECTOR_KEY_HEADER]: "k".repeat(43) },
    tenant: true,
  },
  {
    method: "POST",
    path: (ids) => `/v1/workspaces/${ids.workspaceId}/search`,
    body: { protocol: SYNC_PROTOCOL, query: "anything" },
    headers: { [VECTOR_KEY_HEADER]: "k".repeat(43) },
    tenant: true,
  },
  { method: "DELETE", path: (ids) => `/v1/workspaces/${ids.workspaceId}`, tenant: true },
  { method: "GET", path: () => "/v1/usage" },
  { method: "GET", path: () => "/v1/models" },
  { method: "POST", path: () => "/v1/completions", body: { model: "m", prompt: "x" }, loose: true },
  {
    method: "POST",
    path: () => "/v1/chat/completions",
    body: { model: "m", messages: [{ role: "user", content: "x" }] },
    loose: true,
  },
  { method: "POST", path: () => "/v1/embeddings", body: { model: "m", input: "x" }, loose: true },
  { method: "POST", path: () => "/v1/responses", body: { model: "m", input: "x" }, loose: true },
  { method: "GET", path: () => "/v1/agents/tasks" },
  { method: "POST", path: () => "/v1/agents/tasks", body: { prompt: "fix it" } },
  { method: "GET", path: (ids) => `/v1/agents/tasks/${ids.taskId}`, tenant: true },
  {
    method: "POST",
    path: (ids) => `/v1/agents/tasks/${ids.taskId}/files`,
    body: { files: [{ path: "a.txt", content: "eA==" }] },
    tenant: true,
  },
  { method: "POST", path: (ids) => `/v1/agents/tasks/${ids.taskId}/start`, tenant: true },
  { method: "GET", path: (ids) => `/v1/agents/tasks/${ids.taskId}/events`, tenant: true },
  { method: "POST", path: (ids) => `/v1/agents/tasks/${ids.taskId}/messages`, body: { content: "x" }, tenant: true },
  { method: "POST", path: (ids) => `/v1/agents/tasks/${ids.taskId}/cancel`, tenant: true },
  { method: "GET", path: (ids) => `/v1/agents/tasks/${ids.taskId}/diff`, tenant: true },
  { method: "PUT", path: () => `/v1/envs/archives/${"0".repeat(64)}` },
  // The victim's set names this archive: another org learns nothing of whether the host holds it.
  { method: "GET", path: () => `/v1/envs/archives/${"0".repeat(64)}`, tenant: true },
  {
    method: "POST",
    path: () => "/v1/envs/tasksets",
    body: { tasks: [{ sha256: "0".repeat(64), bytes: 1 }] },
  },
  { method: "GET", path: (ids) => `/v1/envs/tasksets/${ids.tasksetId}`, tenant: true },
  {
    method: "POST",
    path: () => "/v1/envs/sessions",
    body: { taskset: "ts_victim000000000000000", task: 0 },
    tenant: true,
  },
  { method: "GET", path: (ids) => `/v1/envs/sessions/${ids.sessionId}`, tenant: true },
  {
    method: "POST",
    path: (ids) => `/v1/envs/sessions/${ids.sessionId}/step`,
    body: { index: 1, tool_calls: [] },
    tenant: true,
  },
  { method: "POST", path: (ids) => `/v1/envs/sessions/${ids.sessionId}/verify`, tenant: true },
  { method: "GET", path: (ids) => `/v1/envs/sessions/${ids.sessionId}/diff`, tenant: true },
  { method: "DELETE", path: (ids) => `/v1/envs/sessions/${ids.sessionId}`, tenant: true },
  {
    method: "POST",
    path: (ids) => `/v1/envs/openenv/${ids.tasksetId}/0/reset`,
    body: {},
    loose: true,
    mistyped: { seed: "x" },
    tenant: true,
  },
  {
    method: "POST",
    path: (ids) => `/v1/envs/openenv/${ids.tasksetId}/0/step`,
    body: { action: { tool_calls: [] }, session_id: "sess_victim00000000000000" },
    tenant: true,
  },
  {
    method: "GET",
    path: (ids) => `/v1/envs/openenv/${ids.tasksetId}/0/state?session_id=${ids.sessionId}`,
    tenant: true,
  },
  {
    method: "POST",
    path: () => "/v1/envs/rollouts",
    // Names the victim's task set: another org's request is refused as if it did not exist.
    body: { taskset: "ts_victim000000000000000", policy: { model: "chat-simulated" }, group_size: 1 },
    tenant: true,
  },
  { method: "GET", path: (ids) => `/v1/envs/rollouts/${ids.runId}`, tenant: true },
  { method: "GET", path: (ids) => `/v1/envs/rollouts/${ids.runId}/events`, tenant: true },
  {
    method: "POST",
    path: () => "/v1/evals/runs",
    // Names the victim's task set, with no model to look up: another org is refused as if it did not exist.
    body: { taskset: "ts_victim000000000000000", agent: "noop" },
    tenant: true,
  },
  { method: "GET", path: () => "/v1/evals/runs?limit=5" },
  { method: "GET", path: (ids) => `/v1/evals/runs/${ids.evalId}`, tenant: true },
  { method: "GET", path: (ids) => `/v1/evals/runs/${ids.evalId}/events`, tenant: true },
  { method: "GET", path: () => "/v1/envs/rows/eval_attempts?day=2026-01-01&hour=00" },
  {
    method: "POST",
    path: () => "/v1/events",
    body: { events: [{ id: "evt-00000001", type: "tab.rejected", at: Date.now() }] },
  },
];

const adminRoutes: Route[] = [
  { method: "GET", path: () => "/admin/orgs" },
  { method: "POST", path: () => "/admin/orgs", body: { name: "o" } },
  { method: "GET", path: (ids) => `/admin/orgs/${ids.orgId}` },
  { method: "PATCH", path: (ids) => `/admin/orgs/${ids.orgId}`, body: { plan: "pro" } },
  { method: "GET", path: (ids) => `/admin/orgs/${ids.orgId}/users` },
  { method: "POST", path: (ids) => `/admin/orgs/${ids.orgId}/users`, body: { email: "m@example.com" } },
  { method: "GET", path: () => "/admin/users?email=a@example.com" },
  { method: "GET", path: (ids) => `/admin/keys?orgId=${ids.orgId}` },
  { method: "POST", path: () => "/admin/keys", body: { userId: "usr_x", name: "k" } },
  { method: "DELETE", path: (ids) => `/admin/keys/${ids.keyId}` },
  { method: "GET", path: () => "/admin/abuse" },
  { method: "POST", path: () => "/admin/abuse/abt_x/lift" },
  { method: "POST", path: (ids) => `/admin/agents/tasks/${ids.taskId}/restart` },
  { method: "GET", path: () => "/admin/lake/partitions?table=editor_events&day=2026-01-01" },
  { method: "GET", path: () => "/admin/lake/files/lake/editor_events/day=2026-01-01/hour=00/part-000001.parquet" },
  {
    method: "POST",
    path: () => "/admin/lake/compact",
    body: { table: "editor_events", day: "2026-01-01", hour: "00" },
  },
];

const label = (r: Route) =>
  `${r.method} ${r.path({ keyId: ":key", workspaceId: ":ws", orgId: ":org", taskId: ":task", tasksetId: ":set", sessionId: ":sess", runId: ":run", evalId: ":eval" })}`;

let victim: Account;
let revoked: Account;
let expired: Account;
let ids: Ids;

beforeAll(async () => {
  victim = await createAccount();
  revoked = await createAccount();
  await adminCall(`/keys/${revoked.key.id}`, { method: "DELETE" });
  expired = await createAccount({ expiresAt: new Date(Date.now() + 1000).toISOString() });
  const ws = (await (await call("/v1/workspaces", { token: victim.key.key, body: { name: "victim" } })).json()) as {
    id: string;
  };
  // The victim's agent task, as the task API records it (no sandbox host runs in these tests: the
  // routes refuse other orgs from this row alone, before the task's object is asked anything).
  const taskId = "task_victim0000000000000";
  await env.DB.prepare("INSERT INTO agent_tasks (id, org_id, user_id, model) VALUES (?, ?, ?, ?)")
    .bind(taskId, victim.org.id, victim.user.id, "chat-simulated")
    .run();
  // The victim's task set and env session, as the environment API records them.
  const tasksetId = "ts_victim000000000000000";
  await env.DB.prepare("INSERT INTO task_sets (id, org_id, user_id, manifest, tasks) VALUES (?, ?, ?, ?, ?)")
    .bind(
      tasksetId,
      victim.org.id,
      victim.user.id,
      JSON.stringify([{ sha256: "0".repeat(64), bytes: 1, settings: {} }]),
      1,
    )
    .run();
  const sessionId = "sess_victim00000000000000";
  await env.DB.prepare("INSERT INTO agent_tasks (id, org_id, user_id, model, kind) VALUES (?, ?, ?, ?, 'env')")
    .bind(sessionId, victim.org.id, victim.user.id, "client")
    .run();
  // The victim's rollout run: one whose member the org's daily sandbox time cannot pay for, so it
  // ends at once and no member is made (no sandbox host runs here).
  const runId = "run_victim00000000000000";
  await env.ENV_RUN.get(env.ENV_RUN.idFromName(runId)).create({
    id: runId,
    orgId: victim.org.id,
    userId: victim.user.id,
    keyId: victim.key.id,
    taskset: tasksetId,
    tasks: [{ index: 0, sha256: "0".repeat(64) }],
    policy: { model: "chat-simulated" },
    groupSize: 1,
    sampling: {},
    limits: {},
    concurrency: 1,
    orgLimits: { concurrentTasks: 1, dailySandboxSeconds: 1 },
  });
  // The victim's eval run, played by that rollout run.
  const evalId = "eval_victim00000000000000";
  await env.DB.prepare(
    "INSERT INTO eval_runs (id, org_id, taskset_id, rollout_run_id, agent, attempts, concurrency) VALUES (?, ?, ?, ?, 'noop', 1, 1)",
  )
    .bind(evalId, victim.org.id, tasksetId, runId)
    .run();
  ids = {
    keyId: victim.key.id,
    workspaceId: ws.id,
    orgId: victim.org.id,
    taskId,
    tasksetId,
    sessionId,
    runId,
    evalId,
  };
  await new Promise((resolve) => setTimeout(resolve, 1100));
});

describe.each(customerRoutes)("$method customer route %#", (route) => {
  const send = (token?: string, extra: { body?: unknown; headers?: Record<string, string> } = {}) =>
    call(route.path(ids), {
      method: route.method,
      token,
      body: route.body,
      ...extra,
      headers: { ...route.headers, ...extra.headers },
    });

  it(`${label(route)}: 401 without a key`, async () => {
    await expectProblem(await send(), 401, "unauthenticated");
  });
  it(`${label(route)}: 401 for a malformed key`, async () => {
    await expectProblem(await send("sxt_short"), 401, "unauthenticated");
  });
  it(`${label(route)}: 401 for an unknown key`, async () => {
    await expectProblem(await send(generateApiKey()), 401, "unauthenticated");
  });
  it(`${label(route)}: 401 for a revoked key`, async () => {
    await expectProblem(await send(revoked.key.key), 401, "unauthenticated");
  });
  it(`${label(route)}: 401 for an expired key`, async () => {
    await expectProblem(await send(expired.key.key), 401, "unauthenticated");
  });
  if (route.body) {
    it(`${label(route)}: 413 for an oversized body`, async () => {
      const huge = JSON.stringify({ name: "x".repeat(Number(env.MAX_BODY_BYTES) + 1) });
      await expectProblem(await send(victim.key.key, { body: huge }), 413, "payload_too_large");
    });
    it(`${label(route)}: 400 for malformed JSON`, async () => {
      await expectProblem(await send(victim.key.key, { body: '{"name": ' }), 400, "invalid_request");
    });
    it(`${label(route)}: 415 for a non-JSON body`, async () => {
      await expectProblem(
        await send(victim.key.key, { body: "name=x", headers: { "Content-Type": "text/plain" } }),
        415,
        "unsupported_media_type",
      );
    });
    it(`${label(route)}: 400 for ${route.loose ? "a mistyped field" : "an unknown field"}`, async () => {
      const body = route.loose
        ? { ...(route.body as object), ...(route.mistyped ?? { model: 42 }) }
        : { ...(route.body as object), surprise: true };
      await expectProblem(await send(victim.key.key, { body }), 400, "invalid_request");
    });
  }
  if (route.tenant) {
    it(`${label(route)}: 404 for another org's resource`, async () => {
      const intruder = await createAccount();
      await expectProblem(await send(intruder.key.key), 404, "not_found");
    });
  }
});

describe.each(adminRoutes)("$method admin route %#", (route) => {
  const send = (token?: string) => call(route.path(ids), { method: route.method, token, body: route.body });

  it(`${label(route)}: 401 without the admin secret`, async () => {
    await expectProblem(await send(), 401, "unauthenticated");
  });
  it(`${label(route)}: 403 with a wrong admin secret`, async () => {
    await expectProblem(await send("not-the-admin-secret-but-long-enough-to-try"), 403, "forbidden");
  });
  it(`${label(route)}: 403 with a customer API key`, async () => {
    await expectProblem(await send(victim.key.key), 403, "forbidden");
  });
});
