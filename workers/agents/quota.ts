/**
 * The org's agent quota as every task takes it (agent tasks, environment sessions, rollouts): a
 * task reserves its whole `sandboxSeconds` budget and a slot before its object is made, and its
 * object settles for what it used when it ends (`AgentQuota`).
 */
import type { Context } from "hono";
import { z } from "zod";
import { AGENT_PLAN_LIMITS, AgentLimitsConfig, TaskLimits } from "../../protocol/agents/task.js";
import type { AppEnv } from "../app-env.js";
import { ConfigError } from "../config.js";
import { ApiError } from "../problem.js";

/**
 * Seconds past its wall time that a reservation outlives a task whose object never settles it (an
 * agent task may also sit uploading before it starts).
 */
const GRACE_SECONDS = 3600;

/**
 * The `AGENT_LIMITS` setting: JSON of per-plan agent limits that replace `AGENT_PLAN_LIMITS` for the
 * plans it names. Every place that reserves agent quota reads it through this one schema.
 */
export const AgentLimitsSetting = z
  .string()
  .transform((text, ctx) => {
    try {
      return JSON.parse(text) as unknown;
    } catch {
      ctx.addIssue({ code: "custom", message: "AGENT_LIMITS is not JSON" });
      return z.NEVER;
    }
  })
  .pipe(AgentLimitsConfig)
  .optional();

const QuotaSettings = z.object({ AGENT_LIMITS: AgentLimitsSetting });

/** Reserves task `id`'s sandbox seconds, or throws the 429 that says which limit the org is at. */
export async function reserveAgentQuota(c: Context<AppEnv>, id: string, requested: Partial<TaskLimits>) {
  const settings = QuotaSettings.safeParse(c.env);
  if (!settings.success)
    throw new ConfigError(`Invalid agent settings: ${settings.error.issues.map((i) => i.message).join("; ")}`);
  const { org } = c.get("principal");
  const limits = TaskLimits.parse(requested);
  const quota = c.env.AGENT_QUOTA.get(c.env.AGENT_QUOTA.idFromName(org.id));
  const orgLimits = settings.data.AGENT_LIMITS?.[org.plan] ?? AGENT_PLAN_LIMITS[org.plan];
  const expiresAt = Date.now() + (limits.wallSeconds + GRACE_SECONDS) * 1000;
  const reserved = await quota.reserve(id, limits.sandboxSeconds, expiresAt, orgLimits);
  if (!reserved.ok)
    throw new ApiError("rate_limited", reserved.message, {
      headers: { "Retry-After": String(reserved.retryAfterSeconds) },
      extra: { limit: reserved.limit },
    });
  return quota;
}
