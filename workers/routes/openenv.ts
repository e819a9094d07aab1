/**
 * The OpenEnv front (`/v1/envs/openenv/{taskset}[/{task}]`): OpenEnv's server routes (`/ws`, `/reset`,
 * `/step`, `/state`, `/schema`, `/health`, `/metadata`) over env sessions. An episode is a session,
 * driven through the session API itself (the same request, answered by the same routes), so it is
 * held to the same ownership, validation, budgets and idempotency as one driven directly.
 *
 * OpenEnv's client (and TRL's OpenEnv integration, through it) speaks only the WebSocket: one
 * connection is one environment, `reset` starts a session on it (ending the one before), and closing
 * it ends the session. Over HTTP, where OpenEnv keeps no episode between requests, `/step` and
 * `/state` name the session that `/reset` answered.
 */
import { Hono, type Context } from "hono";
import {
  OpenEnvClientMessage,
  OpenEnvResetRequest,
  OpenEnvStepRequest,
  OpenEnvTaskRef,
  openEnvSchemas,
  type OpenEnvErrorCode,
  type OpenEnvServerMessage,
} from "../../protocol/envs/openenv.js";
import { VERSION } from "../../protocol/version.js";
import type { AppEnv } from "../app-env.js";
import { authenticate } from "../auth/authenticate.js";
import { requireApiKey } from "../middleware/auth.js";
import { jsonBody } from "../middleware/json-body.js";
import { ApiError } from "../problem.js";
import { Episode, parsed, Refused } from "./openenv-episode.js";

/** The edge's own app, which the front sends each session request through. */
export type Dispatch = (
  request: Request,
  env: Env,
  ctx: Context<AppEnv>["executionCtx"],
) => Response | Promise<Response>;

/** How long a WebSocket opened without a key waits for its `reset` with one. */
const UNAUTHENTICATED_GRACE_MS = 30_000;
/** The largest WebSocket message taken, as a request body is bounded. */
const MAX_MESSAGE_CHARS = 8 * 2 ** 20;

const refusedAsApiError = (err: unknown): never => {
  if (err instanceof Refused) throw new ApiError(err.code, err.detail, err.errors ? { errors: err.errors } : {});
  throw err;
};

/** The WebSocket error code OpenEnv's client prints for a refusal. */
function wsCode(err: Refused): OpenEnvErrorCode {
  if (err.code === "invalid_request") return "VALIDATION_ERROR";
  if (err.status >= 500) return "EXECUTION_ERROR";
  return "SESSION_ERROR";
}

function taskOf(c: Context<AppEnv>): string | number | undefined {
  const task = c.req.param("task");
  if (task === undefined) return undefined;
  const ref = OpenEnvTaskRef.safeParse(/^\d{1,7}$/.test(task) ? Number(task) : task);
  if (!ref.success)
    throw new ApiError("not_found", "The task in the URL is neither an index (0, 1, …) nor an archive's SHA-256.");
  return ref.data;
}

function episodeOf(c: Context<AppEnv>, dispatch: Dispatch, authorization: string | undefined): Episode {
  return new Episode(
    (request) => Promise.resolve(dispatch(request, c.env, c.executionCtx)),
    new URL(c.req.url).origin,
    c.req.param("taskset")!,
    taskOf(c),
    authorization,
    c.req.header("CF-Connecting-IP"),
  );
}

/** The HTTP episode of a request naming its session: the session as the session API last reported it. */
async function namedEpisode(c: Context<AppEnv>, dispatch: Dispatch, sessionId: string): Promise<Episode> {
  const episode = episodeOf(c, dispatch, c.req.header("Authorization"));
  episode.session = { id: sessionId, steps: 0, done: false };
  await episode.state().catch(refusedAsApiError);
  return episode;
}

/** A body that may be left out (OpenEnv's `/reset` takes none): absent, it is `{}`. */
async function optionalBody(c: Context<AppEnv>): Promise<unknown> {
  const declared = c.req.header("Content-Length");
  if (
    (declared === undefined || declared === "0") &&
    !c.req.header("Content-Type") &&
    !c.req.header("Transfer-Encoding")
  )
    return {};
  return jsonBody(c, OpenEnvResetRequest);
}

function acceptWebSocket(c: Context<AppEnv>, dispatch: Dispatch, authorization: string | undefined): Response {
  const episode = episodeOf(c, dispatch, authorization);
  const { 0: client, 1: server } = new WebSocketPair();
  server.accept();
  let closed = false;
  let grace: ReturnType<typeof setTimeout> | undefined;
  const close = (code: number, reason: string) => {
    if (closed) return;
    closed = true;
    if (grace !== undefined) clearTimeout(grace);
    c.executionCtx.waitUntil(episode.end().catch(() => undefined));
    try {
      server.close(code, reason);
    } catch {
      // Already closed by the client.
    }
  };
  if (!authorization) grace = setTimeout(() => close(1008, "send reset with api_key first"), UNAUTHENTICATED_GRACE_MS);
  const send = (message: OpenEnvServerMessage) => server.send(JSON.stringify(message));
  const fail = (message: string, code: OpenEnvErrorCode, refused?: Refused) => {
    send({
      type: "error",
      data: { message, code, ...(refused ? { status: refused.status, error: refused.code } : {}) },
    });
    // A socket with no key yet gets one try at a keyed reset, and one whose key was refused no more.
    if (!episode.authorization || refused?.status === 401) close(1008, "unauthenticated");
  };

  const handle = async (raw: unknown): Promise<void> => {
    if (closed) return;
    if (typeof raw !== "string" || raw.length > MAX_MESSAGE_CHARS) {
      fail("Send each message as JSON text of at most 8 MiB.", "INVALID_JSON");
      return;
    }
    let value: unknown;
    try {
      value = JSON.parse(raw);
    } catch (err) {
      fail(`Invalid JSON: ${(err as Error).message}`, "INVALID_JSON");
      return;
    }
    const type = (value as { type?: unknown } | null)?.type;
    if (!["reset", "step", "state", "close"].includes(type as string)) {
      fail(`Unknown message type: ${String(type)}`, "UNKNOWN_TYPE");
      return;
    }
    try {
      const message = parsed(OpenEnvClientMessage, value, "message");
      if (!episode.authorization) {
        const key = message.type === "reset" ? (message.data as { api_key?: unknown }).api_key : undefined;
        if (typeof key !== "string") {
          const hint = "send `reset` with `api_key` in its data, or open the socket with `Authorization: Bearer sxt_…`";
          fail(`Authenticate first: ${hint}.`, "SESSION_ERROR", new Refused(401, "unauthenticated", ""));
          return;
        }
        episode.authorization = `Bearer ${key}`;
      }
      switch (message.type) {
        case "reset": {
          const result = await episode.reset(message.data);
          if (grace !== undefined) clearTimeout(grace);
          send({ type: "observation", data: result });
          return;
        }
        case "step":
          send({ type: "observation", data: await episode.step(message.data) });
          return;
        case "state":
          send({ type: "state", data: await episode.state() });
          return;
        case "close":
          close(1000, "closed");
          return;
      }
    } catch (err) {
      if (err instanceof Refused) {
        fail(err.detail, wsCode(err), err);
        return;
      }
      console.error(JSON.stringify({ level: "error", message: "openenv message failed", error: (err as Error)?.name }));
      fail("The message failed on the edge.", "EXECUTION_ERROR");
    }
  };

  // One message at a time, in order: a step's index is one past the step before it.
  let queue = Promise.resolve();
  server.addEventListener("message", (event) => {
    queue = queue.then(() => handle(event.data));
  });
  server.addEventListener("close", () => close(1000, "closed"));
  server.addEventListener("error", () => close(1011, "error"));
  return new Response(null, { status: 101, webSocket: client });
}

/** OpenEnv's routes over env sessions; `dispatch` is the edge's own app, which runs each session request. */
export function openenv(dispatch: Dispatch) {
  const routes = new Hono<AppEnv>()
    .get("/health", (c) => c.json({ status: "healthy" as const }))
    .get("/schema", (c) => c.json(openEnvSchemas()))
    .get("/metadata", (c) =>
      c.json({
        name: "sextant",
        description:
          "A Harbor task set on Sextant: each episode is an env session, driven with the production coding agent's tools in a sandbox and rewarded by the task's verifier.",
        version: VERSION,
      }),
    )
    .get("/ws", async (c) => {
      if (c.req.header("Upgrade")?.toLowerCase() !== "websocket") {
        throw new ApiError("invalid_request", "This route is OpenEnv's WebSocket: open it with `Upgrade: websocket`.");
      }
      taskOf(c);
      const authorization = c.req.header("Authorization");
      // A key on the upgrade is checked before the socket opens, so a bad one answers 401 like any route.
      if (authorization !== undefined)
        await authenticate(c.env, c.get("config"), authorization, (p) => c.executionCtx.waitUntil(p));
      return acceptWebSocket(c, dispatch, authorization);
    })
    .post("/reset", requireApiKey, async (c) => {
      const body = await optionalBody(c);
      const episode = episodeOf(c, dispatch, c.req.header("Authorization"));
      if ((body as OpenEnvResetRequest).api_key !== undefined) {
        throw new ApiError("invalid_request", "Send the API key as `Authorization: Bearer …`, not in the body.");
      }
      return c.json(await episode.reset(body).catch(refusedAsApiError));
    })
    .post("/step", requireApiKey, async (c) => {
      const body = await jsonBody(c, OpenEnvStepRequest);
      const episode = await namedEpisode(c, dispatch, body.session_id);
      return c.json(await episode.step(body.action).catch(refusedAsApiError));
    })
    .get("/state", requireApiKey, async (c) => {
      const sessionId = c.req.query("session_id");
      if (!sessionId)
        throw new ApiError(
          "invalid_request",
          "Name the session: `/state?session_id=…` (reset's `observation.session_id`).",
        );
      const episode = await namedEpisode(c, dispatch, sessionId);
      return c.json(await episode.state().catch(refusedAsApiError));
    });
  // The same routes with the task in the base URL, and without it (then `reset` names the task).
  return new Hono<AppEnv>().route("/:taskset/:task", routes).route("/:taskset", routes);
}
