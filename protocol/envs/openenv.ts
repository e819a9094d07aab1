/**
 * The OpenEnv front's bodies (`/v1/envs/openenv/{taskset}[/{task}]/...`): OpenEnv's own request and
 * response shapes (meta-pytorch/OpenEnv, `src/openenv/core/env_server/types.py`) over Sextant's env
 * sessions, so OpenEnv's `GenericEnvClient` (and TRL's OpenEnv integration through it) drives a task
 * with no Sextant code. One OpenEnv episode is one env session; an action is one assistant turn.
 */
import { z } from "zod";
import { ArchiveSha256, SessionLimits, SessionUsage, ToolCall, ToolMessage } from "./api.js";

/** A task in the base URL or in `reset`'s data: its index in the set or its archive's SHA-256. */
export const OpenEnvTaskRef = z.union([z.number().int().min(0), ArchiveSha256]);

/**
 * `POST /reset`'s body and the WebSocket `reset` message's `data`. OpenEnv lets a reset carry fields
 * its environment does not take (they are dropped), so unknown fields are accepted and ignored.
 * `episode_id` is accepted and not honoured: the session's id is the episode's.
 */
export const OpenEnvResetRequest = z.looseObject({
  seed: z.number().int().min(0).max(Number.MAX_SAFE_INTEGER).nullable().optional(),
  episode_id: z.string().max(255).nullable().optional(),
  /** The task, when the base URL names only the task set. */
  task: OpenEnvTaskRef.optional(),
  limits: SessionLimits.partial().optional(),
  /**
   * The API key, over the WebSocket only and only when its upgrade carried no `Authorization`
   * header: OpenEnv's client sends no headers, and a key never goes in a URL.
   */
  api_key: z.string().max(256).optional(),
});
export type OpenEnvResetRequest = z.infer<typeof OpenEnvResetRequest>;

/** An assistant turn, as the production agent loop takes it: its tool calls and its text. */
export const ToolCallsAction = z.strictObject({
  tool_calls: z.array(ToolCall).max(64),
  content: z.string().max(1_000_000).nullable().optional(),
  metadata: z.record(z.string(), z.unknown()).optional(),
});

/** OpenEnv's MCP action `CallToolAction`: one tool, its arguments as an object. */
export const CallToolAction = z.strictObject({
  type: z.literal("call_tool"),
  tool_name: z.string().min(1).max(64),
  arguments: z.record(z.string(), z.unknown()).default({}),
  metadata: z.record(z.string(), z.unknown()).optional(),
});

/** OpenEnv's MCP action `ListToolsAction`: answers the tools and runs no step. */
export const ListToolsAction = z.strictObject({
  type: z.literal("list_tools"),
  metadata: z.record(z.string(), z.unknown()).optional(),
});

export const OpenEnvAction = z.union([ToolCallsAction, CallToolAction, ListToolsAction]);
export type OpenEnvAction = z.infer<typeof OpenEnvAction>;

/**
 * `POST /step`'s body. Over HTTP, OpenEnv keeps no episode between requests, so the session is
 * named in the body (`session_id`, from `reset`'s observation). `timeout_s` is accepted and not
 * honoured: the session's limits bound each call. Unlike OpenEnv's, unknown fields are refused, as
 * every Sextant body refuses them, so a misspelt option is reported rather than silently dropped.
 */
export const OpenEnvStepRequest = z.strictObject({
  action: z.record(z.string(), z.unknown()),
  timeout_s: z.number().gt(0).nullable().optional(),
  request_id: z.string().max(255).nullable().optional(),
  session_id: z.string().min(1).max(64),
});

/** An OpenTool schema reduced to what OpenEnv's `list_tools` answers (`name`, `description`, `input_schema`). */
export const McpTool = z.object({
  name: z.string(),
  description: z.string(),
  input_schema: z.record(z.string(), z.unknown()),
});

/**
 * What a reset or a step observes. `done` and `reward` are not in it: OpenEnv sends them beside
 * the observation (`StepResponse`), and so does Sextant.
 */
export const OpenEnvObservation = z.object({
  session_id: z.string(),
  /** Steps run so far. */
  step_count: z.number().int().min(0),
  /** At reset: the system prompt and the task's instruction, as the production agent sees them. */
  messages: z.array(z.object({ role: z.enum(["system", "user"]), content: z.string() })).optional(),
  /** At reset: the production agent's tools, as OpenAI function schemas. */
  tools: z.array(z.unknown()).optional(),
  /** The step's tool results, one per call, in the order of the calls. */
  results: z.array(ToolMessage).optional(),
  /** For a `call_tool` action: OpenEnv's `CallToolObservation` fields. */
  tool_name: z.string().optional(),
  result: z.string().optional(),
  error: z.null().optional(),
  /** For a `list_tools` action. */
  mcp_tools: z.array(McpTool).optional(),
  /** Why the session is done, once it is. */
  reason: z.string().nullable().optional(),
  usage: SessionUsage.optional(),
  /** Once verified: every named number the task's tests wrote (`reward.json`), and their output. */
  components: z.record(z.string(), z.number()).optional(),
  verifier_log: z.string().optional(),
  /** The verifier could not run: the problem's detail; `reward` stays null. */
  verify_error: z.string().optional(),
});
export type OpenEnvObservation = z.infer<typeof OpenEnvObservation>;

/** OpenEnv's `ResetResponse` and `StepResponse` (the same three fields, unknown fields forbidden). */
export const OpenEnvResult = z.strictObject({
  observation: OpenEnvObservation,
  reward: z.number().nullable(),
  done: z.boolean(),
});
export type OpenEnvResult = z.infer<typeof OpenEnvResult>;

/** OpenEnv's `State`: `episode_id` and `step_count`, with the session's own fields beside them. */
export const OpenEnvState = z.looseObject({
  episode_id: z.string().nullable(),
  step_count: z.number().int().min(0),
  status: z.string().optional(),
  done: z.boolean().optional(),
  reason: z.string().nullable().optional(),
  taskset: z.string().optional(),
  task: z.object({ index: z.number().int(), sha256: ArchiveSha256 }).optional(),
  reward: z.number().nullable().optional(),
  components: z.record(z.string(), z.number()).nullable().optional(),
});
export type OpenEnvState = z.infer<typeof OpenEnvState>;

export const OpenEnvHealth = z.strictObject({ status: z.enum(["healthy", "unhealthy", "degraded"]) });

export const OpenEnvMetadata = z.strictObject({
  name: z.string(),
  description: z.string(),
  readme_content: z.string().nullable().optional(),
  version: z.string().nullable().optional(),
  author: z.string().nullable().optional(),
  documentation_url: z.string().nullable().optional(),
});

export const OpenEnvSchemas = z.strictObject({
  action: z.record(z.string(), z.unknown()),
  observation: z.record(z.string(), z.unknown()),
  state: z.record(z.string(), z.unknown()),
});

/** The JSON Schemas `/schema` answers, made from the schemas above. */
export function openEnvSchemas(): z.infer<typeof OpenEnvSchemas> {
  return {
    action: z.toJSONSchema(OpenEnvAction, { io: "input" }) as Record<string, unknown>,
    observation: z.toJSONSchema(OpenEnvObservation) as Record<string, unknown>,
    state: z.toJSONSchema(OpenEnvState) as Record<string, unknown>,
  };
}

/** A WebSocket message from the client (OpenEnv's `WSIncomingMessage`, less `mcp`). */
export const OpenEnvClientMessage = z.discriminatedUnion("type", [
  z.strictObject({ type: z.literal("reset"), data: z.record(z.string(), z.unknown()).default({}) }),
  z.strictObject({ type: z.literal("step"), data: z.record(z.string(), z.unknown()) }),
  z.strictObject({ type: z.literal("state") }),
  z.strictObject({ type: z.literal("close") }),
]);
export type OpenEnvClientMessage = z.infer<typeof OpenEnvClientMessage>;

/** OpenEnv's `WSErrorCode`, which its client prints beside the message. */
export type OpenEnvErrorCode =
  | "INVALID_JSON"
  | "UNKNOWN_TYPE"
  | "VALIDATION_ERROR"
  | "EXECUTION_ERROR"
  | "SESSION_ERROR";

/** A WebSocket answer: OpenEnv's `WSObservationResponse`, `WSStateResponse` or `WSErrorResponse`. */
export type OpenEnvServerMessage =
  | { type: "observation"; data: OpenEnvResult }
  | { type: "state"; data: OpenEnvState }
  | {
      type: "error";
      /** `status` and `error` (Sextant's code) beside OpenEnv's fields, so a client can tell a 404 from a 409. */
      data: { message: string; code: OpenEnvErrorCode; status?: number; error?: string };
    };
