/**
 * The OpenEnv front through `npm start`'s edge and its sandbox host: every route's request and answer
 * is checked against OpenEnv's own types (JSON Schemas made from its pydantic models at a pinned
 * commit, test/fixtures/openenv/types.schema.json), over the WebSocket its client speaks and over
 * HTTP; an episode earns the task's verifier reward; and the key, tenant and input paths refuse.
 */
import { createHash } from "node:crypto";
import { request as httpRequest } from "node:http";
import { join } from "node:path";
import { Ajv2020 } from "ajv/dist/2020.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ERROR_CODES, PROBLEM_CONTENT_TYPE } from "../../protocol/errors.js";
import { makeOrg, rawCall, startAgentStack, type AgentStack } from "../support/agent-stack.js";
import { ROOT, savedLocalEdge } from "../support/local-edge.js";
import { archiveOf, conforms, observation, runTerminal, Socket, wsError } from "../support/openenv.js";

let stack: AgentStack;
let key: string;
let taskset: string;
let other: { key: string };

/** The task the episodes play: answer.txt must say `done`; the verifier writes reward.txt. */
const TASK_DIR = join(ROOT, "test/fixtures/harbor-tasks/plain");

beforeAll(async () => {
  stack = await startAgentStack();
  key = savedLocalEdge(stack.edge).apiKey;
  const archive = await archiveOf(TASK_DIR);
  const sha256 = createHash("sha256").update(archive).digest("hex");
  const put = await fetch(`${stack.edge.baseURL}/v1/envs/archives/${sha256}`, {
    method: "PUT",
    headers: { Authorization: `Bearer ${key}`, "Content-Type": "application/gzip" },
    body: new Uint8Array(archive),
  });
  expect(put.status, await put.clone().text()).toBe(201);
  const created = await rawCall(stack.edge, key, "POST", "/v1/envs/tasksets", {
    tasks: [{ sha256, bytes: archive.byteLength }],
  });
  expect(created.status, JSON.stringify(created.json)).toBe(201);
  taskset = (created.json as { id: string }).id;
  other = await makeOrg(stack.edge, "openenv-other");
}, 180_000);
afterAll(async () => {
  await stack?.edge.stop();
});

const base = (task: string | null = "0") => `/v1/envs/openenv/${taskset}${task === null ? "" : `/${task}`}`;
/** A WebSocket to the environment at `base(task)`, as OpenEnv's client opens it. */
const socketTo = (task: string | null, headers: Record<string, string> = {}) =>
  new Socket(`${stack.edge.baseURL}${base(task)}`, headers);

/** The session as the session API reports it, once `until` holds of it. */
async function sessionOf(id: string, until: (s: { done: boolean; status: string }) => boolean = () => true) {
  for (let i = 0; i < 100; i++) {
    const got = await rawCall(stack.edge, key, "GET", `/v1/envs/sessions/${id}`);
    expect(got.status).toBe(200);
    const session = got.json as { done: boolean; status: string; steps: number; reward: number | null };
    if (until(session)) return session;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`session ${id} never came to the state asked for`);
}

describe("the OpenEnv front's descriptive routes", () => {
  it("answer OpenEnv's HealthResponse, EnvironmentMetadata and SchemaResponse with no key", async () => {
    const get = (path: string) => fetch(`${stack.edge.baseURL}${base()}${path}`);
    const health = await get("/health");
    expect(health.status).toBe(200);
    conforms("HealthResponse", await health.json());
    const metadata = await get("/metadata");
    expect(metadata.status).toBe(200);
    conforms("EnvironmentMetadata", await metadata.json());
    const schema = await get("/schema");
    expect(schema.status).toBe(200);
    const schemas = (await schema.json()) as Record<string, object>;
    conforms("SchemaResponse", schemas);
    // The action schema served is the one steps are held to: a turn and a call_tool pass, a bare string does not.
    const action = new Ajv2020({ strict: false }).compile(schemas.action!);
    expect(action(runTerminal("c1", "true"))).toBe(true);
    expect(action({ type: "call_tool", tool_name: "finish", arguments: { summary: "x" } })).toBe(true);
    expect(action({ message: "hello" })).toBe(false);
    // Without the task in the URL too.
    expect((await fetch(`${stack.edge.baseURL}${base(null)}/health`)).status).toBe(200);
  });
});

describe("an episode over OpenEnv's WebSocket", () => {
  it("resets with the key in its data, steps, reports state, and answers the verifier's reward when the agent finishes", async () => {
    const socket = socketTo("0");
    const reset = { seed: 7, api_key: key };
    conforms("ResetRequest", reset);
    const started = observation(await socket.ask({ type: "reset", data: reset }), "ResetResponse");
    expect(started.done).toBe(false);
    expect(started.reward).toBeNull();
    const first = started.observation as unknown as {
      session_id: string;
      messages: { role: string; content: string }[];
      tools: { function: { name: string } }[];
    };
    expect(first.messages.map((m) => m.role)).toEqual(["system", "user"]);
    expect(first.messages[1]!.content).toContain("answer.txt");
    const toolNames = first.tools.map((t) => t.function.name);
    expect(toolNames).toContain("run_terminal");

    const state0 = await socket.ask({ type: "state" });
    conforms("WSStateResponse", state0);
    conforms("State", state0.data);
    expect(state0.data).toMatchObject({ episode_id: first.session_id, step_count: 0, done: false });

    const listed = observation(await socket.ask({ type: "step", data: { type: "list_tools" } }), "StepResponse");
    expect((listed.observation.mcp_tools as { name: string }[]).map((t) => t.name).sort()).toEqual(
      [...toolNames].sort(),
    );
    expect(listed.observation.step_count).toBe(0);

    const wrote = observation(
      await socket.ask({ type: "step", data: runTerminal("call_a", "echo done > answer.txt && cat answer.txt") }),
      "StepResponse",
    );
    expect(wrote).toMatchObject({ done: false, reward: null });
    expect(wrote.observation.step_count).toBe(1);
    const results = wrote.observation.results as { role: string; tool_call_id: string; content: string }[];
    expect(results).toHaveLength(1);
    expect(results[0]).toMatchObject({ role: "tool", tool_call_id: "call_a" });
    expect(results[0]!.content).toContain("done");

    const finished = observation(
      await socket.ask({
        type: "step",
        data: { type: "call_tool", tool_name: "finish", arguments: { summary: "wrote it" } },
      }),
      "StepResponse",
    );
    expect(finished.done).toBe(true);
    expect(finished.reward).toBe(1);
    expect(finished.observation).toMatchObject({ step_count: 2, tool_name: "finish", error: null, components: {} });
    expect(finished.observation.verifier_log).toContain("answer: done");

    const state = await socket.ask({ type: "state" });
    conforms("WSStateResponse", state);
    conforms("State", state.data);
    expect(state.data).toMatchObject({ episode_id: first.session_id, step_count: 2, done: true, reward: 1 });

    // The session takes no step after its end; the refusal is OpenEnv's error message, with the edge's code beside it.
    const late = wsError(await socket.ask({ type: "step", data: runTerminal("call_b", "true") }));
    expect(late).toMatchObject({ code: "SESSION_ERROR", status: 409, error: "conflict" });

    socket.ws.send(JSON.stringify({ type: "close" }));
    expect((await socket.closed).code).toBe(1000);
  }, 120_000);

  it("takes the task from reset's data when the URL names only the set, and scores an untouched tree 0", async () => {
    const socket = socketTo(null);
    const refused = wsError(await socket.ask({ type: "reset", data: { api_key: key } }));
    expect(refused).toMatchObject({ code: "VALIDATION_ERROR", status: 400 });
    const started = observation(await socket.ask({ type: "reset", data: { task: 0 } }), "ResetResponse");
    const ended = observation(
      await socket.ask({
        type: "step",
        data: { type: "call_tool", tool_name: "finish", arguments: { summary: "nothing" } },
      }),
      "StepResponse",
    );
    expect(ended).toMatchObject({ done: true, reward: 0 });
    expect(ended.observation.session_id).toBe(started.observation.session_id);
    socket.ws.close();
    await socket.closed;
  }, 120_000);

  it("starts a fresh session on each reset and ends the one before; closing the socket ends the last", async () => {
    const socket = socketTo("0", { Authorization: `Bearer ${key}` });
    const a = observation(await socket.ask({ type: "reset", data: {} }), "ResetResponse").observation.session_id;
    const b = observation(await socket.ask({ type: "reset", data: {} }), "ResetResponse").observation.session_id;
    expect(b).not.toBe(a);
    expect((await sessionOf(a)).done).toBe(true);
    expect((await sessionOf(b)).done).toBe(false);
    socket.ws.close();
    await socket.closed;
    expect((await sessionOf(b, (s) => s.done)).done).toBe(true);
  }, 120_000);
});

describe("an episode over HTTP", () => {
  it("answers OpenEnv's ResetResponse, StepResponse and State, naming the session in the body and the query", async () => {
    const reset = { seed: 1 };
    conforms("ResetRequest", reset);
    const started = await rawCall(stack.edge, key, "POST", `${base()}/reset`, reset);
    expect(started.status, JSON.stringify(started.json)).toBe(200);
    conforms("ResetResponse", started.json);
    const id = (started.json as { observation: { session_id: string } }).observation.session_id;

    const step = { action: runTerminal("h1", "echo done > answer.txt"), session_id: id };
    conforms("StepRequest", step);
    const stepped = await rawCall(stack.edge, key, "POST", `${base()}/step`, step);
    expect(stepped.status, JSON.stringify(stepped.json)).toBe(200);
    conforms("StepResponse", stepped.json);
    expect(stepped.json).toMatchObject({ done: false, reward: null, observation: { step_count: 1 } });

    const state = await rawCall(stack.edge, key, "GET", `${base()}/state?session_id=${id}`);
    expect(state.status).toBe(200);
    conforms("State", state.json);
    expect(state.json).toMatchObject({ episode_id: id, step_count: 1 });

    const finish = {
      action: { type: "call_tool", tool_name: "finish", arguments: { summary: "done" } },
      session_id: id,
    };
    const finished = await rawCall(stack.edge, key, "POST", `${base()}/step`, finish);
    conforms("StepResponse", finished.json);
    expect(finished.json).toMatchObject({ done: true, reward: 1 });
    expect((await rawCall(stack.edge, key, "DELETE", `/v1/envs/sessions/${id}`)).status).toBe(204);
  }, 120_000);
});

describe("the front's refusals", () => {
  let session: string;
  beforeAll(async () => {
    const started = await rawCall(stack.edge, key, "POST", `${base()}/reset`, {});
    expect(started.status).toBe(200);
    session = (started.json as { observation: { session_id: string } }).observation.session_id;
  }, 60_000);

  async function problem(
    response: Awaited<ReturnType<typeof rawCall>>,
    status: number,
    code: keyof typeof ERROR_CODES,
  ) {
    expect(response.status, JSON.stringify(response.json)).toBe(status);
    expect(response.type).toContain(PROBLEM_CONTENT_TYPE);
    expect(response.json).toMatchObject({ status, code });
  }

  it("refuses HTTP episode routes without a key, with a bad one, and with the key in the body", async () => {
    const bare = (method: string, path: string, body?: unknown) =>
      fetch(`${stack.edge.baseURL}${base()}${path}`, {
        method,
        headers: body === undefined ? {} : { "Content-Type": "application/json" },
        body: body === undefined ? undefined : JSON.stringify(body),
      }).then(async (r) => ({
        status: r.status,
        type: r.headers.get("content-type") ?? "",
        json: (await r.json()) as never,
        retryAfter: null,
      }));
    await problem(await bare("POST", "/reset", {}), 401, "unauthenticated");
    await problem(
      await bare("POST", "/step", { action: runTerminal("x", "true"), session_id: session }),
      401,
      "unauthenticated",
    );
    await problem(await bare("GET", `/state?session_id=${session}`), 401, "unauthenticated");
    await problem(await rawCall(stack.edge, "sxt_not_a_key", "POST", `${base()}/reset`, {}), 401, "unauthenticated");
    await problem(await rawCall(stack.edge, key, "POST", `${base()}/reset`, { api_key: key }), 400, "invalid_request");
  });

  it("answers another org's session and task set as missing", async () => {
    await problem(
      await rawCall(stack.edge, other.key, "GET", `${base()}/state?session_id=${session}`),
      404,
      "not_found",
    );
    await problem(
      await rawCall(stack.edge, other.key, "POST", `${base()}/step`, {
        action: runTerminal("x", "true"),
        session_id: session,
      }),
      404,
      "not_found",
    );
    await problem(await rawCall(stack.edge, other.key, "POST", `${base()}/reset`, {}), 404, "not_found");
    // The session was not stepped by the intruder.
    expect((await sessionOf(session)).steps).toBe(0);
  });

  it("refuses malformed bodies, actions and task references with problem documents", async () => {
    await problem(await rawCall(stack.edge, key, "POST", `${base()}/step`, '{"action": '), 400, "invalid_request");
    await problem(
      await rawCall(stack.edge, key, "POST", `${base()}/step`, "x", { "Content-Type": "text/plain" }),
      415,
      "unsupported_media_type",
    );
    await problem(
      await rawCall(stack.edge, key, "POST", `${base()}/step`, { action: { message: "hi" }, session_id: session }),
      400,
      "invalid_request",
    );
    await problem(
      await rawCall(stack.edge, key, "POST", `${base()}/step`, { action: runTerminal("x", "true") }),
      400,
      "invalid_request",
    );
    await problem(await rawCall(stack.edge, key, "POST", `${base()}/reset`, { seed: "seven" }), 400, "invalid_request");
    await problem(await rawCall(stack.edge, key, "POST", `${base("not-a-task")}/reset`, {}), 404, "not_found");
    await problem(await rawCall(stack.edge, key, "GET", `${base()}/state`), 400, "invalid_request");
    await problem(await rawCall(stack.edge, key, "GET", `${base()}/ws`), 400, "invalid_request");
    expect((await sessionOf(session)).steps).toBe(0);
  });

  it("refuses a WebSocket upgrade whose Authorization header is not a valid key, before it opens", async () => {
    const url = new URL(`${stack.edge.baseURL}${base()}/ws`);
    const answer = await new Promise<{ status: number; type: string; body: string }>((resolve, reject) => {
      const req = httpRequest(url, {
        headers: {
          Connection: "Upgrade",
          Upgrade: "websocket",
          "Sec-WebSocket-Version": "13",
          "Sec-WebSocket-Key": Buffer.from("0123456789abcdef").toString("base64"),
          Authorization: "Bearer sxt_not_a_key",
        },
      });
      req.on("response", (res) => {
        let body = "";
        res.on("data", (chunk: Buffer) => (body += chunk.toString()));
        res.on("end", () => resolve({ status: res.statusCode!, type: String(res.headers["content-type"]), body }));
      });
      req.on("upgrade", () => reject(new Error("the socket opened with a bad key")));
      req.on("error", reject);
      req.end();
    });
    expect(answer.status).toBe(401);
    expect(answer.type).toContain(PROBLEM_CONTENT_TYPE);
    expect(JSON.parse(answer.body)).toMatchObject({ code: "unauthenticated" });
  });

  it("closes a WebSocket whose first message carries no key, or a key that is not valid", async () => {
    const keyless = socketTo("0");
    expect(wsError(await keyless.ask({ type: "state" }))).toMatchObject({ code: "SESSION_ERROR", status: 401 });
    expect((await keyless.closed).code).toBe(1008);

    const unknown = socketTo("0");
    const refused = wsError(await unknown.ask({ type: "reset", data: { api_key: "sxt_not_a_key" } }));
    expect(refused).toMatchObject({ status: 401, error: "unauthenticated" });
    expect((await unknown.closed).code).toBe(1008);
  }, 60_000);

  it("answers bad WebSocket messages with OpenEnv's error codes and another org's task set as missing", async () => {
    const socket = socketTo("0", { Authorization: `Bearer ${other.key}` });
    await socket.opened;
    socket.ws.send("{not json");
    expect(wsError(await socket.next()).code).toBe("INVALID_JSON");
    expect(wsError(await socket.ask({ type: "dance" } as never)).code).toBe("UNKNOWN_TYPE");
    expect(wsError(await socket.ask({ type: "step", data: runTerminal("x", "true") }))).toMatchObject({ status: 409 });
    expect(wsError(await socket.ask({ type: "reset", data: {} }))).toMatchObject({
      code: "SESSION_ERROR",
      status: 404,
      error: "not_found",
    });
    socket.ws.close();
    await socket.closed;
  }, 60_000);
});
