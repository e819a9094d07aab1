/** Each request the edge refuses for a rate limit (429) or to shed load (503), as a `refusals` row. */
import type { Context } from "hono";
import type { AppEnv } from "../app-env.js";
import type { ApiError } from "../problem.js";
import { record } from "./records.js";

export function recordRefusal(c: Context<AppEnv>, error: ApiError): void {
  try {
    const principal = c.get("principal") as AppEnv["Variables"]["principal"] | undefined;
    const limit = error.options.extra?.limit;
    record(c.env, (p) => c.executionCtx.waitUntil(p), "refusals", {
      request_id: c.get("requestId"),
      at: Date.now(),
      org_id: principal?.org.id ?? null,
      user_id: principal?.user.id ?? null,
      key_id: principal?.key.id ?? null,
      route: `${c.req.method} ${c.req.routePath}`,
      class: (c.get("limitClass") as string | undefined) ?? null,
      code: error.code,
      limit: typeof limit === "string" ? limit : null,
    });
  } catch {
    // Recording is best effort: the refusal itself must go out whatever happens here.
  }
}
