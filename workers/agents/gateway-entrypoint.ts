/**
 * The gateway as task objects reach it: a named entrypoint of this Worker, bound to the task objects
 * as `AGENT_GATEWAY` (a service binding, so nothing outside the deployment can call it). A call runs
 * the ordinary route (`POST /v1/chat/completions`, or a workspace's search for codebase_search) as
 * the principal that created the task, in the `background` priority class: the same metering,
 * limits and shedding as any client's request.
 */
import { WorkerEntrypoint } from "cloudflare:workers";
import type { AgentCaller, AgentModelAnswer, AgentModelGateway } from "../../protocol/agents/gateway.js";
import { PRIORITY_HEADER } from "../../protocol/gateway.js";
import { VECTOR_KEY_HEADER } from "../../protocol/sync.js";
import app from "../app.js";
import { INTERNAL_PRINCIPAL } from "../auth/internal.js";
import { findPrincipalByKeyId } from "../db/accounts.js";
import { database } from "../db/client.js";

export class AgentGateway extends WorkerEntrypoint<Env> implements AgentModelGateway {
  async chat(caller: AgentCaller, body: Record<string, unknown>): Promise<AgentModelAnswer> {
    return this.call(caller, "/v1/chat/completions", body, {});
  }

  async search(caller: AgentCaller, workspaceId: string, body: unknown, vectorKey: string): Promise<AgentModelAnswer> {
    return this.call(caller, `/v1/workspaces/${encodeURIComponent(workspaceId)}/search`, body, {
      [VECTOR_KEY_HEADER]: vectorKey,
    });
  }

  private async call(
    caller: AgentCaller,
    path: string,
    body: unknown,
    headers: Record<string, string>,
  ): Promise<AgentModelAnswer> {
    const principal = await findPrincipalByKeyId(database(this.env.DB), caller.keyId);
    const revoked =
      !principal ||
      principal.org.id !== caller.orgId ||
      principal.key.revokedAt !== null ||
      (principal.key.expiresAt !== null && Date.parse(principal.key.expiresAt) <= Date.now());
    if (revoked)
      return {
        status: 401,
        body: { code: "unauthenticated", detail: "The API key that started the task is revoked, expired or gone." },
        retryAfter: null,
      };
    const request = new Request(`https://agents.internal${path}`, {
      method: "POST",
      headers: {
        "Content-Type": "application/json",
        [PRIORITY_HEADER]: "background",
        "X-Request-Id": caller.taskId,
        ...headers,
      },
      body: JSON.stringify(body),
    });
    const response = await app.fetch(request, { ...this.env, [INTERNAL_PRINCIPAL]: principal }, this.ctx);
    const text = await response.text();
    let json: unknown = null;
    try {
      json = JSON.parse(text);
    } catch {
      json = { detail: text.slice(0, 500) };
    }
    const retryAfter = Number(response.headers.get("Retry-After"));
    return {
      status: response.status,
      body: json,
      retryAfter: Number.isFinite(retryAfter) && retryAfter > 0 ? retryAfter : null,
    };
  }
}
