export { Agents, TaskDiff, type TaskDiffResponse, type TaskEventsOptions, type UploadedFiles } from "./agents.js";
export { DEFAULT_BASE_URL, Sextant, SextantAdmin } from "./client.js";
export type { ClientOptions, PerRequest, SextantAdminOptions, SextantOptions } from "./client.js";
export * from "./errors.js";
export { parseRateLimit, type RateLimitField } from "./rate-limit.js";
export { TabSession } from "./tab-session.js";
export { PRIORITY_HEADER, SESSION_HEADER } from "../../protocol/gateway.js";
export type * from "../../protocol/schemas.js";
export type * from "../../protocol/agents/task.js";
