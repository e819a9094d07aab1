import { createMiddleware } from "hono/factory";
import type { AppEnv } from "../app-env.js";
import { ApiError } from "../problem.js";

const SAFE_METHODS = new Set(["GET", "HEAD", "OPTIONS"]);
/** What `Sec-Fetch-Site` says of a request a page of this origin (or the user, typing or bookmarking) made. */
const SAME_ORIGIN_SITES = new Set(["same-origin", "none"]);

/**
 * Refuses a state-changing request a browser sent from another site, for routes a cookie signs in
 * to (the dashboard): its session cookie is `SameSite=Strict`, but a cross-site form can still sign
 * a browser in or out, or spend its sign-in attempts. `Sec-Fetch-Site` is the browser's own word and
 * decides when present; otherwise `Origin` must be this request's origin. A request with neither
 * comes from no browser (a script, curl), which no other site can make on a user's behalf.
 */
export const sameOriginOnly = createMiddleware<AppEnv>(async (c, next) => {
  if (!SAFE_METHODS.has(c.req.method)) {
    const site = c.req.header("Sec-Fetch-Site");
    const origin = c.req.header("Origin");
    const crossSite =
      site !== undefined ? !SAME_ORIGIN_SITES.has(site) : origin !== undefined && origin !== new URL(c.req.url).origin;
    if (crossSite)
      throw new ApiError(
        "forbidden",
        "A request from another site cannot change the dashboard's session: send it from the dashboard's own page.",
      );
  }
  await next();
});
