/**
 * How a task object reaches the model: through the edge's own gateway, over a service binding to the
 * Worker's `AgentGateway` entrypoint (never the public internet), as the principal that created the
 * task and in the `background` class, so that agents are metered, rate-limited and shed like any
 * other client and a flood of them cannot slow tab or chat. codebase_search reaches the workspace's
 * search route the same way.
 */
import type { CaptureTag } from "../envs/capture.js";

export interface AgentCaller {
  taskId: string;
  orgId: string;
  keyId: string;
  /** The call is a rollout's: its answer is captured for the rollout's rows (envs/capture.ts). */
  capture?: CaptureTag;
}

export interface AgentModelAnswer {
  /** The gateway's HTTP status. */
  status: number;
  /** Its JSON body: a chat completion, or a problem document. */
  body: unknown;
  /** `Retry-After` in seconds, when the gateway sent one. */
  retryAfter: number | null;
}

export interface AgentModelGateway {
  chat(caller: AgentCaller, body: Record<string, unknown>): Promise<AgentModelAnswer>;
  /**
   * `POST /v1/workspaces/{workspaceId}/search` as the task's principal: codebase_search's edge step.
   * `vectorKey` is the workspace's, from the task's sandbox; it is used for this request only.
   */
  search(caller: AgentCaller, workspaceId: string, body: unknown, vectorKey: string): Promise<AgentModelAnswer>;
}
