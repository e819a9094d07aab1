/** The Worker's entry module: the HTTP app, the records queue's consumer, the Durable Object classes and the agents' gateway entrypoint. */
import app from "./app.js";
import { consumeRecords } from "./lake/consumer.js";

export default {
  fetch: app.fetch,
  queue: consumeRecords,
} satisfies ExportedHandler<Env>;
export { AgentGateway } from "./agents/gateway-entrypoint.js";
export { AgentQuota } from "../durable-objects/agent-quota.js";
export { SandboxContainer } from "../durable-objects/sandbox-container.js";
export { AgentTask } from "../durable-objects/agent-task/agent-task.js";
export { EnvRun } from "../durable-objects/env-run/env-run.js";
export { GatewayHealth } from "../durable-objects/gateway-health.js";
export { LakePartition } from "../durable-objects/lake/partition.js";
export { RateLimiter } from "../durable-objects/rate-limiter.js";
export { Workspace } from "../durable-objects/workspace.js";
