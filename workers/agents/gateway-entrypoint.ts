/**
 * The gateway as task objects reach it: a named entrypoint of this Worker, bound to the task objects
 * as `AGENT_GATEWAY` (a service binding, so nothing outside the deployment can call it). A call runs
 * the ordinary route (`POST /v1/chat/completions`, or a workspace's search for codebase_search) as
 * the principal that created the task, in the `background` priority class: the same metering,
 * limits and shedding as any client's request. A rollout's call (`caller.capture`) is captured for its
 * lake rows once answered, off the task's path (envs/capture.ts).
 */
import { WorkerEntrypoint } from "cloudflare:workers";
import type { AgentCaller, AgentModelAnswer, AgentModelGateway } from "../../protocol/agents/gateway.js";
import { CaptureTag } from "../../protocol/envs/capture.js";
import { PRIORITY_HEADER } from "../../protocol/gateway.js";
import { VECTOR_KEY_HEADER } from "../../protocol/sync.js";
import app from "../app.js";
import { keyCache } from "../auth/authenticate.js";
import { INTERNAL_PRINCIPAL } from "../auth/internal.js";
import { loadConfig } from "../config.js";
import { findPrincipalByKeyId } from "../db/accounts.js";
import { database } from "../db/client.js";
import { captureCall } from "../envs/capture.js";

export class AgentGateway extends WorkerEntrypoint<Env> implements AgentModelGateway {
  async chat(caller: AgentCaller, body: Record<string, unknown>): Promise<AgentModelAnswer> {
    const started = Date.now();
    const answer = await this.call(caller, "/v1/chat/completions", body, {});
    const capture = caller.capture ? CaptureTag.safeParse(caller.capture) : null;
    if (capture?.success && answer.status === 200)
      this.ctx.waitUntil(
        captureCall(this.env, { ...caller, capture: capture.data }, body, answer.body, started, Date.now()),
      );
    return answer;
  }

  async search(caller: AgentCaller, workspaceId: string, body: unknown, vectorKey: string): Promise<AgentModelAnswer> {
    return this.call(caller, `/v1/workspaces/${encodeURIComponent(workspaceId)}/search`, body, {
      [VECTOR_KEY_HEADER]: vectorKey,
    });
  }

  /**
   * The principal of the key that started a task, from the isolate's key cache (keyed by the key's id
   * here, by its hash for requests): a task's every turn is a call, and a D1 read per turn was a tenth of
   * the gateway's work for agents. Revoking the key evicts it, as it does a request's entry; other
   * isolates see a revocation within the cache's time to live (`KEY_CACHE_TTL_SECONDS`).
   */
  private async principal(keyId: string) {
    const cache = keyCache(loadConfig(this.env));
    const id = `key-id:${keyId}`;
    let principal = cache.get(id);
    if (principal === undefined) {
      const ticket = cache.ticket();
      principal = await findPrincipalByKeyId(database(this.env.DB), keyId);
      cache.set(id, principal, ticket);
    }
    return principal;
  }

  private async call(
    caller: AgentCaller,
    path: string,
    body: unknown,
    headers: Record<string, string>,
  ): Promise<AgentModelAnswer> {
    const principal = await this.principal(caller.keyId);
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
