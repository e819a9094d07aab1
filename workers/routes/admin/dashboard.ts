/**
 * The operator's dashboard, `/admin/dashboard`: a login form that takes the admin secret and sets a
 * session cookie, then a page of charts and tables (page.html, drawn with uPlot) whose data is
 * computed at the edge and embedded in it. `GET /admin/dashboard/data` answers the same data as
 * JSON, to the cookie or to `Authorization: Bearer <admin secret>`, and so do the Evals panel's
 * reads: `GET /admin/dashboard/evals/{id}` (any org's eval run, reported) and
 * `GET /admin/dashboard/evals/compare?a=&b=` (run b against run a). Sign-in and sign-out take only
 * requests from the dashboard's own origin, and failed sign-ins are throttled (login-throttle.ts).
 */
import { Hono, type Context } from "hono";
import { deleteCookie, getCookie, setCookie } from "hono/cookie";
import { html as markup } from "hono/html";
import uplotCss from "uplot/dist/uPlot.min.css";
import uplotJs from "uplot/dist/uPlot.iife.min.js";
import { z } from "zod";
import { EvalRunId } from "../../../protocol/evals/api.js";
import { LakeDay } from "../../../protocol/lake.js";
import type { AppEnv } from "../../app-env.js";
import { bearerToken } from "../../auth/authenticate.js";
import page from "../../dashboard/page.html";
import { dashboardData } from "../../dashboard/data.js";
import { dashboardEvalComparison, dashboardEvalReport } from "../../dashboard/evals.js";
import evalsPanel from "../../dashboard/evals-panel.js";
import { beginLogin } from "../../dashboard/login-throttle.js";
import { SESSION_COOKIE, SESSION_PATH, SESSION_TTL_MS, sessionToken, validSession } from "../../dashboard/session.js";
import { isAdminSecret } from "../../middleware/auth.js";
import { bodyText, jsonBody, validated } from "../../middleware/json-body.js";
import { sameOriginOnly } from "../../middleware/same-origin.js";
import { ApiError } from "../../problem.js";

const Query = z.strictObject({ day: LakeDay.optional() });
const CompareQuery = z.strictObject({ a: EvalRunId, b: EvalRunId });

/** The sign-in form's one field; the admin secret is at least 32 characters, and no secret is kilobytes long. */
const SignIn = z.strictObject({ secret: z.string().min(1, "the admin secret is required").max(1024) });

const FORM_TYPE = /^application\/x-www-form-urlencoded\s*(?:;|$)/i;
const JSON_TYPE = /^application\/(?:[\w.+-]+\+)?json\s*(?:;|$)/i;

/**
 * The sign-in's body: the page's form (urlencoded), or JSON from a script. Anything malformed is a
 * problem document (415, 400, 413 past MAX_BODY_BYTES), never the HTML page, which answers only a
 * well-formed sign-in.
 */
async function signInBody(c: Context<AppEnv>): Promise<{ secret: string; form: boolean }> {
  const type = c.req.header("Content-Type") ?? "";
  if (JSON_TYPE.test(type)) return { ...(await jsonBody(c, SignIn)), form: false };
  if (!FORM_TYPE.test(type))
    throw new ApiError(
      "unsupported_media_type",
      "Sign in with the dashboard's form (`application/x-www-form-urlencoded`) or with `application/json`.",
    );
  const text = await bodyText(c);
  const fields = new URLSearchParams(text);
  const names = [...fields.keys()];
  if (new Set(names).size !== names.length)
    throw new ApiError("invalid_request", "The request body is invalid: a field is given more than once.");
  return { ...validated(SignIn, Object.fromEntries(fields), "body"), form: true };
}

function secretOf(c: Context<AppEnv>): string {
  const secret = c.get("config").ADMIN_SECRET;
  if (!secret) throw new ApiError("forbidden", "The admin surface is disabled: ADMIN_SECRET is not set on this edge.");
  return secret;
}

/** The cookie (the browser) or the bearer secret (scripts). */
async function signedIn(c: Context<AppEnv>): Promise<boolean> {
  const secret = secretOf(c);
  const bearer = bearerToken(c.req.header("Authorization"));
  if (bearer) return isAdminSecret(bearer, secret);
  return validSession(secret, getCookie(c, SESSION_COOKIE));
}

/** The data routes answer 401 to anyone else (the page itself answers the sign-in form). */
async function requireSignedIn(c: Context<AppEnv>): Promise<void> {
  if (!(await signedIn(c)))
    throw new ApiError("unauthenticated", "Sign in to the dashboard, or send the admin secret as a bearer token.", {
      headers: { "WWW-Authenticate": 'Bearer realm="sextant-admin"' },
    });
}

const noStore = { "Cache-Control": "no-store" };

/** An HTML answer: nothing cached, framed or referred, and only this edge's scripts (plus the page's own, by nonce). */
function html(c: Context<AppEnv>, body: string, status: 200 | 403 = 200, nonce?: string): Response {
  return c.html(body, status, {
    "Content-Security-Policy": `default-src 'none'; script-src 'self'${nonce ? ` 'nonce-${nonce}'` : ""}; connect-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'`,
    "Cache-Control": "no-store",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
  });
}

function loginPage(c: Context<AppEnv>, message?: string): Response {
  // hono's `html` escapes what it interpolates.
  const body = markup`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Sextant: sign in</title>
<meta name="viewport" content="width=device-width, initial-scale=1"><link rel="icon" href="data:,">
<style>body{font:15px system-ui,sans-serif;margin:10vh auto;max-width:24rem;color:#1f2328}
input,button{font:inherit;padding:.5rem;width:100%;box-sizing:border-box;margin:.25rem 0}
.error{color:#b42318}</style></head>
<body><h1>Sextant operator dashboard</h1>
<form method="post" action="${SESSION_PATH}/session">
<label for="secret">Admin secret</label>
<input id="secret" name="secret" type="password" autocomplete="current-password" required autofocus>
<button type="submit">Sign in</button>
${message ? markup`<p class="error" role="alert">${message}</p>` : ""}
</form></body></html>`;
  return html(c, String(body), message ? 403 : 200);
}

const todayUtc = () => new Date().toISOString().slice(0, 10);

export const adminDashboard = new Hono<AppEnv>()
  .use(sameOriginOnly)
  .get("/", async (c) => {
    const { day = todayUtc() } = validated(Query, c.req.query(), "query");
    if (!(await signedIn(c))) return loginPage(c);
    const data = await dashboardData(c, day);
    const nonce = crypto.randomUUID().replace(/-/g, "");
    // `<` escaped: no value (an org's name) can close the data's script element.
    const json = JSON.stringify(data).replace(/</g, "\\u003c");
    return html(
      c,
      page.replaceAll("{{nonce}}", nonce).replace("{{data}}", () => json),
      200,
      nonce,
    );
  })
  .get("/data", async (c) => {
    const { day = todayUtc() } = validated(Query, c.req.query(), "query");
    await requireSignedIn(c);
    return c.json(await dashboardData(c, day), 200, noStore);
  })
  .get("/evals/compare", async (c) => {
    await requireSignedIn(c);
    const { a, b } = validated(CompareQuery, c.req.query(), "query");
    return c.json(await dashboardEvalComparison(c, a, b), 200, noStore);
  })
  .get("/evals/:id", async (c) => {
    await requireSignedIn(c);
    return c.json(await dashboardEvalReport(c, c.req.param("id")), 200, noStore);
  })
  .post("/session", async (c) => {
    const secret = secretOf(c);
    const given = await signInBody(c);
    const attempt = await beginLogin(c.env, c.req.header("CF-Connecting-IP"));
    if (!(await isAdminSecret(given.secret, secret))) {
      if (given.form) return loginPage(c, "That is not this edge's admin secret.");
      throw new ApiError("forbidden", "That is not this edge's admin secret.");
    }
    await attempt.succeeded();
    setCookie(c, SESSION_COOKIE, await sessionToken(secret), {
      path: SESSION_PATH,
      httpOnly: true,
      secure: new URL(c.req.url).protocol === "https:",
      sameSite: "Strict",
      maxAge: SESSION_TTL_MS / 1000,
    });
    return given.form ? c.redirect(SESSION_PATH, 303) : c.body(null, 204);
  })
  .post("/logout", (c) => {
    deleteCookie(c, SESSION_COOKIE, { path: SESSION_PATH });
    return c.redirect(SESSION_PATH, 303);
  })
  .get("/assets/uplot.js", (c) =>
    c.body(uplotJs, 200, {
      "Content-Type": "text/javascript; charset=utf-8",
      "Cache-Control": "public, max-age=86400",
    }),
  )
  // Revalidated on each load: unlike uPlot's pinned build, the panel changes with the edge.
  .get("/assets/evals.js", (c) =>
    c.body(evalsPanel, 200, {
      "Content-Type": "text/javascript; charset=utf-8",
      "Cache-Control": "no-cache",
    }),
  )
  .get("/assets/uplot.css", (c) =>
    c.body(uplotCss, 200, { "Content-Type": "text/css; charset=utf-8", "Cache-Control": "public, max-age=86400" }),
  );
