import { createMiddleware } from "hono/factory";
import type { AppEnv } from "../app-env.js";
import { authenticate, bearerToken } from "../auth/authenticate.js";
import { internalPrincipal } from "../auth/internal.js";
import { limitUnauthenticated } from "../limits/enforce.js";
import { ApiError } from "../problem.js";

/** Requires a valid, unrevoked, unexpired API key and exposes its principal as `c.get("principal")`. */
export const requireApiKey = createMiddleware<AppEnv>(async (c, next) => {
  const internal = internalPrincipal(c.env);
  if (internal) {
    c.set("principal", internal);
    await next();
    return;
  }
  let principal;
  try {
    principal = await authenticate(c.env, c.get("config"), c.req.header("Authorization"), (p) =>
      c.executionCtx.waitUntil(p),
    );
  } catch (err) {
    // Failed attempts spend their network's limit: a flood of made-up keys gets 429, not 401.
    if (err instanceof ApiError && err.code === "unauthenticated") await limitUnauthenticated(c);
    throw err;
  }
  c.set("principal", principal);
  await next();
});

async function digest(text: string): Promise<ArrayBuffer> {
  return crypto.subtle.digest("SHA-256", new TextEncoder().encode(text));
}

/** Guards the operator surface with `ADMIN_SECRET`, compared in constant time. */
export const requireAdmin = createMiddleware<AppEnv>(async (c, next) => {
  const secret = c.get("config").ADMIN_SECRET;
  if (!secret) throw new ApiError("forbidden", "The admin surface is disabled: ADMIN_SECRET is not set on this edge.");
  const token = bearerToken(c.req.header("Authorization"));
  if (!token) {
    throw new ApiError("unauthenticated", "Send the admin secret as `Authorization: Bearer …`.", {
      headers: { "WWW-Authenticate": 'Bearer realm="sextant-admin"' },
    });
  }
  if (!(await isAdminSecret(token, secret))) throw new ApiError("forbidden", "The admin secret is not valid.");
  await next();
});

/** Whether `given` is the admin secret, compared in constant time. */
export async function isAdminSecret(given: string, secret: string): Promise<boolean> {
  const [a, b] = await Promise.all([digest(given), digest(secret)]);
  return crypto.subtle.timingSafeEqual(a, b);
}
